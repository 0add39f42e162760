"""`scenario.kind: schedule`: segments or a named shape, one steady step `schedule` whose
target is the time-weighted mean rate (contract §3.7), bad input named by its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.config_file import from_dict, to_dict
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.scenarios.schedule import mean_rate, plan
from servingbench.resources.loadgen.scenarios.spec import from_mapping

from tests.support.emulator import FIXED_MODEL
from tests.support.loadgen import config, ns, rows

DAY = Path(__file__).resolve().parents[2] / "pipelines" / "day_load.csv"


def scenario(**kw):
    s, _ = from_mapping({"kind": "schedule", **kw})
    return s


def test_mean_rate_is_time_weighted_with_zero_segments_included():
    # 10 s at 0, 5 s at 12, 5 s at 4 → (0 + 60 + 20) / 20 = 4.0
    segs = [{"duration_s": 10, "rate": 0}, {"duration_s": 5, "rate": 12},
            {"duration_s": 5, "rate": 4}]
    assert mean_rate(segs) == 4.0


@pytest.mark.parametrize(("shape", "want"), [
    ("step", [(30.0, 1.0), (30.0, 9.0)]),
    ("spike", [(24.0, 1.0), (12.0, 9.0), (24.0, 1.0)]),
    ("ramp", [(15.0, 1.0), (15.0, 11 / 3), (15.0, 19 / 3), (15.0, 9.0)]),
    ("zero-burst-zero", [(20.0, 0.0), (20.0, 9.0), (20.0, 0.0)]),
])
def test_named_shapes_expand_into_segments(shape, want):
    s = scenario(shape=shape, base_rate=1, peak_rate=9, length_s=60)
    got = [(round(g["duration_s"], 9), round(g["rate"], 9)) for g in s.segments]
    assert got == [(round(d, 9), round(r, 9)) for d, r in want]


def test_day_shape_compresses_24_hours_and_keeps_the_rates():
    s = scenario(shape="day", day_csv=str(DAY), compress=1440)
    assert len(s.segments) == 24
    assert {g["duration_s"] for g in s.segments} == {2.5}  # 3600 / 1440
    hourly = [float(line.split(",")[1]) for line in DAY.read_text().splitlines()[1:]]
    assert [g["rate"] for g in s.segments] == hourly


def test_the_manifest_keeps_the_expansion_beside_the_shape():
    d = scenario(shape="spike", base_rate=0, peak_rate=5, length_s=10).describe()
    assert d["kind"] == "schedule" and d["shape"] == "spike"
    assert d["segments"] == [{"duration_s": 4.0, "rate": 0.0}, {"duration_s": 2.0, "rate": 5.0},
                             {"duration_s": 4.0, "rate": 0.0}]


def test_a_config_file_round_trip_keeps_the_schedule(tmp_path):
    cfg = config("http://127.0.0.1:1", concurrency=[], requests_per_step=None,
                 scenario=scenario(segments=[{"duration_s": 1, "rate": 3}]))
    back = from_dict(json.loads(json.dumps(to_dict(cfg))))
    assert back.scenario.segments == [{"duration_s": 1.0, "rate": 3.0}]


@pytest.mark.parametrize(("given", "names"), [
    ({}, "scenario.segments"),
    ({"segments": []}, "scenario.segments"),
    ({"segments": [{"duration_s": 1}]}, r"scenario.segments\[0\].rate: required"),
    ({"segments": [{"duration_s": 0, "rate": 1}]}, r"scenario.segments\[0\].duration_s"),
    ({"segments": [{"duration_s": 1, "rate": -1}]}, r"scenario.segments\[0\].rate"),
    ({"segments": [{"duration_s": 1, "rat": 1}]}, r"scenario.segments\[0\].rat: unknown key"),
    ({"segments": [{"duration_s": 1, "rate": 0}]}, "every segment's rate is 0"),
    ({"shape": "spik"}, r"scenario.shape: 'spik' is not one of .*did you mean 'spike'"),
    ({"shape": "day"}, "scenario.day_csv: shape day needs"),
    ({"shape": "day", "day_csv": "/nonexistent.csv"}, "scenario.day_csv: cannot read"),
    ({"shape": "spike", "peak_rate": 0}, "scenario.peak_rate"),
    ({"shape": "ramp", "levels": 0}, "scenario.levels"),
    ({"segmets": []}, "scenario.segmets: unknown key .*did you mean 'segments'"),
])
def test_a_bad_schedule_names_its_key(given, names):
    with pytest.raises(LoadConfigError, match=names):
        scenario(**given)


def test_a_day_csv_missing_an_hour_names_the_file(tmp_path):
    bad = tmp_path / "day.csv"
    bad.write_text("hour,rate\n" + "".join(f"{h},1\n" for h in range(23)))
    with pytest.raises(LoadConfigError, match=r"scenario.day_csv: .*day.csv: 23 hours"):
        scenario(shape="day", day_csv=str(bad))


def test_constant_arrivals_follow_each_segment_on_one_schedule():
    offsets, target, length = plan([{"duration_s": 1, "rate": 0}, {"duration_s": 1, "rate": 4},
                                    {"duration_s": 0.5, "rate": 0}], "constant", seed=0)
    assert list(offsets) == [1.0, 1.25, 1.5, 1.75]
    assert target == pytest.approx(4 / 2.5) and length == 2.5


def test_a_schedule_runs_as_one_step_named_schedule(server, tmp_path):
    s = scenario(segments=[{"duration_s": 0.3, "rate": 0}, {"duration_s": 0.4, "rate": 20},
                           {"duration_s": 0.3, "rate": 0}])
    cfg = config(server.base_url, concurrency=[], requests_per_step=None, arrival="constant",
                 scenario=s)
    result = run_load(cfg, tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    target = 8 / 1.0  # 0.4 s × 20 req/s over 1.0 s
    assert [(st["step"], st["load_mode"], st["target"]) for st in result.steps] == [
        ("schedule", "rate", pytest.approx(target))]
    assert result.steps[0]["target"] == steady[0]["target"]  # the same float (§3.7)
    assert len(steady) == 8 and {r["status"] for r in steady} == {"ok"}
    assert {(r["step"], r["load_mode"]) for r in steady} == {("schedule", "rate")}
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["scenario"]["kind"] == "schedule" and len(m["scenario"]["segments"]) == 3
    # the quiet lead is kept: the first send is 0.3 s after the steady phase's start, and the
    # quiet tail is part of the step: the steady phase lasts the whole schedule
    from servingbench.resources.contract.manifest import parse_ts
    began, ended = (parse_ts(m["phases"]["steady"][k]) for k in ("started_at", "ended_at"))
    assert min(ns(r["scheduled_at"]) for r in steady) - began >= 0.3e9
    assert ended - began >= 1.0e9


def test_the_load_command_runs_a_schedule_file(server, tmp_path):
    from servingbench.pipelines.cli import load as cli

    sched = tmp_path / "burst.yaml"
    sched.write_text("segments:\n  - {duration_s: 0.2, rate: 0}\n  - {duration_s: 0.3, rate: 20}\n")
    out = tmp_path / "run"
    code = cli.main(["--endpoint", server.base_url, "--model", FIXED_MODEL, "--out", str(out),
                     "--schedule", str(sched), "--arrival", "constant", "--warmup-requests", "0",
                     "--input-tokens", "16", "--output-tokens", "4", "--no-progress"])
    assert code == 0
    steady = rows(out)
    assert len(steady) == 6 and {r["step"] for r in steady} == {"schedule"}


@pytest.mark.parametrize(("flag", "says"), [
    ("spik", "--schedule: 'spik' is neither a file nor a shape .*did you mean 'spike'"),
    ("spike:peak_rate=-1", "--schedule.peak_rate: must be a finite non-negative number"),
    ("spike:peek_rate=3", "--schedule.peek_rate: unknown key .*did you mean 'peak_rate'"),
    ("ramp:levels", "--schedule: expected KEY=VALUE"),
])
def test_a_bad_schedule_flag_exits_2_naming_it(tmp_path, capsys, flag, says):
    import re

    from servingbench.pipelines.cli import load as cli

    code = cli.main(["--endpoint", "http://127.0.0.1:9", "--model", "m", "--out",
                     str(tmp_path / "r"), "--schedule", flag])
    assert code == 2
    assert re.search(says, capsys.readouterr().err)


def test_the_day_shape_defaults_to_the_shipped_curve():
    from servingbench.pipelines.cli.load_workload import schedule_from_arg

    s = schedule_from_arg("day:compress=2880")
    assert len(s.segments) == 24 and s.segments[0]["duration_s"] == 1.25
