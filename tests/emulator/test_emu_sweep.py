"""The emulator responds to what a sweep varies, as its model says: max_num_seqs caps the
batch (the rest queue, and the wait shows in TTFT), TP and precision change the speed, the
shape changes prefill and decode, an FP8 KV cache halves the KV bytes. Shapes are checked
on the model in virtual time (simulate) and, for the queueing, on the running server."""

from __future__ import annotations

import httpx
import pytest
from servingbench.emulator import specs
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.process import EmulatorProcess
from servingbench.emulator.scheduler import simulate
from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, ns, rows


def perf(precision="bf16", tp=8, kv_bytes=2.0) -> PerfModel:
    return PerfModel(specs.config("p5.48xlarge", "scout", precision, tp), kv_bytes)


def test_max_num_seqs_caps_the_batch_and_the_queue_shows_in_ttft():
    m = perf()
    free = simulate(m, 16, 1024, 128, max_num_seqs=16, requests=64)
    capped = simulate(m, 16, 1024, 128, max_num_seqs=4, requests=64)
    at_cap = simulate(m, 4, 1024, 128, max_num_seqs=4, requests=64)
    # a batch of 4: the same throughput at 16 in flight as at 4 (the other 12 only wait) ...
    assert capped.throughput_tok_s == pytest.approx(at_cap.throughput_tok_s, rel=0.05)
    assert capped.throughput_tok_s < 0.6 * free.throughput_tok_s
    # ... and each waits about three other requests' service (16 / 4 - 1) before its prefill
    service = at_cap.ttft_s + 127 * at_cap.itl_s
    assert capped.ttft_s == pytest.approx(at_cap.ttft_s + 3 * service, rel=0.25)
    assert capped.ttft_s > 10 * free.ttft_s
    # the tokens of a running sequence come no slower: the cap is a queue, not a slowdown
    assert capped.itl_s == pytest.approx(at_cap.itl_s, rel=0.05)


def test_tp_and_precision_draw_the_frontiers_trade_off():
    c1 = {k: simulate(perf(p, tp), 1, 1024, 128, requests=8)
          for k, (p, tp) in {"bf16-tp8": ("bf16", 8), "bf16-tp4": ("bf16", 4),
                             "fp8-tp8": ("fp8", 8)}.items()}
    high = {k: simulate(perf(p, tp), 128, 1024, 128, requests=256)
            for k, (p, tp) in {"bf16-tp8": ("bf16", 8), "bf16-tp4": ("bf16", 4),
                               "fp8-tp8": ("fp8", 8)}.items()}
    # one user: a token every decode step of a batch of 1, as the model says
    for k, (p, tp) in {"bf16-tp8": ("bf16", 8), "bf16-tp4": ("bf16", 4),
                       "fp8-tp8": ("fp8", 8)}.items():
        assert c1[k].itl_s == pytest.approx(perf(p, tp).decode_step(1, 1088), rel=0.02)
    # more accelerators per replica read the weights faster (higher interactivity) where
    # reading them dominates a step: a dense 70B alone, Scout's many experts at 64 in flight.
    # One Scout user reads 17B parameters a step, and the all-reduces a wider group adds
    # (their latency is not divided) cost about what it saves: a near tie the calibration
    # decides, not physics
    dense = {tp: PerfModel(specs.config("p5.48xlarge", "Llama-3.1-70B", "bf16", tp)) for tp in (4, 8)}
    assert dense[8].decode_step(1, 1088) < 0.9 * dense[4].decode_step(1, 1088)
    assert perf("bf16", 8).decode_step(64, 1088) < 0.8 * perf("bf16", 4).decode_step(64, 1088)
    assert c1["bf16-tp8"].itl_s == pytest.approx(c1["bf16-tp4"].itl_s, rel=0.25)
    # FP8 weights are half the bytes of a memory-bound decode step (the step overhead and
    # the all-reduces are not halved)
    assert c1["fp8-tp8"].itl_s < 0.97 * c1["bf16-tp8"].itl_s
    assert high["fp8-tp8"].throughput_tok_s > 1.05 * high["bf16-tp8"].throughput_tok_s
    # many users: per accelerator, the smaller TP group yields more tokens (less all-reduce,
    # the weights read once for a whole batch either way)
    assert high["bf16-tp4"].throughput_tok_s / 4 > high["bf16-tp8"].throughput_tok_s / 8


def test_the_shape_changes_prefill_and_decode():
    m = perf()
    alone = {p: simulate(m, 1, p, 16, requests=2) for p in (1024, 8192)}
    for prompt, curve in alone.items():   # a lone request's TTFT is its prefill
        assert curve.ttft_s == pytest.approx(m.prefill_time(prompt), rel=0.02)
    assert alone[8192].ttft_s > 3 * alone[1024].ttft_s    # 8k of prompt to prefill, not 1k
    short, long_out = (simulate(m, 8, 1024, o, requests=16) for o in (1024, 8192))
    assert long_out.itl_s > short.itl_s               # longer contexts: more KV read a token
    assert m.prefill_time(8192, budget=2048) > m.prefill_time(8192, budget=8192)


def test_an_fp8_kv_cache_reads_half_the_kv_bytes():
    bf16, fp8 = perf(kv_bytes=2.0), perf(kv_bytes=1.0)
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    # a long-context decode step reads less; capacity in tokens doubles
    assert fp8.decode_step(64, 32768) < bf16.decode_step(64, 32768)
    assert fp8.kv_capacity_tokens(10.0) == pytest.approx(2 * bf16.kv_capacity_tokens(10.0), abs=1)


def test_the_running_server_queues_beyond_max_num_seqs(tmp_path):
    # max-num-seqs 2 and 4 requests sent at once: two run, two wait for a free slot. The
    # check reads what the server did from each stream's own first and last token, never a
    # time since sending: on a loaded machine a connection can reach the server late, and
    # that delay belongs to the client, not to the scheduler under test.
    scale = 4.0
    args = ["--time-scale", str(scale), "--cold-start-s", "0", "--max-num-seqs", "2",
            "--max-num-batched-tokens", "4096", "--kv-cache-dtype", "fp8"]
    with EmulatorProcess(args) as e:
        status = e.status()["config"]
        assert (status["max_num_seqs"], status["max_num_batched_tokens"],
                status["kv_cache_dtype"]) == (2, 4096, "fp8")
        name = httpx.get(f"{e.base_url}/v1/models").json()["data"][0]["id"]
        run_dir = tmp_path / "run"
        run_load(config(e.base_url, model=name, concurrency=[4], requests_per_step=4,
                        input_tokens=64, output_tokens=16), run_dir, progress=False)
    spans = sorted((ns(r["first_token_at"]), ns(r["last_token_at"])) for r in rows(run_dir))
    assert len(spans) == 4
    # never more than two streams decoding at one instant, and two at some instant (one
    # slot, or no limit at all, would give 1 or 4)
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans],
                   key=lambda e: (e[0], e[1]))
    live, most = 0, 0
    for _, step in edges:
        live += step
        most = max(most, live)
    assert most == 2
    # the third stream starts only once a slot is free: after the first stream has ended
    assert spans[2][0] >= min(b for _, b in spans)


def test_the_embedded_default_passes_a_candidates_engine_args_to_the_emulator(tmp_path):
    from servingbench.resources.contract.candidate import Candidate
    from servingbench.resources.model_server.local.emulator import EmulatorModelServer, not_modelled

    c = Candidate(name="c", instance_type="p5.48xlarge", model="meta-llama/Llama-4-Scout",
                  precision="fp8", tensor_parallel=4,
                  engine_args={"max_num_seqs": 64, "kv_cache_dtype": "fp8",
                               "speculative": {"method": "ngram"}})
    args = EmulatorModelServer().args(c, tmp_path)
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8"
    assert args[args.index("--tp") + 1] == "4" and args[args.index("--precision") + 1] == "fp8"
    assert "--max-num-batched-tokens" not in args
    assert not_modelled(c.engine_args) == ["speculative"]
