"""Real vLLM (its CPU build, `make engine-vllm`) on 127.0.0.1, held against everything
servingbench reads from it: every metric name engines/vllm.py gives (the sampler's gauges,
the reconciliation's counters and histograms, the speculative-decoding counters), the
endpoints the load generator and the sampler use (/tokenize, /v1/models, /version, /health,
usage on every chunk), and the counters that must move when the prefix cache hits and the
KV cache runs out. A renamed metric or a changed answer fails here, not in a paid run.

One server for the module (a start costs about a minute of both cores), started by the model
server itself with n-gram speculative decoding (so the speculative counters are served) and
a KV cache of 18 blocks of 128 tokens (so four long requests run it out); the chain test is
handed that running server. Skipped, with the reason, only when vLLM is not installed;
`make test` installs it first.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.resources.contract.candidate import SpeculativePlan
from servingbench.resources.http.prometheus import parse
from servingbench.resources.loadgen import records, sse
from servingbench.resources.loadgen.prompts import VOCAB, Tokenizer
from servingbench.resources.loadgen.server_metrics import snapshot
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.local.vllm_cpu import (
    VllmModelServer,
    engine_version,
    group_members,
)

from tests.support.vllm import EAGER, WHY, Running, candidate

pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"vLLM's CPU build: {WHY}"),
              pytest.mark.slow]

BLOCK = 128  # the CPU build's KV block (and prefix-cache) size; the GPU build's is 16
BLOCKS = 18  # 2,304 tokens: one request of the model's 2,048 and the drafts' lookahead
VLLM = engines.get("vllm")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    c = replace(candidate(), speculative=SpeculativePlan(method="ngram", draft_tokens=3))
    run_dir = tmp_path_factory.mktemp("vllm")
    ms = VllmModelServer(extra_args=(*EAGER, "--num-gpu-blocks-override", str(BLOCKS)))
    with ms.deploy(c, None, run_dir) as dep:
        yield c, dep, run_dir
    assert not group_members(dep.details["pid"])  # the API server, engine core and worker


def _metrics(dep) -> str:
    r = httpx.get(f"{dep.endpoint}/metrics", timeout=30)
    assert r.status_code == 200
    return r.text


def _complete(dep, prompt: str, max_tokens: int, stream: bool = True) -> list[dict]:
    """The events of one streamed completion with usage on every chunk, as the load
    generator asks for them."""
    body = {"model": dep.served_model, "prompt": prompt, "max_tokens": max_tokens,
            "stream": stream, "ignore_eos": True, "min_tokens": max_tokens,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", f"{dep.endpoint}/v1/completions", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def _words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def test_the_deployment_is_measured_and_records_its_start(server):
    c, dep, run_dir = server
    assert not dep.emulated and dep.served_model == c.model
    assert dep.facts["engine_version"] == engine_version() and dep.facts["model_revision"]
    # the engine's own "compiled" log marker (engines/vllm.py MARKERS, which the Kubernetes
    # cold-start split reads too) was seen: the ready phase runs from it to /health
    assert {"deploy", "ready"} <= set(dep.phases)
    doc = json.loads((run_dir / "deployment.json").read_text())
    assert doc["emulated"] is False and doc["load_format"] == "dummy"
    assert doc["args"][:2] == ["serve", doc["model_dir"]]
    assert "--speculative-config" in doc["args"]


def test_every_metric_name_the_adapter_reads_is_served(server):
    _, dep, _ = server
    _complete(dep, "time year people way day", 8)  # every histogram has an observation
    samples = parse(_metrics(dep))
    served = set(samples)
    # the sampler's gauges: vLLM's current name of each (gpu_cache_usage_perc is the older
    # one, kept for older servers; this one must serve the first)
    for metric, names in VLLM.gauges.items():
        assert names[0] in served, (metric, names[0])
    k = VLLM.counters
    assert {k.generation_tokens, k.prompt_tokens, k.finished} <= served
    reasons = {labels["finished_reason"] for labels, _ in samples[k.finished]}
    assert {"length", "stop", *k.failed_reasons} <= reasons
    for base in {k.ttft, *k.histograms.values()}:
        assert {f"{base}_bucket", f"{base}_count", f"{base}_sum"} <= served, base
    assert set(k.totals.values()) <= served
    # and the adapter's own reading of them: nothing it asks for comes back empty
    snap = snapshot(_metrics(dep))
    assert snap["ttft_buckets"] and snap["ttft_count"] >= 1 and not snap["emulated"]
    assert set(snap["histograms"]) == set(k.histograms)
    assert set(snap["totals"]) == set(k.totals)


def test_the_endpoints_the_load_generator_uses(server):
    c, dep, _ = server
    base = dep.endpoint
    assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    models = httpx.get(f"{base}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == [c.model] and models[0]["max_model_len"] == c.max_model_len
    assert httpx.get(f"{base}/version", timeout=10).json() == {
        "version": engine_version().removesuffix("+cpu")}
    # prompt sizing: vLLM's /tokenize shape is the one the load generator keeps
    tok = Tokenizer(base, dep.served_model, {}, enabled=True)
    assert tok.count("time year people way day") == 5 and tok.url == f"{base}/tokenize"
    body = httpx.post(f"{base}/tokenize", json={"model": c.model, "prompt": "time year"},
                      timeout=10).json()
    assert body["count"] == len(body["tokens"]) == 2


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_usage_is_on_every_chunk_and_cached_tokens_on_the_last(server, api):
    _, dep, _ = server
    body = {"model": dep.served_model, "max_tokens": 12, "min_tokens": 12, "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body |= ({"messages": [{"role": "user", "content": "time year people"}]} if api == "chat"
             else {"prompt": "time year people"})
    url = f"{dep.endpoint}/v1/{'chat/completions' if api == 'chat' else 'completions'}"
    with httpx.stream("POST", url, json=body, timeout=120) as r:
        raw = r.read()
    events = [json.loads(ln[6:]) for ln in raw.decode().splitlines()
              if ln.startswith("data: {")]
    assert all(e.get("usage") for e in events)
    counts = [e["usage"]["completion_tokens"] for e in events]
    assert counts == sorted(counts) and counts[-1] == 12
    assert "cached_tokens" in events[-1]["usage"]["prompt_tokens_details"]
    # the load generator's parser reads the same bytes as the server counted them
    req = records.Request("r", "steady", "c=1", "concurrency", 1.0, 0)
    stream = sse.Events(req)
    stream.feed(raw, 0)
    stream.close(())
    assert req.status == "ok" and sum(req.chunk_tokens) == 12
    assert req.input_tokens == events[-1]["usage"]["prompt_tokens"]
    assert req.cached_tokens == events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_repeated_prompt_hits_the_prefix_cache_in_whole_blocks(server):
    _, dep, _ = server
    prompt = _words(7, 300)  # one token per word with this tokenizer: two whole blocks
    before = snapshot(_metrics(dep))["totals"]
    first = _complete(dep, prompt, 4)[-1]["usage"]
    second = _complete(dep, prompt, 4)[-1]["usage"]
    after = snapshot(_metrics(dep))["totals"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached == first["prompt_tokens"] // BLOCK * BLOCK == 2 * BLOCK
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] == cached
    assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == 2 * first[
        "prompt_tokens"]


def test_requests_beyond_the_kv_cache_are_preempted_and_still_finish(server):
    _, dep, _ = server
    before = snapshot(_metrics(dep))
    # each request of 400 + 800 tokens is admitted with 4 blocks for its prompt and needs 10
    # by its end: all four fit at admission (16 of the 18 blocks) and any two that overlap
    # outgrow them. Most of each request is decoding (800 steps), so a busy host that lets
    # the API server hand them over seconds apart still has them overlap
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda i: _complete(dep, _words(100 + i, 400), 800), range(4)))
    after = snapshot(_metrics(dep))
    assert all(events[-1]["usage"]["prompt_tokens"] == 400 for events in done)
    assert all(events[-1]["usage"]["completion_tokens"] == 800 for events in done)
    assert after["totals"]["preemptions"] - before["totals"]["preemptions"] >= 1
    assert after["request_success"]["length"] - before["request_success"]["length"] == 4


def test_the_telemetry_sampler_reads_vllms_gauges(server):
    from servingbench.resources.telemetry import sources  # the package, by the source's kind

    _, dep, _ = server
    source = sources.KINDS["engine_metrics"](
        {"kind": "engine_metrics", "url": f"{dep.endpoint}/metrics"}, {"timeout_s": 5})
    try:
        got = {metric for _, metric, _ in source.sample()}
    finally:
        source.close()
    assert {"kv_cache_usage", "requests_running", "requests_waiting"} <= got


def test_chain_on_vllm_is_measured_and_reconciled(server, tmp_path):
    from servingbench.pipelines.config import REAL_FILE
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen.generator import LoadGenerator

    from tests.support.chain import checks, materialized, run_job

    c, dep, run_dir0 = server
    quick = LoadGenerator(concurrency=(1, 3), requests_per_step=6, warmup_requests=2,
                         output_tokens=16, input_tokens=64)
    text = REAL_FILE.read_text().replace(
        "quality: {reference: local-cpu-q4-t1, margin: 0.05, items: 20, max_tokens: 8}\n\n",
        "quality: {reference: local-vllm-tiny, margin: 0.05, items: 4, max_tokens: 8}\n"
        "    speculative: {method: ngram, draft_tokens: 3}\n\n")
    assert "speculative: {method: ngram" in text
    cands = tmp_path / "cands.yaml"
    cands.write_text(text.replace("sheet: price_sheet_local.yaml",
                                  f"sheet: {REAL_FILE.parent / 'price_sheet_local.yaml'}"))
    settings = Settings(data_dir=tmp_path / "data", candidates_file=cands, load=quick)
    result, _ = run_job(tmp_path, settings=settings, candidate=c.name,
                        resources={"model_server": Running(dep, run_dir0)})
    assert result.success, [e.event_specific_data.error.message for e in result.all_events
                            if e.is_step_failure]
    assert all(checks(result).values()), checks(result)
    run_dir = Path(materialized(result)["provisioned_cluster"]["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["source"] == "measured" and manifest["engine"].startswith("vLLM")
    assert manifest["nodegroup"].startswith("this host: ")
    assert manifest["scenario"]["prompt_sizing"] == "tokenize"
    assert manifest["scenario"]["stream_options"]["continuous_usage_stats"] is True
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet").to_pylist()
    assert {r["status"] for r in steady} == {"ok"}
    assert {r["output_tokens_source"] for r in steady} == {"usage"}
    assert all(r["cached_tokens"] is not None for r in steady)  # from the final usage chunk
    for name in ("derived_metrics", "cost_per_1m", "headline"):
        assert set(pq.read_table(run_dir / f"{name}.parquet")["source"].to_pylist()) == {"measured"}
    # vLLM's own gauges in the telemetry, its counters and histograms in the reconciliation
    telemetry = pq.read_table(run_dir / "telemetry.parquet").to_pylist()
    assert {"kv_cache_usage", "requests_running", "requests_waiting"} <= {
        t["metric"] for t in telemetry if t["source"] == "engine_metrics"}
    rec = json.loads((run_dir / "reconciliation.json").read_text())
    assert rec["available"] and not rec["emulated"] and not rec["flagged_steps"], rec
    for step in rec["steps"]:
        assert step["server_requests"] == step["client_requests"] == 6
        for key in ("server_ttft_mean_s", "server_itl_mean_s", "server_queue_mean_s",
                    "server_prefill_mean_s", "server_decode_mean_s"):
            assert step[key] is not None and step[key] >= 0, key
        # prompts are unique: whatever the cache served, both sides count the same tokens
        assert step["server_prefix_cache_hits"] == step["client_cached_tokens"]
        assert step["server_preemptions"] == 0
    summary = json.loads((run_dir / "quality_summary.json").read_text())
    assert summary["n"] == 4 and summary["accuracy"] is not None
