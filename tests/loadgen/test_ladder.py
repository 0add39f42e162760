"""The load ladder: raise the load until output throughput stops rising, bounded by a
maximum; every step an ordinary §3 step. Against the emulator whose batch is capped by
--max-num-seqs: its throughput saturates at exactly that many requests in flight."""

from __future__ import annotations

import httpx
import pytest
from servingbench.emulator import process
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.workload_outputs import throughput_reading
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.ladder import Ladder, stop_reason

from tests.support.loadgen import config, rows


def test_the_ladder_doubles_up_to_its_maximum():
    assert Ladder(start=1, factor=2, max=64).targets() == [1, 2, 4, 8, 16, 32, 64]
    assert Ladder(start=3, factor=2, max=20).targets() == [3, 6, 12]
    # closed loop: always at least one request more, even with a small factor
    assert Ladder(start=1, factor=1.2, max=4).targets() == [1, 2, 3, 4]
    assert Ladder(over="rate", start=0.5, factor=3, max=20).targets() == [0.5, 1.5, 4.5, 13.5]


def test_the_ladder_stops_at_the_bend_or_an_invalid_step():
    ladder = Ladder(min_gain=0.05)
    assert stop_reason(ladder, True, 100.0, None) is None           # the first step
    assert stop_reason(ladder, True, 105.0, 100.0) is None          # +5 %: still rising
    assert "less than 5%" in stop_reason(ladder, True, 104.9, 100.0)
    assert "less than 5%" in stop_reason(ladder, True, 90.0, 100.0)  # falling
    assert stop_reason(ladder, False, 500.0, 100.0) == "the step was invalid"
    assert stop_reason(ladder, True, None, 100.0) == "the step was invalid"


@pytest.mark.parametrize("kw, message", [
    ({"over": "users"}, "ladder.over"),
    ({"factor": 1}, "ladder.factor: must be > 1"),
    ({"start": 8, "max": 4}, "0 < start <= max"),
    ({"start": 1.5}, "whole requests"),
    ({"min_gain": float("nan")}, "ladder.min_gain"),
])
def test_a_bad_ladder_names_its_key(kw, message):
    with pytest.raises(LoadConfigError, match=message):
        Ladder(**kw)


def test_a_ladder_replaces_the_fixed_steps_and_needs_a_judge(tmp_path):
    with pytest.raises(LoadConfigError, match="replaces the concurrency"):
        config("http://127.0.0.1:9", concurrency=[1], ladder=Ladder())
    cfg = config("http://127.0.0.1:9", concurrency=[], ladder=Ladder())
    with pytest.raises(LoadConfigError, match="ladder: needs a judge"):
        run_load(cfg, tmp_path / "run", progress=False)


def test_the_ladder_finds_the_emulators_known_saturation_point(tmp_path):
    # --max-num-seqs 4: the engine batches at most 4 sequences, so output throughput rises
    # from c=1 to c=4 (a decode step of Scout on p5 is memory-bound: 4 sequences take about
    # the time of 1) and is flat beyond (c=8 only queues). The ladder must run c=1, 2, 4, 8,
    # stop at c=8 for want of gain, and never run c=16.
    run_dir = tmp_path / "run"

    def gain_only(step: str) -> tuple[bool, float | None]:
        # the analysis' own figure; validity set aside so that a step flagged client-limited
        # on a crowded host does not stop the ladder before its bend (analyze_run below
        # still judges every step)
        return True, throughput_reading(run_dir, step)[1]

    args = ["--time-scale", "4", "--cold-start-s", "0", "--max-num-seqs", "4"]
    with process.EmulatorProcess(args) as e:
        name = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        cfg = config(e.base_url, model=name, concurrency=[], input_tokens=32, output_tokens=16,
                     requests_per_step=16, ladder=Ladder(start=1, factor=2, max=64,
                                                         min_gain=0.1))
        result = run_load(cfg, run_dir, progress=False, judge=gain_only)
    assert [s["step"] for s in result.steps] == ["c=1", "c=2", "c=4", "c=8"]
    assert result.ladder_stop.startswith("stopped after c=8: output throughput")
    # ordinary steps: in the manifest, in the records, in derived metrics
    manifest = mf.load(run_dir / "manifest.json")
    assert [(s["load_mode"], s["target"]) for s in manifest["steps"]] == [
        ("concurrency", 1.0), ("concurrency", 2.0), ("concurrency", 4.0), ("concurrency", 8.0)]
    assert {r["step"] for r in rows(run_dir)} == {"c=1", "c=2", "c=4", "c=8"}
    analyze_run(run_dir)
    readings = {s: throughput_reading(run_dir, s)[1] for s in ("c=1", "c=2", "c=4", "c=8")}
    assert readings["c=2"] > 1.5 * readings["c=1"] and readings["c=4"] > 1.5 * readings["c=2"]
    assert readings["c=8"] < 1.1 * readings["c=4"]


def test_the_load_command_takes_a_ladder_and_names_a_bad_one(tmp_path, capsys):
    from servingbench.pipelines.cli import load as cli

    base = ["--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "r")]
    assert cli.main([*base, "--ladder", "1:2"]) == 2
    assert "--ladder: expected START:FACTOR:MAX[:MIN_GAIN], got '1:2'" in capsys.readouterr().err
    assert cli.main([*base, "--ladder", "1:1:8"]) == 2
    assert "--ladder: ladder.factor: must be > 1" in capsys.readouterr().err
    assert cli.main([*base, "--ladder", "1:2:8", "--concurrency", "4"]) == 2
    assert "ladder: replaces the concurrency" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    cfg = cli.config_from_args(cli.parser().parse_args([*base, "--ladder", "2:2:32:0.1",
                                                        "--ladder-over", "rate"]))
    assert cfg.ladder == Ladder("rate", 2.0, 2.0, 32.0, 0.1) and cfg.concurrency == []
