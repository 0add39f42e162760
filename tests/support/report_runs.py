"""Synthetic run folders (contract §6) for the report tests.

The raw records are simulated (closed-loop slots, lognormal TTFT and per-token gaps) and
the analyzer's outputs (derived metrics §3, cost §4, headline, gates §5) are computed from
them here with numpy, so the CDFs and the tables of a fixture agree with each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.contract.manifest import dump
from resources.contract.schemas import BILL, CHUNK_LOG, REQUEST_LOG, TS
from resources.contract.timestamps import format_ts, parse_ts
from resources.report.rundata import DERIVED_COLUMNS, STATS

NS = 1_000_000_000
GATE_NAMES = ("complete", "ordered", "phased", "counted", "scoped", "single-source")


@dataclass
class Candidate:
    candidate: str
    instance_type: str
    source: str = "measured"
    hourly_usd: float = 55.04
    ttft_s: float = 0.15          # median TTFT at c=1
    itl_s: float = 0.012          # median per-token gap at c=1
    slowdown: float = 0.12        # per extra in-flight request
    steps: tuple[int, ...] = (1, 2, 4, 8)
    failing_step: int | None = None   # this step gets 10 % http errors -> invalid
    gate_fail: bool = False           # rule 5 fails -> no cost/headline files
    output_tokens: int = 24
    requests_per_slot: int = 6
    model: str = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    precision: str = "bf16"
    extra: dict = field(default_factory=dict)


def _ts(values: list[int | None]) -> pa.Array:
    return pa.array(values, pa.int64()).cast(TS)


def _stats(prefix: str, values: list[float]) -> dict:
    if not values:
        return {f"{prefix}_{s}": (0 if s == "n" else None) for s in STATS}
    a = np.asarray(values, dtype=float)
    q = np.percentile(a, [50, 90, 95, 99])
    return {f"{prefix}_p50": q[0], f"{prefix}_p90": q[1], f"{prefix}_p95": q[2],
            f"{prefix}_p99": q[3], f"{prefix}_mean": float(a.mean()),
            f"{prefix}_min": float(a.min()), f"{prefix}_max": float(a.max()),
            f"{prefix}_n": len(a)}


def _simulate_step(c: Candidate, run_id: str, conc: int, start: int, rng) -> tuple[list, list]:
    reqs, chunks = [], []
    load = 1 + c.slowdown * (conc - 1)
    for slot in range(conc):
        t = start + slot * 1_000_000
        for i in range(c.requests_per_slot):
            rid = f"{run_id}-c{conc}-s{slot}-r{i}"
            sent = t + 200_000
            failed = c.failing_step == conc and i == 0 and slot % 2 == 0
            if failed:
                fin = sent + 5_000_000
                reqs.append(dict(request_id=rid, step=f"c={conc}", target=float(conc),
                                 scheduled_at=t, sent_at=sent, first_token_at=None,
                                 last_token_at=None, finished_at=fin, input_tokens=None,
                                 output_tokens=None, chunks=0, status="http_error",
                                 http_status=503, error="upstream busy"))
                t = fin
                continue
            ttft = int(c.ttft_s * load * rng.lognormal(0, 0.25) * NS)
            at, seq, total = sent + ttft, 0, 0
            while total < c.output_tokens:
                tok = 2 if (seq % 7 == 3 and total + 2 <= c.output_tokens) else 1
                if seq > 0:
                    at += int(c.itl_s * load * tok * rng.lognormal(0, 0.3) * NS)
                chunks.append(dict(request_id=rid, seq=seq, at=at, tokens=tok))
                seq, total = seq + 1, total + tok
            fin = at + 1_000_000
            reqs.append(dict(request_id=rid, step=f"c={conc}", target=float(conc),
                             scheduled_at=t, sent_at=sent, first_token_at=sent + ttft,
                             last_token_at=at, finished_at=fin, input_tokens=512,
                             output_tokens=total, chunks=seq, status="ok",
                             http_status=200, error=None))
            t = fin
    return reqs, chunks


def _metrics_row(run_id: str, source: str, conc: int, reqs: list, chunks: list) -> dict:
    ok = [r for r in reqs if r["status"] == "ok"]
    start = min(r["sent_at"] for r in reqs)
    end = max(r["finished_at"] for r in reqs)
    window = (end - start) / NS
    out_tok = sum(r["output_tokens"] for r in ok)
    ok_ids = {r["request_id"] for r in ok}
    by_req: dict[str, list] = {}
    for ch in chunks:
        if ch["request_id"] in ok_ids:
            by_req.setdefault(ch["request_id"], []).append(ch)
    itl, multi, total_gaps = [], 0, 0
    for chs in by_req.values():
        for prev, cur in zip(chs, chs[1:], strict=False):
            itl += [(cur["at"] - prev["at"]) / NS / cur["tokens"]] * cur["tokens"]
            multi += cur["tokens"] > 1
            total_gaps += 1
    conc_sum = sum((r["finished_at"] - r["sent_at"]) / NS for r in reqs)
    ttft = [(r["first_token_at"] - r["sent_at"]) / NS for r in ok]
    tpot = [(r["last_token_at"] - r["first_token_at"]) / NS / (r["output_tokens"] - 1)
            for r in ok if r["output_tokens"] >= 2]
    good = sum(1 for r, t, p in zip(ok, ttft, tpot, strict=False) if t <= 2.0 and p <= 0.1)
    reasons = []
    if 100 * (len(reqs) - len(ok)) > len(reqs):
        reasons.append("error_rate")
    if conc_sum / window < 0.9 * conc:
        reasons.append("achieved_concurrency")
    row = dict(run_id=run_id, step=f"c={conc}", load_mode="concurrency", target=float(conc),
               source=source, n_requests=len(reqs), n_ok=len(ok),
               error_rate=(len(reqs) - len(ok)) / len(reqs), window_start=start,
               window_end=end, window_s=window, input_tokens=512 * len(ok),
               output_tokens=out_tok, output_tok_s=out_tok / window,
               request_s=len(ok) / window, achieved_concurrency=conc_sum / window,
               goodput_s=good / window)
    row.update(_stats("ttft_s", ttft))
    row.update(_stats("ttft_sched_s", [(r["first_token_at"] - r["scheduled_at"]) / NS for r in ok]))
    lag = np.asarray([(r["sent_at"] - r["scheduled_at"]) / NS for r in reqs])
    row.update(sched_lag_s_p50=float(np.percentile(lag, 50)),
               sched_lag_s_p99=float(np.percentile(lag, 99)), sched_lag_s_max=float(lag.max()))
    row.update(_stats("itl_s", itl))
    row["itl_multi_token_share"] = multi / total_gaps if total_gaps else None
    row.update(_stats("tpot_s", tpot))
    row.update(_stats("e2e_s", [(r["finished_at"] - r["sent_at"]) / NS for r in ok]))
    row.update(valid=not reasons, invalid_reason=";".join(reasons) or None)
    return row


def _derived_type(name: str) -> pa.DataType:
    if name in ("window_start", "window_end"):
        return TS
    if name == "valid":
        return pa.bool_()
    if name in ("run_id", "step", "load_mode", "source", "invalid_reason"):
        return pa.string()
    if name in ("n_requests", "n_ok", "input_tokens", "output_tokens") or name.endswith("_n"):
        return pa.int64()
    return pa.float64()


def _table(rows: list[dict], types: dict[str, pa.DataType]) -> pa.Table:
    arrays = {}
    for name, typ in types.items():
        values = [r.get(name) for r in rows]  # an optional column a row lacks is null
        arrays[name] = _ts(values) if typ == TS else pa.array(values, typ)
    return pa.table(arrays)


EXCLUDED = pa.list_(pa.struct([("service", pa.string()), ("usage_type", pa.string()),
                                ("period_start", TS), ("amount", pa.float64())]))


def _bill(c: Candidate, run_id: str, start: int, end: int) -> pa.Table:
    """Hourly instance rows at the price basis' rate covering the steady phase (contract §2.4)."""
    hour = 3600 * NS
    rows = []
    for h in range(start - start % hour, end, hour):
        rows.append(dict(run_id=run_id, period_start=h, period_end=h + hour,
                         account_id="123456789012", region="us-east-1",
                         service="Amazon Elastic Compute Cloud - Compute",
                         usage_type=f"USE1-BoxUsage:{c.instance_type}",
                         instance_type=c.instance_type, tag_key="servingbench:run-id",
                         tag_value=run_id, metric="UnblendedCost", amount=c.hourly_usd,
                         unit="USD", usage_quantity=1.0, usage_unit="Hrs", estimated=False,
                         source="fixture"))
    month = [int(t.timestamp()) * NS for t in _month(start)]
    rows.append({**rows[0], "period_start": month[0], "period_end": month[1],
                 "service": "AWS Key Management Service", "usage_type": "KMS-Keys",
                 "instance_type": None, "amount": 1.0, "usage_quantity": 1.0,
                 "usage_unit": "Keys"})
    return _table(rows, {f.name: f.type for f in BILL})


def _month(ns: int) -> tuple[datetime, datetime]:
    start = datetime.fromtimestamp(ns // NS, UTC).replace(day=1, hour=0, minute=0, second=0)
    end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start, end


def _excluded(m: dict) -> list[dict]:
    """The month's KMS key fee is behind every step: listed, never prorated (contract §4)."""
    return [dict(service="AWS Key Management Service", usage_type="KMS-Keys",
                 period_start=_month(m["window_start"])[0], amount=1.0)]


def _cost_rows(c: Candidate, run_id: str, metrics: list[dict]) -> pa.Table:
    rows = []
    for m in metrics:
        rate = c.hourly_usd * 1e6 / (m["output_tok_s"] * 3600)
        rows.append(dict(run_id=run_id, step=m["step"], source=m["source"],
                         bill_source="fixture", bill_status="final",
                         window_cost_usd=c.hourly_usd * m["window_s"] / 3600,
                         output_tokens=m["output_tokens"], cost_per_1m_output_usd=rate,
                         hourly_price_usd=c.hourly_usd, cost_per_1m_via_rate_usd=rate,
                         cross_check_delta=0.0, cross_check_note=None, included=["instance"],
                         excluded_items=_excluded(m), price_region="us-east-1",
                         purchase_option="on_demand", retrieved_on="2026-11-28"))
    types = {k: pa.float64() for k in rows[0]}
    types.update({k: pa.string() for k in ("run_id", "step", "source", "bill_source",
                                            "bill_status", "cross_check_note", "price_region",
                                            "purchase_option", "retrieved_on")})
    types.update(output_tokens=pa.int64(), included=pa.list_(pa.string()), excluded_items=EXCLUDED)
    return _table(rows, types)


def _headline(c: Candidate, run_id: str, metrics: list[dict], cost: pa.Table,
              slo_ttft: float, slo_tpot: float) -> pa.Table:
    ok = [m for m in metrics if m["valid"] and m["ttft_s_p99"] is not None
          and m["ttft_s_p99"] <= slo_ttft and m["tpot_s_p99"] <= slo_tpot]
    best = max(ok, key=lambda m: m["output_tok_s"]) if ok else None
    cost_of = dict(zip(cost["step"].to_pylist(), cost["cost_per_1m_output_usd"].to_pylist(),
                       strict=True))
    row = dict(run_id=run_id, candidate=c.candidate, instance_type=c.instance_type,
               source=c.source, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot,
               meets_slo=best is not None, step=best and best["step"],
               output_tok_s=best and best["output_tok_s"], ttft_s_p99=best and best["ttft_s_p99"],
               tpot_s_p99=best and best["tpot_s_p99"],
               cost_per_1m_output_usd=best and cost_of[best["step"]],
               bill_status=best and "final")
    types = {k: pa.string() for k in row}
    types.update({k: pa.float64() for k in ("slo_ttft_s", "slo_tpot_s", "output_tok_s",
                                           "ttft_s_p99", "tpot_s_p99", "cost_per_1m_output_usd")})
    types["meets_slo"] = pa.bool_()
    return _table([row], types)


def _manifest(c: Candidate, run_id: str, created: int, steady: tuple[int, int]) -> dict:
    m = _example_manifest()
    m.update(run_id=run_id, source=c.source, candidate=c.candidate, instance_type=c.instance_type,
             created_at=format_ts(created), model=c.model, precision=c.precision)
    m["price_basis"]["hourly_usd_per_node"] = c.hourly_usd
    base = created
    spans = {"provision": (0, 552), "deploy": (552, 1300), "image_pull": (555, 722),
             "weights_load": (725, 1170), "compile": (1170, 1295), "ready": (1295, 1300),
             "warmup": (1301, 1350)}
    m["phases"] = {k: {"started_at": format_ts(base + a * NS), "ended_at": format_ts(base + b * NS)}
                   for k, (a, b) in spans.items()}
    m["phases"]["steady"] = {"started_at": format_ts(steady[0]), "ended_at": format_ts(steady[1])}
    m["steps"] = [{"step": f"c={s}", "load_mode": "concurrency", "target": float(s),
                   "client_limited": False, "client_cpu_share": 0.05, "loop_lag_p99_s": 0.0005}
                  for s in c.steps]
    m.update(c.extra)
    return m


def _example_manifest() -> dict:
    return {
        "run_id": "x", "source": "measured", "candidate": None, "created_at": format_ts(0),
        "model": None, "model_revision": None, "precision": None, "tensor_parallel": 8,
        "expert_parallel": False, "max_model_len": 131072, "engine": "vllm",
        "engine_version": "0.11.0", "image_digest": "sha256:" + "ab" * 32,
        "account_id": "123456789012", "region": "us-east-1", "availability_zone": "us-east-1a",
        "cluster_name": "bench", "k8s_version": "1.33", "nodegroup": "sb-7f3a",
        "instance_type": None, "node_count": 1, "instance_ids": ["i-0123456789abcdef0"],
        "driver_version": "570.86.15",
        "scenario": {"input_tokens": 512, "output_tokens": 24, "dataset": None},
        "price_basis": {"region": "us-east-1", "purchase_option": "on_demand",
                        "retrieved_on": "2026-11-28", "source": "price_list",
                        "hourly_usd_per_node": 1.0},
        "phases": {}, "steps": [],
    }


def build_run(root: Path, c: Candidate, run_id: str, created_at: str = "2026-11-29T02:00:00Z",
              seed: int = 0, slo_ttft_s: float = 2.0, slo_tpot_s: float = 0.1) -> Path:
    """Write one run folder under `root`; returns its path."""
    rng = np.random.default_rng(seed)
    created = parse_ts(created_at)
    t = created + 1360 * NS
    all_reqs, all_chunks, metrics = [], [], []
    for conc in c.steps:
        reqs, chunks = _simulate_step(c, run_id, conc, t, rng)
        metrics.append(_metrics_row(run_id, c.source, conc, reqs, chunks))
        all_reqs += reqs
        all_chunks += chunks
        t = max(r["finished_at"] for r in reqs) + NS
    warm_reqs, warm_chunks = _simulate_step(
        replace(c, requests_per_slot=1, failing_step=None), run_id, 1,
        created + 1301 * NS, rng)
    for r in warm_reqs:
        r.update(request_id=r["request_id"] + "-warmup", step="c=1")
    for ch in warm_chunks:
        ch["request_id"] += "-warmup"
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    dump(_manifest(c, run_id, created, (created + 1360 * NS, t)), run_dir / "manifest.json")
    for phase, rows in (("steady", all_reqs), ("warmup", warm_reqs)):
        for r in rows:
            r.update(run_id=run_id, phase=phase, load_mode="concurrency",
                     output_tokens_source="usage")
    req_types = {f.name: f.type for f in REQUEST_LOG}
    pq.write_table(_table(all_reqs, req_types), run_dir / "steady_state_request_log.parquet")
    pq.write_table(_table(warm_reqs, req_types), run_dir / "warmup_log.parquet")
    all_chunks = warm_chunks + all_chunks
    for ch in all_chunks:
        ch["run_id"] = run_id
    pq.write_table(_table(all_chunks, {f.name: f.type for f in CHUNK_LOG}),
                   run_dir / "chunk_log.parquet")
    pq.write_table(_bill(c, run_id, created + 1360 * NS, t), run_dir / "bill.parquet")
    pq.write_table(_table(metrics, {n: _derived_type(n) for n in DERIVED_COLUMNS}),
                   run_dir / "derived_metrics.parquet")
    gates = [dict(rule=i + 1, name=n, passed=not (c.gate_fail and i == 4),
                  offending_rows=1 if (c.gate_fail and i == 4) else 0,
                  examples=["2026-11-29T02:00:00.000000000Z"] if (c.gate_fail and i == 4) else [],
                  message="instance rows do not cover the steady phase"
                  if (c.gate_fail and i == 4) else "ok")
             for i, n in enumerate(GATE_NAMES)]
    (run_dir / "gates.json").write_text(json.dumps(gates, indent=2))
    if not c.gate_fail:
        cost = _cost_rows(c, run_id, metrics)
        pq.write_table(cost, run_dir / "cost_per_1m.parquet")
        pq.write_table(_headline(c, run_id, metrics, cost, slo_ttft_s, slo_tpot_s),
                       run_dir / "headline.parquet")
    return run_dir


# The three candidates of the comparison fixture: a fast measured one with an invalid
# step, an emulated one, and a slow one that meets the SLO at no step.
FAST = Candidate("p5-scout-bf16-tp8", "p5.48xlarge", failing_step=8)
EMULATED = Candidate("g6e-scout-fp8-tp8", "g6e.48xlarge", source="emulated", hourly_usd=30.13,
                     ttft_s=0.3, itl_s=0.025, precision="fp8")
SLOW = Candidate("inf2-scout-bf16-tp24", "inf2.48xlarge", hourly_usd=12.98, ttft_s=2.6,
                 itl_s=0.09, slowdown=0.2)


def build_comparison(root: Path) -> list[Path]:
    """Three candidates; the fast one run three times (repeatability)."""
    dirs = [build_run(root, FAST, f"fast-{i}", f"2026-11-2{6 + i}T02:00:00Z", seed=i)
            for i in range(3)]
    dirs.append(build_run(root, EMULATED, "emu-0", seed=10))
    dirs.append(build_run(root, SLOW, "slow-0", seed=20))
    return dirs
