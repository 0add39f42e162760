"""The engine's own counters around each steady step: scrape Prometheus `/metrics` (each
engine's names are in its file, model_server/engines/<engine>.py `counters`: vLLM's, which
the emulator serves too, or llama.cpp's plus the finished-requests counter servingbench's
llama.cpp launcher adds) before and after a step and keep the deltas in
`server_metrics.json` (shape: docs/report.md). Control plane only (httpx, between steps,
never while a step's requests stream). A server without `/metrics` is recorded as
unavailable; it never fails a run.
"""

from __future__ import annotations

import math
from pathlib import Path

import httpx
from servingbench.resources.contract import durable
from servingbench.resources.contract.redact import redact, short_error
from servingbench.resources.http import control
from servingbench.resources.http.prometheus import parse
from servingbench.resources.model_server import engines

FILE = "server_metrics.json"
SCHEMA_VERSION = 1
DIALECTS = engines.counters()  # every engine's counter names, the emulator's (vLLM's) first
# reasons a finished request was not ok: each engine's own (vLLM's abort), and the
# `http_<status>` a dialect counting by HTTP status maps a non-200 to
FAILED = frozenset(r for d in DIALECTS for r in d.failed_reasons)
SCRAPE_TIMEOUT_S = 5.0
SCRAPE_MAX_BYTES = 16 << 20  # vLLM's /metrics is a few hundred KiB with many models

def _total(samples, name: str) -> float | None:
    rows = samples.get(name)
    return None if not rows else sum(v for _, v in rows)


def snapshot(text: str) -> dict:
    """The counters reconciliation needs, summed over engines/models (one server)."""
    s = parse(text)
    success: dict[str, float] = {}
    for d in DIALECTS:
        for labels, v in s.get(d.finished, []) if d.finished else ():
            reason = d.reason(labels)
            success[reason] = success.get(reason, 0.0) + v
    gen = prompt = None
    for d in DIALECTS:  # the first dialect the server speaks
        gen, prompt = _total(s, d.generation_tokens), _total(s, d.prompt_tokens)
        if gen is not None or prompt is not None:
            break
    buckets: dict[str, float] = {}
    ttft_count = ttft_sum = None
    for d in DIALECTS:
        if d.ttft is None:
            continue
        for labels, v in s.get(f"{d.ttft}_bucket", []):
            if "le" in labels:
                buckets[labels["le"]] = buckets.get(labels["le"], 0.0) + v
        ttft_count, ttft_sum = _total(s, f"{d.ttft}_count"), _total(s, f"{d.ttft}_sum")
        if buckets or ttft_count is not None:
            break
    hist, totals = _histograms(s), _totals(s)
    return {"generation_tokens": gen, "prompt_tokens": prompt,
            "request_success": success or None, "ttft_buckets": buckets or None,
            "ttft_count": ttft_count, "ttft_sum": ttft_sum,
            "histograms": hist or None, "totals": totals or None,
            "emulated": "# EMULATED" in text}


def _histograms(s) -> dict[str, dict]:
    """The server's own per-request histograms (each engine's `Counters.histograms`, the
    first dialect that has any): servingbench's name -> {count, sum}."""
    for d in DIALECTS:
        out = {}
        for name, base in d.histograms.items():
            count, total = _total(s, f"{base}_count"), _total(s, f"{base}_sum")
            if count is not None and total is not None:
                out[name] = {"count": count, "sum": total}
        if out:
            return out
    return {}


def _totals(s) -> dict[str, float]:
    """The server's cumulative counters (each engine's `Counters.totals`): name -> value."""
    for d in DIALECTS:
        out = {name: v for name, metric in d.totals.items()
               if (v := _total(s, metric)) is not None}
        if out:
            return out
    return {}


def _le_key(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return math.inf


def _diff(after, before):
    if after is None or before is None:
        return None
    return after - before


def delta(before: dict, after: dict) -> dict:
    """What the server counted between two snapshots. A counter that went down (the
    server restarted) gives null and `counter_reset: true`, never a negative count."""
    out: dict = {"counter_reset": False}
    for key in ("generation_tokens", "prompt_tokens", "ttft_count", "ttft_sum"):
        out[key] = _diff(after.get(key), before.get(key))
    sb, sa = before.get("request_success"), after.get("request_success")
    if sa is not None and sb is not None:
        by = {k: sa[k] - sb.get(k, 0.0) for k in sa}
        out["request_success"] = by
        out["requests_finished"] = sum(by.values())
        out["requests_ok"] = sum(v for k, v in by.items()
                                 if k not in FAILED and not k.startswith("http_"))
    else:
        out["request_success"] = out["requests_finished"] = out["requests_ok"] = None
    bb, ba = before.get("ttft_buckets"), after.get("ttft_buckets")
    if ba is not None and bb is not None:
        # [le as exposed ("0.5", "+Inf"), cumulative count], ascending le
        out["ttft_buckets"] = [[le, ba[le] - bb.get(le, 0.0)] for le in sorted(ba, key=_le_key)]
    else:
        out["ttft_buckets"] = None
    hb, ha = before.get("histograms"), after.get("histograms")
    out["histograms"] = None if not (ha and hb) else {
        k: {"count": h["count"] - hb[k]["count"], "sum": h["sum"] - hb[k]["sum"]}
        for k, h in ha.items() if k in hb}
    tb, ta = before.get("totals"), after.get("totals")
    out["totals"] = None if not (ta and tb) else {k: v - tb[k] for k, v in ta.items() if k in tb}
    numbers = [v for k, v in out.items() if k in ("generation_tokens", "prompt_tokens",
               "ttft_count", "requests_finished") and v is not None]
    numbers += [c for _, c in out["ttft_buckets"] or []]
    numbers += [h["count"] for h in (out["histograms"] or {}).values()]
    numbers += list((out["totals"] or {}).values())
    if any(v < 0 for v in numbers):
        out = {k: None for k in out} | {"counter_reset": True}
    return out


class Scraper:
    """Scrapes `<base_url>/metrics`; remembers the first reason it was unavailable."""

    def __init__(self, base_url: str, headers: dict[str, str], secrets: tuple[str, ...]) -> None:
        self.url = f"{base_url}/metrics"
        self.headers = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        self.secrets = secrets
        # httpx's default verification, built once per process (control.tls): a new client
        # builds it again each time (loading the CA bundle), two scrapes a step
        self.verify = control.tls()

    async def scrape(self) -> tuple[dict | None, str | None]:
        """(snapshot, None) or (None, why unavailable)."""
        try:
            async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S, verify=self.verify,
                                         trust_env=False) as http:
                r, raw = await control.arequest(http, "GET", self.url, headers=self.headers,
                                                max_bytes=SCRAPE_MAX_BYTES,
                                                deadline_s=SCRAPE_TIMEOUT_S)
        except (httpx.HTTPError, control.ControlError) as exc:
            return None, short_error(f"{type(exc).__name__}: {exc}", self.secrets)
        if r.status_code != 200:
            return None, f"HTTP {r.status_code}"
        if r.headers.get("content-encoding", "identity").lower() != "identity":
            return None, f"compressed /metrics answer ({r.headers['content-encoding'][:20]}) not read"
        snap = snapshot(raw.decode("utf-8", "replace"))
        if snap["generation_tokens"] is None and snap["request_success"] is None:
            return None, "no engine counters (" + ", ".join(
                sorted({d.generation_tokens.split(":")[0] for d in DIALECTS})) + ") in the /metrics answer"
        return snap, None


class ServerMetrics:
    """The per-step deltas of one run, written to `<run_dir>/server_metrics.json` after
    every step (atomically), so a killed run keeps what it had."""

    def __init__(self, run_dir: Path, scraper: Scraper) -> None:
        self.path = Path(run_dir) / FILE
        self.scraper = scraper
        self.steps: list[dict] = []
        self.emulated = False

    async def begin(self) -> tuple[dict | None, str | None]:
        return await self.scraper.scrape()

    async def end(self, steps: list[str], before: tuple[dict | None, str | None]) -> None:
        snap0, why0 = before
        snap1, why1 = await self.scraper.scrape() if snap0 is not None else (None, why0)
        entry: dict = {"step": steps[0] if len(steps) == 1 else " + ".join(steps),
                       "steps": list(steps)}
        if snap0 is None or snap1 is None:
            entry |= {"available": False, "reason": why1 or why0}
        else:
            self.emulated = self.emulated or snap0["emulated"] or snap1["emulated"]
            entry |= {"available": True, "reason": None, **delta(snap0, snap1)}
        self.steps.append(entry)
        self.write()

    def write(self) -> None:
        avail = [s["available"] for s in self.steps]
        doc = {"schema_version": SCHEMA_VERSION, "endpoint": redact(self.scraper.url),
               "available": any(avail),
               "reason": None if any(avail) else next((s["reason"] for s in self.steps), None),
               "emulated": self.emulated, "steps": self.steps}
        durable.write_json(self.path, doc, indent=1)
