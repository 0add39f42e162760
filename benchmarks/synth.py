"""Synthetic run folders of any size, for benchmarks and the bundled example.

Vectorised with numpy and written in row groups, so 100k requests × 128 chunks (12.8M chunk
rows) builds in seconds without holding every string in memory at once. Every folder is
marked `emulated`: nothing here was measured.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.contract import manifest as mf
from resources.contract.schemas import BILL, CHUNK_LOG, REQUEST_LOG

T0 = mf.parse_ts("2026-11-29T02:00:00Z")
S = 1_000_000_000
TS = pa.timestamp("ns", tz="UTC")


def _requests(rng, run_id, ids, phase, step, mode, target, start_ns, gap_ns, chunks, itl_ns,
              tokens_per_chunk):
    n = len(ids)
    sched = start_ns + np.arange(n, dtype=np.int64) * gap_ns
    sent = sched + rng.integers(0, 200_000, n)                    # ≤ 0.2 ms client lateness
    ttft = rng.lognormal(np.log(0.05 * S), 0.3, n).astype(np.int64)
    gaps = rng.gamma(4.0, itl_ns / 4.0, (n, chunks)).astype(np.int64)
    gaps[:, 0] = ttft
    at = sent[:, None] + np.cumsum(gaps, axis=1)
    finished = at[:, -1] + 1_000_000
    out = np.full(n, chunks * tokens_per_chunk, dtype=np.int64)
    req = pa.table({
        "run_id": pa.array([run_id] * n), "request_id": pa.array(ids), "phase": [phase] * n,
        "step": [step] * n, "load_mode": [mode] * n, "target": np.full(n, float(target)),
        "scheduled_at": pa.array(sched, TS), "sent_at": pa.array(sent, TS),
        "first_token_at": pa.array(at[:, 0], TS), "last_token_at": pa.array(at[:, -1], TS),
        "finished_at": pa.array(finished, TS), "input_tokens": np.full(n, 512, dtype=np.int64),
        "output_tokens": out, "output_tokens_source": ["usage"] * n,
        "chunks": np.full(n, chunks, dtype=np.int64), "status": ["ok"] * n,
        "http_status": pa.array(np.full(n, 200, dtype=np.int32)), "error": pa.nulls(n, pa.string()),
    }, schema=REQUEST_LOG)
    ids_arr = pa.array(ids)
    chunk = pa.table({
        "run_id": pa.DictionaryArray.from_arrays(np.zeros(n * chunks, dtype=np.int32),
                                                 pa.array([run_id])).cast(pa.string()),
        "request_id": ids_arr.take(np.repeat(np.arange(n), chunks)),
        "seq": np.tile(np.arange(chunks, dtype=np.int64), n),
        "at": pa.array(at.reshape(-1), TS),
        "tokens": np.full(n * chunks, tokens_per_chunk, dtype=np.int64),
    }, schema=CHUNK_LOG)
    return req, chunk, int(finished.max())


def build(run_dir: Path, n_requests: int, chunks: int = 128, steps: tuple[int, ...] = (1, 8, 32),
          seed: int = 0, tokens_per_chunk: int = 1, batch: int = 20_000, hourly: float = 55.04,
          instance_type: str = "p5.48xlarge") -> Path:
    """Write a complete run folder (manifest, logs, bill) with `n_requests` steady requests."""
    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"synthetic-{n_requests}-{seed}"
    steady_w = pq.ParquetWriter(run_dir / "steady_state_request_log.parquet", REQUEST_LOG)
    chunk_w = pq.ParquetWriter(run_dir / "chunk_log.parquet", CHUNK_LOG)
    warm_ids = [str(uuid.UUID(int=int(x), version=4)) for x in rng.integers(0, 2**62, 8)]
    warm, warm_chunks, t = _requests(rng, run_id, warm_ids, "warmup", f"c={steps[0]}",
                                     "concurrency", steps[0], T0, S // 10, chunks, 10_000_000,
                                     tokens_per_chunk)
    pq.write_table(warm, run_dir / "warmup_log.parquet")
    chunk_w.write_table(warm_chunks)
    steady_start = t + S
    t = steady_start
    per_step = -(-n_requests // len(steps))
    done = 0
    manifest_steps = []
    for c in steps:
        todo = min(per_step, n_requests - done)
        gap = max(1, int(0.05 * S + chunks * 10_000_000) // c)
        while todo > 0:
            k = min(batch, todo)
            ids = [str(uuid.UUID(int=int(x), version=4)) for x in rng.integers(0, 2**62, k)]
            req, ch, end = _requests(rng, run_id, ids, "steady", f"c={c}", "concurrency", c, t,
                                     gap, chunks, 10_000_000, tokens_per_chunk)
            steady_w.write_table(req)
            chunk_w.write_table(ch)
            t = end if k < batch else t + k * gap
            todo -= k
            done += k
        t = max(t, end) + S
        manifest_steps.append({"step": f"c={c}", "load_mode": "concurrency", "target": float(c),
                               "client_limited": False, "client_cpu_share": None,
                               "loop_lag_p99_s": None})
    steady_w.close()
    chunk_w.close()
    m = mf.empty(run_id, "emulated", T0)
    m.update(candidate="synthetic-p5-scout", model="meta-llama/Llama-4-Scout-17B-16E-Instruct",
             precision="bf16", tensor_parallel=8, engine="synthetic", account_id="000000000000",
             region="us-east-1", instance_type=instance_type, node_count=1,
             scenario={"input_tokens": 512, "output_tokens": chunks * tokens_per_chunk,
                       "dataset": None},
             price_basis={"region": "us-east-1", "purchase_option": "on_demand",
                          "retrieved_on": "2026-11-28", "source": "price_sheet",
                          "hourly_usd_per_node": hourly},
             steps=manifest_steps)
    m["phases"] = {"warmup": {"started_at": mf.format_ts(T0), "ended_at": mf.format_ts(steady_start - S)},
                   "steady": {"started_at": mf.format_ts(steady_start), "ended_at": mf.format_ts(t)}}
    mf.dump(m, run_dir / "manifest.json")
    hours = range((T0 // (3600 * S)) * 3600 * S, t + 3600 * S, 3600 * S)
    rows = [{"run_id": run_id, "period_start": h, "period_end": h + 3600 * S,
             "account_id": "000000000000", "region": "us-east-1",
             "service": "Amazon Elastic Compute Cloud - Compute",
             "usage_type": f"USE1-BoxUsage:{instance_type}", "instance_type": instance_type,
             "tag_key": "servingbench:run-id", "tag_value": run_id, "metric": "UnblendedCost",
             "amount": hourly, "unit": "USD", "usage_quantity": 1.0, "usage_unit": "Hrs",
             "estimated": False, "source": "price_sheet"} for h in hours if h < t]
    pq.write_table(pa.Table.from_pylist(rows, schema=BILL), run_dir / "bill.parquet")
    return run_dir
