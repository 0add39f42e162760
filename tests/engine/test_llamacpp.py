"""The real local engine: llama.cpp's server (llama-cpp-python, `make engine`) serving
Gemma 3 270M on 127.0.0.1. Skipped, with the reason, only when the engine or the model is
not installed; `make test` installs both first, so CI runs these.

One module-scoped server serves the protocol tests and the quality proof's first run; the
chain test and the quality proof's other runs start their own (through the model server
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

from pipelines.catalog import load_candidates
from pipelines.config import REAL_FILE
from resources.model_server.llamacpp import (
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


def test_chain_on_the_real_engine_is_measured_and_reconciled(tmp_path, candidates):
    from pipelines.profiles import Settings
    from resources.loadgen.generator import LoadGenerator
    from tests.support.chain import checks, materialized, run_job

    quick = LoadGenerator(concurrency=(1, 2), requests_per_step=4, warmup_requests=1,
                         output_tokens=8, input_tokens=32)
    cands = tmp_path / "cands.yaml"
    # a few quality items prove the chain evaluates and records them; the quality proof
    # below is the test that needs enough of them to separate two models
    text = REAL_FILE.read_text().replace(
        "items: 40", "items: 4")
    cands.write_text(text.replace("pipelines/price_sheet_local.yaml",
                                  str(REAL_FILE.parent / "price_sheet_local.yaml")))
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
    assert _gone(json.loads((run_dir / "deployment.json").read_text())["pid"])


def test_q2k_requantized_fails_parity_against_q4(tmp_path, candidates, server):
    """The proof: the same model requantized Q4_K_M → Q2_K answers the same default set
    worse, with intervals apart; the Q4 reference passes against its own earlier run."""
    from resources.contract import manifest as mf
    from resources.quality import evaluate, find_reference, parity
    from resources.quality.evalset import build

    # Measured on this host (60 items): Q4_K_M 27/60 = 0.45 [0.33, 0.58], Q2_K 0/60; 20 items
    # keep the intervals apart at a third of the time.
    name, items = build(20, 0)
    runs = tmp_path / "runs"
    results = {}

    def prepare(i: int, cand: str) -> Path:
        run_dir = runs / f"run{i}"
        run_dir.mkdir(parents=True)
        m = mf.empty(f"run{i}", "measured", 1_000 + i)
        m["candidate"] = cand
        mf.dump(m, run_dir / "manifest.json")
        return run_dir

    def measure(i: int, cand: str, run_dir: Path, dep) -> None:
        s = evaluate(dep.endpoint, dep.served_model, f"run{i}", run_dir, name, items, 8)
        ref = find_reference(runs, "local-gemma3-270m-q4", s["eval_set_sha256"], exclude=run_dir)
        results[i] = parity(s, cand, "local-gemma3-270m-q4", 0.05, ref)

    # The first Q4 run asks the module's server (the same candidate and model file, already
    # up), which saves a start; the Q2_K run and the second Q4 run start their own, so the
    # rerun that must match the first is a fresh process that loaded the model again.
    q4_file = str(model_file_for(candidates["local-gemma3-270m-q4"]))
    assert server[0].details["model_file"] == q4_file
    measure(0, "local-gemma3-270m-q4", prepare(0, "local-gemma3-270m-q4"), server[0])
    for i, cand in ((1, "local-gemma3-270m-q2k"), (2, "local-gemma3-270m-q4")):
        c = candidates[cand]
        c = replace(c, llamacpp=replace(c.llamacpp, model_file=str(model_file_for(c))))
        run_dir = prepare(i, cand)
        with LlamaCppModelServer().deploy(c, None, run_dir) as dep:
            measure(i, cand, run_dir, dep)
        assert _gone(dep.details["pid"])
    q4, q2, q4_again = results[0], results[1], results[2]
    assert q4.passed is True
    assert q2.passed is False and q2.status == "fail", q2.message
    assert q2.accuracy < q4.accuracy
    assert q4_again.passed is True and q4_again.accuracy == q4.accuracy, q4_again.message
