"""The real local engine: llama.cpp's server (llama-cpp-python, `make engine`) serving
Gemma 3 270M on 127.0.0.1. Skipped, with the reason, only when the engine or the model is
not installed; `make test` installs both first, so CI runs these.

One module-scoped server serves the protocol tests and the Q4 quality reference (asked once
per module); the chain test and the Q2_K run start their own (through the model server
resource), and every test checks that nothing outlives it.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import REAL_FILE
from servingbench.resources.model_server.local.llamacpp import (
    LlamaCppModelServer,
    engine_available,
    model_file_for,
)

WHY = engine_available()
pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"real engine: {WHY}"),
              pytest.mark.slow]


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)      # the whole process group, not just the leader
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def candidates():
    return {c.name: c for c in load_candidates(REAL_FILE)}


@pytest.fixture(scope="module")
def server(candidates, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("deploy")
    with LlamaCppModelServer().deploy(candidates["local-gemma3-270m-q4"], None, run_dir) as dep:
        yield dep, run_dir
    assert _gone(dep.details["pid"])


Q4 = "local-gemma3-270m-q4"


def _prepare(runs: Path, i: int, cand: str) -> Path:
    """A measured run folder of `cand` for a quality evaluation (its manifest only)."""
    from servingbench.resources.contract import manifest as mf

    run_dir = runs / f"run{i}"
    run_dir.mkdir(parents=True)
    m = mf.empty(f"run{i}", "measured", 1_000 + i)
    m["candidate"] = cand
    mf.dump(m, run_dir / "manifest.json")
    return run_dir


@pytest.fixture(scope="module")
def q4_reference(candidates, server, tmp_path_factory):
    """The Q4 reference, asked once per module of the module's server (the same candidate
    and model file, already up): the default set's first 20 items. The parity proof holds
    the Q2_K model against it; the chain test holds the answers of its own, freshly started
    Q4 process against its first items. Returns (runs folder, run folder, summary)."""
    from servingbench.resources.quality import evaluate
    from servingbench.resources.quality.evalset import build

    dep = server[0]
    assert dep.details["model_file"] == str(model_file_for(candidates[Q4]))
    name, items = build(20, 0)
    runs = tmp_path_factory.mktemp("quality") / "runs"
    run_dir = _prepare(runs, 0, Q4)
    summary = evaluate(dep.endpoint, dep.served_model, "run0", run_dir, name, items, 8)
    return runs, run_dir, summary


def test_deploy_records_cold_start_and_is_measured(server):
    dep, run_dir = server
    assert not dep.emulated
    assert {"deploy", "weights_load", "ready"} <= set(dep.phases)
    assert dep.facts["model_revision"].startswith("sha256:a5fd3b62")
    doc = json.loads((run_dir / "deployment.json").read_text())
    assert doc["emulated"] is False and doc["parallel"] == 1


def test_protocol_facts_the_adapters_rely_on(server):
    dep, _ = server
    base = dep.endpoint
    body = {"model": dep.served_model, "prompt": "Count: one two", "max_tokens": 4,
            "stream": True, "temperature": 0}
    # a non-UUID request id is refused; a UUID one is served
    assert httpx.post(f"{base}/v1/completions", json=body,
                      headers={"X-Request-ID": "not-a-uuid"}, timeout=60).status_code == 400
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60,
                      headers={"X-Request-ID": str(uuid.uuid4())}) as r:
        assert r.status_code == 200
        events = [ln for ln in r.iter_lines() if ln.startswith("data: {")]
    assert events and not any(json.loads(e[6:]).get("usage") for e in events)  # no usage
    # tokenize: llama-cpp-python's shape, not vLLM's
    assert httpx.post(f"{base}/tokenize", json={"prompt": "a b"}, timeout=10).status_code == 404
    r = httpx.post(f"{base}/extras/tokenize/count", json={"input": "hello world"}, timeout=10)
    assert r.status_code == 200 and r.json()["count"] >= 2
    # the launcher's /metrics: llama.cpp's counter names plus finished requests
    text = httpx.get(f"{base}/metrics", timeout=10).text
    assert "llamacpp:tokens_predicted_total" in text
    assert 'servingbench:requests_finished_total{status="200"}' in text


def test_chain_on_the_real_engine_is_measured_and_reconciled(tmp_path, candidates, q4_reference):
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen.generator import LoadGenerator

    from tests.support.chain import checks, materialized, run_job

    quick = LoadGenerator(concurrency=(1, 2), requests_per_step=4, warmup_requests=1,
                         output_tokens=8, input_tokens=32)
    cands = tmp_path / "cands.yaml"
    # a few quality items prove the chain evaluates and records them; the quality proof
    # below is the test that needs enough of them to separate two models
    text = REAL_FILE.read_text().replace(
        "items: 40", "items: 4")
    cands.write_text(text.replace("sheet: price_sheet_local.yaml",
                                  f"sheet: {REAL_FILE.parent / 'price_sheet_local.yaml'}"))
    settings = Settings(data_dir=tmp_path / "data", candidates_file=cands, load=quick)
    result, _ = run_job(tmp_path, settings=settings, candidate="local-gemma3-270m-q4")
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    assert all(checks(result).values()), checks(result)
    md = materialized(result)
    run_dir = Path(md["provisioned_cluster"]["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["source"] == "measured"
    assert manifest["nodegroup"].startswith("this host: ") and manifest["instance_ids"]
    assert manifest["engine"].startswith("llama.cpp")
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet").to_pylist()
    assert {r["status"] for r in steady} == {"ok"}
    assert {r["output_tokens_source"] for r in steady} == {"chunks"}
    assert manifest["scenario"]["prompt_sizing"] == "tokenize"
    for name in ("derived_metrics", "cost_per_1m", "headline"):
        assert set(pq.read_table(run_dir / f"{name}.parquet")["source"].to_pylist()) == {"measured"}
    bill = pq.read_table(run_dir / "bill.parquet").to_pylist()
    assert {b["source"] for b in bill} == {"price_sheet"}
    rec = json.loads((run_dir / "reconciliation.json").read_text())
    assert rec["available"] and not rec["flagged_steps"], rec
    summary = json.loads((run_dir / "quality_summary.json").read_text())
    assert summary["n"] == 4 and summary["accuracy"] is not None
    assert md["quality"]["status"] == "evaluated"
    # temperature 0 is reproducible across processes: this run's engine, a fresh process that
    # loaded the model again, answers its items (the default set's first four) exactly as the
    # module's server answered them for the Q4 reference
    keys = ("item_id", "prompt_sha256", "got", "correct")
    ours = [{k: r[k] for k in keys} for r in pq.read_table(run_dir / "quality.parquet").to_pylist()]
    ref = pq.read_table(q4_reference[1] / "quality.parquet").to_pylist()
    assert ours == [{k: r[k] for k in keys} for r in ref[:4]]
    assert _gone(json.loads((run_dir / "deployment.json").read_text())["pid"])


def test_q2k_requantized_fails_parity_against_q4(candidates, q4_reference):
    """The proof: the same model requantized Q4_K_M → Q2_K answers the same default set
    worse, with intervals apart; the Q4 reference, the first measured run of its group, sets
    the bar. (That a fresh Q4 process answers as the reference did is the chain test's.)"""
    from servingbench.resources.quality import evaluate, find_reference, parity
    from servingbench.resources.quality.evalset import build

    # Measured on this host (60 items): Q4_K_M 27/60 = 0.45 [0.33, 0.58], Q2_K 0/60. On the
    # first n items Q4 gets 8/20 [0.22, 0.61] against Q2_K's 0/20 [0, 0.16]: apart; at 16
    # (6/16 [0.18, 0.61] against [0, 0.19]) they are not, so 20 is the fewest that prove it.
    name, items = build(20, 0)
    runs, ref_dir, s0 = q4_reference
    sha = s0["eval_set_sha256"]
    q4 = parity(s0, Q4, Q4, 0.05, find_reference(runs, Q4, sha, exclude=ref_dir))
    cand = "local-gemma3-270m-q2k"
    c = candidates[cand]
    c = replace(c, llamacpp=replace(c.llamacpp, model_file=str(model_file_for(c))))
    run_dir = _prepare(runs, 1, cand)
    with LlamaCppModelServer().deploy(c, None, run_dir) as dep:
        s1 = evaluate(dep.endpoint, dep.served_model, "run1", run_dir, name, items, 8)
    assert _gone(dep.details["pid"])
    q2 = parity(s1, cand, Q4, 0.05, find_reference(runs, Q4, sha, exclude=run_dir))
    assert q4.passed is True
    assert q2.passed is False and q2.status == "fail", q2.message
    assert q2.reference_run_id == "run0" and q2.accuracy < q4.accuracy
