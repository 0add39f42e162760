"""A straightforward pandas implementation of the per-step latency metrics (contract §3), the
baseline `analyze_scale.py` compares the DuckDB path against. Not used by the product."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

Q = [0.5, 0.9, 0.95, 0.99]


def _stats(prefix: str, x: np.ndarray) -> dict:
    if len(x) == 0:
        return {f"{prefix}_n": 0}
    qs = np.quantile(x, Q)  # linear interpolation, as quantile_cont
    return {f"{prefix}_p50": qs[0], f"{prefix}_p90": qs[1], f"{prefix}_p95": qs[2],
            f"{prefix}_p99": qs[3], f"{prefix}_mean": x.mean(), f"{prefix}_min": x.min(),
            f"{prefix}_max": x.max(), f"{prefix}_n": len(x)}


def _ns(s: pd.Series) -> np.ndarray:
    return s.to_numpy(dtype="datetime64[ns]").astype(np.int64)


def step_metrics(run_dir: str | Path) -> list[dict]:
    run_dir = Path(run_dir)
    req = pd.read_parquet(run_dir / "steady_state_request_log.parquet")
    chunks = pd.read_parquet(run_dir / "chunk_log.parquet")
    chunks = chunks.merge(req[["request_id", "step", "status"]], on="request_id")
    chunks = chunks[chunks["status"] == "ok"].sort_values(["request_id", "seq"])
    at = _ns(chunks["at"])
    same = chunks["request_id"].to_numpy()
    first = np.r_[True, same[1:] != same[:-1]]
    gap = np.r_[0, np.diff(at)] / 1e9 / chunks["tokens"].to_numpy()
    chunks = chunks.assign(itl=gap, first=first)
    rows = []
    for step, r in req.groupby("step", sort=True):
        ok = r[r["status"] == "ok"]
        sent, first_t, last_t = _ns(ok["sent_at"]), _ns(ok["first_token_at"]), _ns(ok["last_token_at"])
        fin = _ns(ok["finished_at"])
        out = ok["output_tokens"].to_numpy()
        window = (_ns(r["finished_at"]).max() - _ns(r["sent_at"]).min()) / 1e9
        c = chunks[(chunks["step"] == step) & ~chunks["first"] & (chunks["seq"] >= 1)]
        itl = np.repeat(c["itl"].to_numpy(), c["tokens"].to_numpy())
        multi = (c["tokens"].to_numpy() > 1).mean() if len(c) else None
        m2 = out >= 2
        row = {"step": step, "n_requests": len(r), "n_ok": len(ok),
               "output_tokens": int(out.sum()), "output_tok_s": out.sum() / window,
               "itl_multi_token_share": multi}
        row |= _stats("ttft_s", (first_t - sent) / 1e9)
        row |= _stats("tpot_s", (last_t - first_t)[m2] / 1e9 / (out[m2] - 1))
        row |= _stats("e2e_s", (fin - sent) / 1e9)
        row |= _stats("itl_s", itl)
        rows.append(row)
    return rows
