"""Both load modes, warm-up separation, request ids, source labelling, manifest handling."""

from __future__ import annotations

import json

import pytest
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, is_uuid, ns, rows


def test_closed_and_open_loop_steps_are_recorded_with_their_names(server, tmp_path):
    cfg = config(server.base_url, concurrency=[1, 3], rates=[40, 2.5], requests_per_step=6)
    result = run_load(cfg, tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert result.n_requests == len(steady) == 24
    by_step = {}
    for r in steady:
        by_step.setdefault((r["step"], r["load_mode"], r["target"]), []).append(r)
    assert sorted(by_step) == [("c=1", "concurrency", 1.0), ("c=3", "concurrency", 3.0),
                               ("rate=2.5", "rate", 2.5), ("rate=40", "rate", 40.0)]
    assert all(len(v) == 6 for v in by_step.values())
    assert {r["status"] for r in steady} == {"ok"}
    assert [s["step"] for s in result.steps] == ["c=1", "c=3", "rate=40", "rate=2.5"]
    m = mf.load(tmp_path / "run" / "manifest.json")
    assert m["steps"] == result.steps and m["source"] == "emulated"
    # closed loop at c=1: the slot frees when the previous request finishes
    c1 = sorted(by_step[("c=1", "concurrency", 1.0)], key=lambda r: ns(r["sent_at"]))
    for prev, cur in zip(c1, c1[1:], strict=False):
        assert ns(cur["scheduled_at"]) >= ns(prev["finished_at"])
    for r in steady:
        assert ns(r["scheduled_at"]) <= ns(r["sent_at"]) <= ns(r["first_token_at"]) \
            <= ns(r["last_token_at"]) <= ns(r["finished_at"])


@pytest.mark.serial  # four sends within one 50 ms answer
def test_closed_loop_keeps_the_target_in_flight(start_server, tmp_path):
    srv = start_server(ttft_ms=50, itl_ms=1)
    run_load(config(srv.base_url, concurrency=[4], requests_per_step=8), tmp_path / "r", progress=False)
    steady = sorted(rows(tmp_path / "r"), key=lambda r: ns(r["sent_at"]))
    first_four_end = min(ns(r["finished_at"]) for r in steady[:4])
    assert all(ns(r["sent_at"]) < first_four_end for r in steady[:4])  # 4 at once, not 1 by 1


def test_warmup_is_separate_and_finished_before_steady(server, tmp_path):
    cfg = config(server.base_url, warmup_requests=5, warmup_concurrency=2, requests_per_step=4)
    result = run_load(cfg, tmp_path / "run", progress=False)
    warm, steady = rows(tmp_path / "run", "warmup_log"), rows(tmp_path / "run")
    assert (result.n_warmup, len(warm), len(steady)) == (5, 5, 4)
    assert {r["phase"] for r in warm} == {"warmup"} and {r["phase"] for r in steady} == {"steady"}
    assert not {r["request_id"] for r in warm} & {r["request_id"] for r in steady}
    assert min(ns(r["sent_at"]) for r in steady) > max(ns(r["finished_at"]) for r in warm)
    chunk_ids = {r["request_id"] for r in rows(tmp_path / "run", "chunk_log")}
    assert chunk_ids == {r["request_id"] for r in warm + steady}  # chunk log holds both phases
    m = mf.load(tmp_path / "run" / "manifest.json")
    assert mf.parse_ts(m["phases"]["warmup"]["ended_at"]) <= mf.parse_ts(m["phases"]["steady"]["started_at"])
    assert mf.parse_ts(m["phases"]["steady"]["started_at"]) <= min(ns(r["sent_at"]) for r in steady)


def test_request_ids_are_uuids_sent_as_x_request_id(server, tmp_path):
    run_load(config(server.base_url), tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert all(is_uuid(r["request_id"]) for r in steady)
    truth = server.truth()
    assert {r["request_id"] for r in steady} == set(truth)  # the server saw the same ids
    for r in steady:
        assert r["output_tokens"] == truth[r["request_id"]]["completion_tokens"] == 8
        assert r["input_tokens"] == truth[r["request_id"]]["prompt_tokens"]


def test_unknown_server_is_measured_but_emulated_header_always_wins(start_server, tmp_path):
    plain = start_server("--no-emulated-header", itl_ms=1)
    assert run_load(config(plain.base_url), tmp_path / "a", progress=False).source == "measured"
    emu = start_server(itl_ms=1)
    base = {"run_id": "given-id", "source": "measured", "instance_type": "p5.48xlarge"}
    result = run_load(config(emu.base_url), tmp_path / "b", manifest_base=base, progress=False)
    m = mf.load(tmp_path / "b" / "manifest.json")
    assert (result.source, m["source"], m["run_id"], m["instance_type"]) == \
        ("emulated", "emulated", "given-id", "p5.48xlarge")
    assert {r["run_id"] for r in rows(tmp_path / "b")} == {"given-id"}


def test_existing_manifest_is_updated_not_replaced(server, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    m = mf.empty("pre-written", "measured", 1_700_000_000_000_000_000)
    m["instance_type"] = "g6e.48xlarge"
    m["phases"] = {"deploy": {"started_at": "2026-11-29T02:00:00.000000000Z",
                              "ended_at": "2026-11-29T02:01:00.000000000Z"}}
    mf.dump(m, run_dir / "manifest.json")
    run_load(config(server.base_url), run_dir, progress=False)
    after = json.loads((run_dir / "manifest.json").read_text())
    assert after["run_id"] == "pre-written" and after["instance_type"] == "g6e.48xlarge"
    assert set(after["phases"]) == {"deploy", "steady"}
    assert after["phases"]["deploy"] == m["phases"]["deploy"]
    assert after["scenario"]["input_tokens"] == 16 and after["scenario"]["seed"] == 0


def test_chat_api(server, tmp_path):
    run_load(config(server.base_url, api="chat"), tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert {(r["status"], r["output_tokens"], r["chunks"]) for r in steady} == {("ok", 8, 8)}


def test_a_bursty_profile_is_a_schedule_sent_segment_by_segment(server, tmp_path):
    # `--profile 0.3:0,0.5:20,0.3:0,0.4:10` is the schedule kind's segments: one step
    # over the whole schedule, each segment at its own rate on one absolute clock
    from servingbench.pipelines.cli.load import config_from_args, parser

    args = parser().parse_args(["--endpoint", server.base_url, "--model", "m", "--out",
                                str(tmp_path / "run"), "--profile", "0.3:0,0.5:20,0.3:0,0.4:10",
                                "--arrival", "constant"])
    cfg = config_from_args(args)
    assert cfg.scenario.kind == "schedule" and len(cfg.scenario.segments) == 4
    cfg = config(server.base_url, concurrency=[], requests_per_step=None, arrival="constant",
                 scenario=cfg.scenario, warmup_requests=0)
    result = run_load(cfg, tmp_path / "run", progress=False)
    steady = rows(tmp_path / "run")
    assert [s["step"] for s in result.steps] == ["schedule"] and len(steady) == 10 + 4
    sent = sorted(ns(r["scheduled_at"]) for r in steady)
    later = [t - sent[0] for t in sent[10:]]  # the 10 req/s segment's, after the idle gap
    assert later[0] == pytest.approx(0.8e9, abs=1e6)


def test_a_run_folder_is_accepted_by_the_analyzer(server, tmp_path):
    from pyarrow.parquet import read_table
    from servingbench.resources.analysis.analyze import analyze_run

    cfg = config(server.base_url, concurrency=[1, 2], rates=[20], requests_per_step=4,
                 warmup_requests=2)
    run_load(cfg, tmp_path / "run", progress=False)
    analysis = analyze_run(tmp_path / "run")
    assert analysis.exit_code == 0, analysis.failed_rules
    gates = json.loads((tmp_path / "run" / "gates.json").read_text())
    assert [g["passed"] for g in gates] == [True, True, True, True, None, None]  # no bill
    metrics = read_table(tmp_path / "run" / "derived_metrics.parquet").to_pylist()
    assert sorted((m["step"], m["n_ok"], m["output_tokens"]) for m in metrics) == \
        [("c=1", 4, 32), ("c=2", 4, 32), ("rate=20", 4, 32)]
    assert {m["source"] for m in metrics} == {"emulated"}


def test_closed_loop_bodies_built_ahead_go_out_in_the_order_the_workload_drew_them(
        server, tmp_path, monkeypatch):
    """While the requests stream, the loop builds the next ones' bodies (so a round that
    ends together finds them ready); they go out first in, first out, each carrying the
    prompt the workload drew for it, whether it was built ahead or at its send."""
    from servingbench.resources.loadgen import connections, loops
    from servingbench.resources.loadgen.prompts import Prompts

    drawn, sent, ahead = [], [], []
    next_item, real_send, prepare = Prompts.next_item, connections.send, loops.LoadLoops._prepare

    def draw(self):
        item = next_item(self)
        drawn.append(item.prompt)
        return item

    async def send(p, url, body, *a, **k):
        sent.append(json.loads(body)["prompt"])
        return await real_send(p, url, body, *a, **k)

    def built_ahead(self, until):
        before = len(self._ready)
        prepare(self, until)
        ahead.append(len(self._ready) - before)

    monkeypatch.setattr(Prompts, "next_item", draw)
    monkeypatch.setattr(connections, "send", send)
    monkeypatch.setattr(loops.LoadLoops, "_prepare", built_ahead)
    cfg = config(server.base_url, concurrency=[4], requests_per_step=24, output_tokens=24)
    run_load(cfg, tmp_path / "run", progress=False)
    assert sum(ahead) > 0  # some were built ahead
    assert len(sent) == 24
    assert sent == drawn[:len(sent)]  # in the order drawn; those left over were drawn last
    assert len(set(sent)) == len(sent)
