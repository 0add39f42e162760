"""Server reconciliation: the engine's own counters (`server_metrics.json`, the /metrics
deltas the load generator scraped around each steady step) against the client's totals
for the same step (the steady request log). A second witness: a step whose generated
tokens or finished requests disagree by more than 1 % is flagged.

Beside the counts, the server's own view of the same requests where the engine serves it
(vLLM: its TTFT, inter-token latency, queue, prefill and decode histograms, its prefix-cache
and preemption counters): each step's mean server-side TTFT and ITL next to the client's,
the prefix-cache hits next to the `cached_tokens` the client was told, and what only the
server knows (queueing, prefill and decode time, preemptions). These are shown, never
flagged: the spans differ (the client's TTFT includes the HTTP exchange).

Reads a run folder only (no adapter, no network); `write_reconciliation` writes
`reconciliation.json` beside derived_metrics.parquet (never a column of it: contract §3's
columns are exact).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
from servingbench.resources.contract import durable
from servingbench.resources.contract.schemas import read_records

SERVER_FILE = "server_metrics.json"
FILE = "reconciliation.json"
TOLERANCE = 0.01  # |gap| above 1 % flags the step


class ReconcileError(ValueError):
    """server_metrics.json is unreadable; the message names the file."""


def _gap(client: float | None, server: float | None) -> float | None:
    """(server - client) / client; None when either is unknown or the client saw none."""
    if client is None or server is None:
        return None
    if client == 0:
        return 0.0 if server == 0 else None
    return (server - client) / client


def _flag(gap: float | None, client: float | None, server: float | None, tol: float) -> bool:
    if gap is None:
        # the client saw nothing but the server counted something: a disagreement
        return client == 0 and server is not None and server > 0
    return abs(gap) > tol


def load_server_metrics(run_dir: Path | str) -> dict | None:
    """The run's server_metrics.json, or None when the run has none (older runs, imports)."""
    path = Path(run_dir) / SERVER_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReconcileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ReconcileError(f"{path}: expected an object with a 'steps' list")
    return doc


def _ns(v) -> int | None:
    return None if v is None else int(v.timestamp() * 1e9) if hasattr(v, "timestamp") else int(v)


def client_totals(run_dir: Path | str) -> dict[str, dict]:
    """Per step of the steady request log: requests sent, ok requests and the output tokens
    of the ok requests; and over the ok requests, the summed TTFT (sent to first token) and
    inter-token time (first to last token, over output tokens - 1) with their counts, and
    the prefix-cache tokens the server reported (`cached_tokens`)."""
    log = read_records(Path(run_dir), "steady_state_request_log")
    out: dict[str, dict] = {}
    if log is None or log.num_rows == 0:
        return out
    ok = pc.equal(log["status"], "ok").to_pylist()
    cols = {c: log[c].to_pylist() if c in log.column_names else [None] * log.num_rows
            for c in ("step", "output_tokens", "sent_at", "first_token_at", "last_token_at",
                      "cached_tokens")}
    for i, step in enumerate(cols["step"]):
        t = out.setdefault(step, {"requests": 0, "ok": 0, "tokens": 0, "ttft_sum": 0.0,
                                  "ttft_count": 0, "itl_sum": 0.0, "itl_count": 0,
                                  "cached_tokens": None})
        t["requests"] += 1
        if not ok[i]:
            continue
        tokens = cols["output_tokens"][i] or 0
        t["ok"] += 1
        t["tokens"] += tokens
        sent, first, last = (_ns(cols[c][i]) for c in ("sent_at", "first_token_at",
                                                       "last_token_at"))
        if sent is not None and first is not None:
            t["ttft_sum"] += (first - sent) / 1e9
            t["ttft_count"] += 1
        if first is not None and last is not None and tokens > 1:
            t["itl_sum"] += (last - first) / 1e9
            t["itl_count"] += tokens - 1
        if cols["cached_tokens"][i] is not None:
            t["cached_tokens"] = (t["cached_tokens"] or 0) + cols["cached_tokens"][i]
    return out


def _mean(total: float | None, count: float | None) -> float | None:
    return None if not count or total is None else total / count


def server_view(entry: dict, mine: list[dict]) -> dict:
    """The server's own per-step figures beside the client's (null where the engine serves
    none): mean TTFT and ITL both sides, the server's mean queue, prefill and decode time,
    its prefix-cache hits beside the client's cached tokens, its preemptions."""
    h = entry.get("histograms") or {}
    totals = entry.get("totals") or {}
    cached = [m["cached_tokens"] for m in mine if m.get("cached_tokens") is not None]

    def server_mean(name: str) -> float | None:
        return _mean((h.get(name) or {}).get("sum"), (h.get(name) or {}).get("count"))

    return {
        "client_ttft_mean_s": _mean(sum(m.get("ttft_sum", 0.0) for m in mine),
                                    sum(m.get("ttft_count", 0) for m in mine)),
        "server_ttft_mean_s": server_mean("ttft"),
        "client_itl_mean_s": _mean(sum(m.get("itl_sum", 0.0) for m in mine),
                                   sum(m.get("itl_count", 0) for m in mine)),
        "server_itl_mean_s": server_mean("itl"),
        "server_queue_mean_s": server_mean("queue"),
        "server_prefill_mean_s": server_mean("prefill"),
        "server_decode_mean_s": server_mean("decode"),
        "client_cached_tokens": sum(cached) if cached else None,
        "server_prefix_cache_hits": totals.get("prefix_cache_hits"),
        "server_prefix_cache_queries": totals.get("prefix_cache_queries"),
        "server_preemptions": totals.get("preemptions"),
    }


def reconcile(run_dir: Path | str, tolerance: float = TOLERANCE) -> dict | None:
    """The reconciliation of one run: {available, reason, tolerance, steps: [...]}, each step
    {step, client_tokens, server_tokens, gap, client_requests, server_requests,
    request_gap, flagged, reason}. `gap` is (server - client) / client of the generated
    tokens; `flagged` when |gap| or |request_gap| exceeds `tolerance`. None when the run
    has no server_metrics.json."""
    doc = load_server_metrics(run_dir)
    if doc is None:
        return None
    client = client_totals(run_dir)
    rows = []
    for entry in doc["steps"]:
        names = entry.get("steps") or [entry.get("step")]
        mine = [client.get(n, {"requests": 0, "ok": 0, "tokens": 0}) for n in names]
        c_tokens = sum(m["tokens"] for m in mine)
        c_requests = sum(m["requests"] for m in mine)
        row = {"step": entry.get("step"), "steps": names, "client_tokens": c_tokens,
               "client_requests": c_requests, "server_tokens": None, "server_requests": None,
               "gap": None, "request_gap": None, "flagged": False, "reason": None}
        if not entry.get("available"):
            row["reason"] = f"server metrics unavailable: {entry.get('reason')}"
        elif entry.get("counter_reset"):
            row["reason"] = "a server counter went down during the step (restart?)"
        else:
            s_tokens, s_requests = entry.get("generation_tokens"), entry.get("requests_finished")
            gap, rgap = _gap(c_tokens, s_tokens), _gap(c_requests, s_requests)
            flags = []
            if _flag(gap, c_tokens, s_tokens, tolerance):
                flags.append("generated tokens")
            if _flag(rgap, c_requests, s_requests, tolerance):
                flags.append("finished requests")
            row |= {"server_tokens": s_tokens, "server_requests": s_requests, "gap": gap,
                    "request_gap": rgap, "flagged": bool(flags),
                    "reason": (f"{' and '.join(flags)} differ by more than "
                               f"{tolerance:.0%}") if flags else None,
                    **server_view(entry, mine)}
        rows.append(row)
    return {"available": bool(doc.get("available")), "reason": doc.get("reason"),
            "emulated": bool(doc.get("emulated")), "tolerance": tolerance,
            "flagged_steps": [r["step"] for r in rows if r["flagged"]], "steps": rows}


def write_reconciliation(run_dir: Path | str, tolerance: float = TOLERANCE) -> Path | None:
    """Write `<run_dir>/reconciliation.json` (atomically); None when there is nothing to
    reconcile (no server_metrics.json)."""
    result = reconcile(run_dir, tolerance)
    if result is None:
        return None
    path = Path(run_dir) / FILE
    return durable.write_json(path, result, indent=1)
