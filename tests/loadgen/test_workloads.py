"""Workloads against the emulator as a real process on 127.0.0.1: multi-turn sessions,
trace replay, batch jobs and the SLO capacity search."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from servingbench.emulator import process, specs
from servingbench.emulator.perf import PerfModel
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.workload_outputs import live_probe_verdict
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.scenarios.slo_search import next_concurrency, next_rate
from servingbench.resources.loadgen.scenarios.spec import Scenario
from servingbench.resources.loadgen.scenarios.trace import read_trace

from tests.support.loadgen import config, ns, rows

TRACES = Path(__file__).resolve().parents[2] / "pipelines" / "traces"


@pytest.fixture(scope="module")
def emu():
    with process.EmulatorProcess(["--fixed-timing", "20:2", "--cold-start-s", "0"]) as e:
        e.model = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        yield e


def _sessions(run_dir) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows(run_dir):
        out.setdefault(r["session_id"], []).append(r)
    return {k: sorted(v, key=lambda r: r["turn"]) for k, v in out.items()}


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_multi_turn_history_grows_and_turns_never_overlap(emu, tmp_path, api):
    cfg = config(emu.base_url, model=emu.model, api=api, concurrency=[2], requests_per_step=6,
                 input_tokens=40, output_tokens=8,
                 scenario=Scenario("multi_turn", turns=3, think_time_s=0.01))
    run_load(cfg, tmp_path / "run", progress=False)
    sessions = _sessions(tmp_path / "run")
    assert len(sessions) == 2 and None not in sessions
    for turns in sessions.values():
        assert [r["turn"] for r in turns] == [0, 1, 2]
        assert {r["status"] for r in turns} == {"ok"}
        for prev, cur in zip(turns, turns[1:], strict=False):
            # the whole history (prompt + the server's answer) plus a new message
            assert cur["input_tokens"] >= prev["input_tokens"] + prev["output_tokens"] + 40
            assert ns(cur["sent_at"]) >= ns(prev["finished_at"]) + 10_000_000
            assert ns(cur["scheduled_at"]) == ns(prev["finished_at"]) + 10_000_000
        assert turns[0]["cached_tokens"] == 0
        # later turns find the history in the emulator's prefix cache (16-token blocks); a
        # chat prompt's last 3 tokens (the assistant header) are not in the next history
        tail = 3 if api == "chat" else 0
        for prev, cur in zip(turns, turns[1:], strict=False):
            assert cur["cached_tokens"] >= ((prev["input_tokens"] - tail) // 16) * 16 > 0
    m = mf.load(tmp_path / "run" / "manifest.json")
    assert m["scenario"]["kind"] == "multi_turn" and m["scenario"]["turns"] == 3
    assert analyze_run(tmp_path / "run").exit_code == 0
    import pyarrow.parquet as pq
    split = {r["cache"]: r["n_requests"] for r in
             pq.read_table(tmp_path / "run" / "derived_metrics_by_cache.parquet").to_pylist()}
    assert split == {"hit": 4, "miss": 2}


def test_multi_turn_open_loop_sessions_arrive_at_the_rate(emu, tmp_path):
    cfg = config(emu.base_url, model=emu.model, concurrency=[], rates=[20], arrival="constant",
                 requests_per_step=4, scenario=Scenario("multi_turn", turns=2))
    run_load(cfg, tmp_path / "run", progress=False)
    sessions = _sessions(tmp_path / "run")
    firsts = sorted(ns(t[0]["scheduled_at"]) for t in sessions.values())
    assert len(sessions) == 2 and firsts[1] - firsts[0] == 50_000_000  # 1 / 20 s, exactly
    assert all(r["step"] == "rate=20" for t in sessions.values() for r in t)


def test_mooncake_replay_keeps_the_scaled_times_and_shares_prefixes(emu, tmp_path):
    trace = TRACES / "mooncake_small.jsonl"
    cfg = config(emu.base_url, model=emu.model, concurrency=[],
                 scenario=Scenario("trace", trace=trace, trace_format="mooncake", speedup=2.0))
    run_load(cfg, tmp_path / "run", progress=False)
    got = sorted(rows(tmp_path / "run"), key=lambda r: ns(r["scheduled_at"]))
    want = read_trace(trace, "mooncake")
    assert len(got) == len(want) and {r["status"] for r in got} == {"ok"}
    t0 = ns(got[0]["scheduled_at"])
    for r, w in zip(got, want, strict=True):
        assert ns(r["scheduled_at"]) - t0 == int(w.at_ns / 2.0) - int(want[0].at_ns / 2.0)
        assert r["output_tokens"] == w.output_tokens
        assert r["input_tokens"] == w.input_tokens  # the emulator counts one token per word
    lags = sorted((ns(r["sent_at"]) - ns(r["scheduled_at"])) / 1e9 for r in got)
    assert lags[0] >= 0  # never early
    # never late unnoticed: a loaded machine may send late, but then the self-watch (its
    # scheduling lag p99 over 10 ms) marks the step client-limited; only a step it passed
    # must have kept to the trace's times (a bound that load cannot fail)
    (step,) = mf.load(tmp_path / "run" / "manifest.json")["steps"]
    if not step["client_limited"]:
        assert lags[len(lags) // 2] < 0.05 and lags[-1] < 0.5, (lags, step)
    seen: set[int] = set()
    for r, w in zip(got, want, strict=True):
        first = w.hash_ids[0]
        if first not in seen:
            assert r["cached_tokens"] == 0
        seen.add(first)
    # every request whose first block was sent well before it is a hit
    hits = [r for r, w in zip(got, want, strict=True) if r["cached_tokens"] > 0]
    assert len(hits) >= len(got) // 2
    analyze_run(tmp_path / "run")
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["scenario"]["kind"] == "trace" and m["steps"][0]["load_mode"] == "rate"


def test_replay_bodies_are_all_built_before_the_schedule_starts(emu, tmp_path, monkeypatch):
    # At a send time only the send is left: every body (prompt built block by block, then
    # JSON) exists before the first scheduled time, so the lag measures the scheduling.
    import time

    from servingbench.resources.loadgen.prompts import Prompts

    built: list[int] = []
    real = Prompts.body

    def watched(self, item, stream_options):
        built.append(time.time_ns())
        return real(self, item, stream_options)

    monkeypatch.setattr(Prompts, "body", watched)
    trace = TRACES / "mooncake_small.jsonl"
    cfg = config(emu.base_url, model=emu.model, concurrency=[],
                 scenario=Scenario("trace", trace=trace, trace_format="mooncake", speedup=4.0))
    run_load(cfg, tmp_path / "run", progress=False)
    got = rows(tmp_path / "run")
    assert len(built) == len(got) == len(read_trace(trace, "mooncake"))
    assert {r["status"] for r in got} == {"ok"}
    assert max(built) < min(ns(r["scheduled_at"]) for r in got)
    # the bodies carried the trace's lengths (the emulator counts one token per word)
    assert sorted(r["input_tokens"] for r in got) == sorted(
        w.input_tokens for w in read_trace(trace, "mooncake"))


def test_azure_replay_sends_every_row_with_its_lengths(emu, tmp_path):
    trace = TRACES / "azure_small.csv"
    cfg = config(emu.base_url, model=emu.model, concurrency=[],
                 scenario=Scenario("trace", trace=trace, trace_format="azure", speedup=4.0,
                                   max_requests=20))
    run_load(cfg, tmp_path / "run", progress=False)
    got = sorted(rows(tmp_path / "run"), key=lambda r: ns(r["scheduled_at"]))
    want = read_trace(trace, "azure", 20)
    assert [r["output_tokens"] for r in got] == [w.output_tokens for w in want]
    assert [r["input_tokens"] for r in got] == [w.input_tokens for w in want]
    assert {r["cached_tokens"] for r in got} == {0}  # no prefix information: unique prompts


def test_batch_job_is_one_bounded_closed_loop_step(emu, tmp_path):
    cfg = config(emu.base_url, model=emu.model, concurrency=[3], input_tokens=300,
                 output_tokens=6, scenario=Scenario("batch", requests=10, max_in_flight=3))
    result = run_load(cfg, tmp_path / "run", progress=False)
    got = rows(tmp_path / "run")
    assert len(got) == 10 and [s["step"] for s in result.steps] == ["c=3"]
    events = sorted([(ns(r["sent_at"]), 1) for r in got] + [(ns(r["finished_at"]), -1) for r in got])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 3
    analyze_run(tmp_path / "run")
    job = json.loads((tmp_path / "run" / "job.json").read_text())
    first, last = min(ns(r["sent_at"]) for r in got), max(ns(r["finished_at"]) for r in got)
    assert job["requests"] == 10 and job["ok"] == 10 and job["output_tokens"] == 60
    assert job["makespan_s"] == pytest.approx((last - first) / 1e9)
    assert job["cost_per_job_usd"] is None  # no bill in a load-only run


def test_slo_search_converges_on_the_modelled_emulator_and_records_every_probe(tmp_path):
    # One sequence at a time (max-num-seqs 1): the emulator is a single queue whose service
    # time per request is known from its model, so no rate above 1 / service meets a TTFT
    # SLO of 4 service times once the queue grows. The search starts at that rate: a probe
    # takes 24 / rate seconds, so on a crowded host, where a probe can miss the SLO at any
    # rate, each step down doubles the next probe's time (from a quarter of it, six probes
    # took up to 85 s; from it, six took 65 s on a new machine's suite). Four probes, at most
    # 15 s that way, still bracket the rate and bisect once on a quiet one.
    scale = 0.5
    model = PerfModel(specs.config("p5.48xlarge", "scout", "bf16", None))
    service = (model.prefill_time(64) + 7 * model.decode_step(1, 70)) * scale
    args = ["--time-scale", str(scale), "--cold-start-s", "0", "--max-num-seqs", "1"]
    with process.EmulatorProcess(args) as e:
        name = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        slo = {"ttft_p99_s": 4 * service}
        run_dir = tmp_path / "run"
        cfg = config(e.base_url, model=name, concurrency=[], input_tokens=64, output_tokens=8,
                     arrival="constant", requests_per_step=24,
                     scenario=Scenario("slo_search", slo=slo, max_probes=4,
                                       start_rate=round(1.0 / service, 1)))
        result = run_load(cfg, run_dir, progress=False,
                          judge=lambda step: live_probe_verdict(run_dir, step, slo))
    assert 2 <= len(result.steps) <= 4
    analyze_run(run_dir)
    cap = json.loads((run_dir / "slo_capacity.json").read_text())
    assert [p["step"] for p in cap["probes"]] == [s["step"] for s in result.steps]
    steps = {r["step"] for r in rows(run_dir)}
    assert steps == {p["step"] for p in cap["probes"]}  # every probe is a recorded step
    # the search followed its own rule on the verdicts the analysis gave
    met = not_met = None
    for p, nxt in zip(cap["probes"], cap["probes"][1:], strict=False):
        if p["valid"] and p["met"]:
            met = max(met or 0, p["target"])
        else:
            not_met = min(not_met or float("inf"), p["target"])
        assert nxt["target"] == float(f"{next_rate(p['target'], met, not_met):.4g}")
    # a probe can be invalid on a crowded host (client-limited): then there is no capacity,
    # never a made-up one; when there is one, the emulator's model bounds it
    good = [p["target"] for p in cap["probes"] if p["valid"] and p["met"]]
    assert cap["capacity"] == (max(good) if good else None)
    # A probe is finite (24 requests): above the service rate mu the queue grows by
    # 1/mu - 1/r a request, so the last one waits 24 (1/mu - 1/r), within the 4-service SLO
    # while r <= mu * 24 / 20. That, not mu itself, bounds what a probe can see met.
    if cap["capacity"] is not None:
        assert cap["capacity"] <= (1.0 / service) * 24 / 20


def test_bracketing_then_bisection_converges_within_the_budget():
    for capacity in (0.3, 1.0, 7.0, 37.0, 500.0):
        rate, met, not_met, probes = 1.0, None, None, 0
        while rate is not None and probes < 20:
            probes += 1
            if rate <= capacity:
                met = rate if met is None else max(met, rate)
            else:
                not_met = rate if not_met is None else min(not_met, rate)
            rate = next_rate(rate, met, not_met)
        assert rate is None, capacity  # stopped because the bracket is narrow, not the budget
        assert met <= capacity < not_met and (not_met - met) / not_met <= 0.1


# serial: how many requests a probe keeps in flight (its drain tail) and whether c=3 meets
# with half a service time to spare both depend on a prompt client, which five other
# workers' load takes away (it failed once that way on a fresh clone)
@pytest.mark.serial
def test_slo_search_over_concurrency_converges_on_the_modelled_emulator(tmp_path):
    # One sequence at a time (max-num-seqs 1) and a closed loop of c requests: every request
    # queues behind the c - 1 others, so its TTFT is (c - 1) service times + its prefill.
    # An SLO halfway between c = 3 and c = 4 (2.5 service times + prefill) puts the capacity
    # at exactly 3, half a service time (80 ms) from either side. 20 requests a probe keep a
    # closed loop's drain tail from lowering its achieved concurrency below 0.9 x c. The time
    # scale is what makes one service 160 ms, whatever the calibrated model's speed: the test
    # takes 80 services (four probes), and a fixed scale doubled it when the fit slowed the
    # modelled H100 down.
    model = PerfModel(specs.config("p5.48xlarge", "scout", "bf16", None))
    scale = 0.16 / (model.prefill_time(64) + 7 * model.decode_step(1, 70))
    prefill = model.prefill_time(64) * scale
    service = prefill + 7 * model.decode_step(1, 70) * scale
    slo = {"ttft_p99_s": 2.5 * service + prefill}
    run_dir = tmp_path / "run"

    def slo_only(step: str) -> tuple[bool, bool]:
        # The analysis' own verdict, with validity set aside for the search's direction: on
        # a crowded host the load generator's self-watch can flag a probe client-limited,
        # which would stop the search at c=1 and test nothing of it. slo_capacity.json below
        # still applies validity (an invalid probe never counts as met).
        return True, live_probe_verdict(run_dir, step, slo)[1]

    args = ["--time-scale", str(scale), "--cold-start-s", "0", "--max-num-seqs", "1"]
    with process.EmulatorProcess(args) as e:
        name = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        cfg = config(e.base_url, model=name, concurrency=[], input_tokens=64, output_tokens=8,
                     requests_per_step=20,
                     scenario=Scenario("slo_search", slo=slo, max_probes=6, over="concurrency"))
        result = run_load(cfg, run_dir, progress=False, judge=slo_only)
    analyze_run(run_dir)
    cap = json.loads((run_dir / "slo_capacity.json").read_text())
    assert cap["load_mode"] == "concurrency"
    probes = cap["probes"]
    # what the model predicts: c=1, 2 meet; 4 misses; 3 meets; the bracket [3, 4] is closed,
    # so the search stops after 4 of its 6 probes
    assert [p["step"] for p in probes] == ["c=1", "c=2", "c=4", "c=3"]
    assert [p["step"] for p in probes] == [s["step"] for s in result.steps]
    # c=4 misses by a queue that load only lengthens; c=1 and c=2 meet with 1.5 service
    # times to spare; c=3 meets with half of one (~80 ms), which a client slowed by a loaded
    # machine can spend: that verdict is checked below when the self-watch passed every probe
    assert [p["met"] for p in probes][:3] == [True, True, False]
    assert next_concurrency(3, 3, 4) is None
    # every probe is an ordinary closed-loop step of the run, with its requests recorded
    got = rows(run_dir)
    assert {r["load_mode"] for r in got} == {"concurrency"}
    assert all(sum(r["step"] == p["step"] for r in got) == 20 for p in probes)
    assert all(s["load_mode"] == "concurrency" for s in mf.load(run_dir / "manifest.json")["steps"])
    # each verdict is the probe's measured p99 TTFT against the SLO, and the emulator's queue
    # bounds that TTFT from below (c - 1 requests ahead; a slow client only adds to it)
    import pyarrow.parquet as pq

    metrics = {r["step"]: r for r in pq.read_table(run_dir / "derived_metrics.parquet").to_pylist()}
    for p in probes:
        m = metrics[p["step"]]
        assert p["met"] == (m["ttft_s_p99"] <= slo["ttft_p99_s"]) and p["valid"] == m["valid"]
        assert m["ttft_s_p99"] >= 0.95 * ((p["target"] - 1) * service + prefill)
        assert m["achieved_concurrency"] >= 0.9 * p["target"]  # the drain tail stays short
    if all(p["valid"] for p in probes):
        assert probes[3]["met"] is True
        assert cap["capacity"] == 3 and cap["interval"] == [3, 4]
    else:  # a client-limited probe is never met: the capacity can only come out lower
        assert cap["capacity"] is None or cap["capacity"] <= 3


def test_concurrency_bisection_converges_within_the_budget():
    for capacity in (1, 2, 3, 7, 12, 37, 100):
        c, met, not_met, probes = 1, None, None, 0
        while c is not None and probes < 20:
            probes += 1
            if c <= capacity:
                met = c if met is None else max(met, c)
            else:
                not_met = c if not_met is None else min(not_met, c)
            c = next_concurrency(c, met, not_met)
        assert c is None, capacity
        assert met <= capacity < not_met
        assert not_met - met <= 1 or (not_met - met) / not_met <= 0.1
    assert next_concurrency(1, None, 1) is None  # one in flight already missed: no capacity
