"""The one builder of run folders (contract §6), for tests and benchmarks.

Every folder is written by `RunBuilder`: one manifest template, one instance bill, one
writer. Three ways to fill it:

* by hand, `RunBuilder.request(...)`: times are integer milliseconds after T0
  (2026-11-29T02:00:00Z), so every duration in a test's expected values is plain
  arithmetic on the numbers written in the test (`clean_run` is the analyzer tests' run);
* simulated, then analyzed, `simulated_run(root, Candidate(...))`: closed-loop slots,
  lognormal TTFT and per-token gaps and an instance bill, and the analyzer's own outputs
  (`analyze_run`: metrics, gates, cost, headline, frontier), so a report fixture holds
  exactly what the analyzer writes (`build_comparison`: the report tests' five runs);
* synthetic and large, `synthetic_run(run_dir, n_requests)`: vectorised with numpy and
  written in row groups, so 100k requests × 128 chunks (12.8M chunk rows) build in seconds
  without holding every string in memory (the benchmarks' folders). Marked `emulated`:
  nothing there was measured.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.outputs import required_columns
from servingbench.resources.contract.schemas import (
    BILL,
    CHUNK_LOG,
    EVENTS,
    OPTIONAL_CHUNK_COLUMNS,
    OPTIONAL_COLUMNS,
    REQUEST_LOG,
    TELEMETRY,
    TS,
    write_parquet,
)

DERIVED_COLUMNS = required_columns("derived_metrics")  # what the analyzer writes
T0 = mf.parse_ts("2026-11-29T02:00:00Z")
S = 1_000_000_000  # ns per second
MS = 1_000_000  # ns per millisecond
HOUR_MS = 3_600_000
HOUR = 3600 * S
MODEL = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def at(ms: float | None):
    return None if ms is None else T0 + int(round(ms * MS))


SCHEDULE_STEP = "schedule"  # an episode's one steady step (contract §3.7)


def step_mode(step: str, target: float | None = None) -> tuple[str, float]:
    if step == SCHEDULE_STEP:  # open loop at the schedule's mean rate
        return "rate", float(target or 0.0)
    kind, value = step.split("=")
    return ("concurrency" if kind == "c" else "rate"), float(value)


class RunBuilder:
    def __init__(self, run_id: str = "run-1", instance_type: str = "p5.48xlarge",
                 node_count: int = 1, hourly: float | None = 55.04, source: str = "emulated",
                 created_ns: int = T0, **fields) -> None:
        """`fields` override the manifest's defaults (contract §2.1)."""
        self.run_id = run_id
        self.requests: list[dict] = []
        self.chunks: list[dict] = []
        self.bill: list[dict] = []
        self.telemetry: list[dict] = []
        self.events: list[dict] = []
        m = mf.empty(run_id, source, created_ns)
        m.update(candidate="p5-scout-bf16-tp8", model=MODEL,
                 precision="bf16", tensor_parallel=8, expert_parallel=False, engine="vllm",
                 account_id="123456789012", region="us-east-1", cluster_name="bench",
                 instance_type=instance_type, node_count=node_count,
                 scenario={"input_tokens": 512, "output_tokens": 128, "dataset": None},
                 price_basis=None if hourly is None else {
                     "region": "us-east-1", "purchase_option": "on_demand",
                     "retrieved_on": "2026-11-28", "source": "price_sheet",
                     "hourly_usd_per_node": hourly})
        m.update(fields)
        self.manifest = m
        self.client_limited: set[str] = set()

    # --- requests -------------------------------------------------------------------
    def request(self, step: str = "c=1", *, sent: float, chunks: list[tuple[float, int]] = (),
                finished: float | None = None, sched: float | None = None,
                phase: str = "steady", status: str = "ok", output_tokens: int | None = -1,
                input_tokens: int | None = 512, tokens_source: str = "usage",
                request_id: str | None = None, http_status: int | None = 200,
                first: float | None = -1.0, last: float | None = -1.0,
                replica: str | None = None, model: str | None = None,
                retry_of: str | None = None, error: str | None = None,
                target: float | None = None) -> str:
        """Add one request; first/last token times and output tokens default to the chunks'.
        `target`: the schedule step's mean rate (`step="schedule"`)."""
        rid = request_id or str(uuid.UUID(int=len(self.requests) + 1))
        mode, target = step_mode(step, target)
        ok_chunks = [(t, k) for t, k in chunks if k >= 1]
        self.requests.append({
            "run_id": self.run_id, "request_id": rid, "phase": phase, "step": step,
            "load_mode": mode, "target": target,
            "scheduled_at": at(sent if sched is None else sched), "sent_at": at(sent),
            "first_token_at": at(ok_chunks[0][0] if ok_chunks else None) if first == -1.0 else at(first),
            "last_token_at": at(ok_chunks[-1][0] if ok_chunks else None) if last == -1.0 else at(last),
            "finished_at": at(finished if finished is not None else (chunks[-1][0] if chunks else sent)),
            "input_tokens": input_tokens if status == "ok" else None,
            "output_tokens": (sum(k for _, k in chunks) if output_tokens == -1 else output_tokens)
            if status == "ok" else None,
            "output_tokens_source": tokens_source, "chunks": len(chunks), "status": status,
            "http_status": http_status,
            "error": None if status == "ok" else (error or f"{status} (test)"),
            "replica": replica, "model": model, "retry_of": retry_of,
        })
        for seq, (t, k) in enumerate(chunks):
            self.chunks.append({"run_id": self.run_id, "request_id": rid, "seq": seq,
                                "at": at(t), "tokens": k})
        return rid

    # --- bill -----------------------------------------------------------------------
    def bill_row(self, start_ms: float, end_ms: float, amount: float, quantity: float,
                 **kw) -> None:
        self.bill_row_ns(at(start_ms), at(end_ms), amount, quantity, **kw)

    def bill_row_ns(self, start_ns: int, end_ns: int, amount: float, quantity: float, *,
                    usage_unit: str = "Hrs", instance_type: str | None = "", service: str =
                    "Amazon Elastic Compute Cloud - Compute", usage_type: str | None = None,
                    estimated: bool = False, source: str = "price_sheet", unit: str = "USD",
                    account_id: str | None = "", region: str | None = "",
                    tag_value: str | None = "") -> None:
        """One bill row (contract §2.4); "" takes the manifest's value."""
        m = self.manifest
        itype = m["instance_type"] if instance_type == "" else instance_type
        self.bill.append({
            "run_id": self.run_id, "period_start": start_ns, "period_end": end_ns,
            "account_id": m["account_id"] if account_id == "" else account_id,
            "region": m["region"] if region == "" else region, "service": service,
            "usage_type": usage_type or f"USE1-BoxUsage:{itype}", "instance_type": itype,
            "tag_key": "servingbench:run-id",
            "tag_value": self.run_id if tag_value == "" else tag_value,
            "metric": "UnblendedCost", "amount": amount, "unit": unit,
            "usage_quantity": quantity, "usage_unit": usage_unit, "estimated": estimated,
            "source": source})

    def instance_hours(self, start_ns: int, end_ns: int, rate: float | None = None,
                       **kw) -> None:
        """Instance rows for every whole hour that overlaps [start_ns, end_ns), at the
        price basis' rate per node."""
        rate = rate if rate is not None else self.manifest["price_basis"]["hourly_usd_per_node"]
        n = self.manifest["node_count"]
        for h in range(start_ns - start_ns % HOUR, end_ns, HOUR):
            self.bill_row_ns(h, h + HOUR, rate * n, float(n), **kw)

    def hourly_bill(self, hours: int = 1, rate: float | None = None, **kw) -> None:
        """Instance rows for hours [0, hours) after T0 at the price basis' rate."""
        self.instance_hours(T0, T0 + hours * HOUR, rate, **kw)

    # --- telemetry (contract §2.5) -------------------------------------------------------
    def sample(self, ms: float, device: str, metric: str, value: float | None,
               source: str = "dcgm") -> None:
        self.telemetry.append({"run_id": self.run_id, "at": at(ms), "source": source,
                               "device": device, "metric": metric, "value": value})

    # --- events (contract §2.6) ------------------------------------------------------------
    def event(self, kind: str, subject: str, ms: float, value: float | None = None,
              detail: str | None = None, run_id: str | None = None) -> None:
        self.events.append({"run_id": run_id or self.run_id, "at": at(ms), "kind": kind,
                            "subject": subject, "value": value, "detail": detail})

    def replica_up(self, replica: str, requested_ms: float, ready_ms: float,
                   node: str | None = None, phases: dict[str, float] | None = None) -> None:
        """A replica requested, its start-up phases (seconds each, ending at the ready), ready."""
        self.event("replica_requested", replica, requested_ms, detail=node)
        end = ready_ms
        for name, seconds in reversed(list((phases or {}).items())):
            self.event("replica_phase", replica, end, value=seconds, detail=name)
            end -= seconds * 1000
        self.event("replica_ready", replica, ready_ms, detail=node)

    # --- output ---------------------------------------------------------------------
    def slo_search_probes(self) -> RunBuilder:
        """A rate search as the load generator runs it: rate=1 and 2 met the SLO (TTFT p99
        0.5 s, TPOT p99 0.1 s), rate=4 missed it, rate=3 met it; capacity 3, bracket [3, 4].
        Each probe is 3 requests of 2 tokens 10 ms apart, so the capacity step's window is
        0.37 s with 6 output tokens."""
        self.manifest["scenario"] = {"kind": "slo_search",
                                     "slo": {"ttft_p99_s": 0.5, "tpot_p99_s": 0.1},
                                     "max_probes": 8, "start_rate": 1.0}
        t = 0
        for step, ttft in (("rate=1", 100), ("rate=2", 200), ("rate=4", 900), ("rate=3", 300)):
            for _ in range(3):
                self.request(step, sched=t, sent=t, chunks=[(t + ttft, 1), (t + ttft + 50, 1)],
                             finished=t + ttft + 50)
                t += 10
            t += 2000
        return self

    def _span(self, phase: str) -> dict | None:
        rows = [r for r in self.requests if r["phase"] == phase]
        sent = [r["sent_at"] for r in rows if r["sent_at"] is not None]
        done = [r["finished_at"] for r in rows if r["finished_at"] is not None]
        if not sent or not done:
            return None
        return {"started_at": mf.format_ts(min(sent)), "ended_at": mf.format_ts(max(done))}

    def build_manifest(self) -> dict:
        m = copy.deepcopy(self.manifest)
        for phase in ("warmup", "steady"):
            if phase not in m["phases"] and (span := self._span(phase)):
                m["phases"][phase] = span
        if not m["steps"]:
            seen: dict[str, dict] = {}
            for r in self.requests:
                if r["phase"] == "steady" and r["step"] not in seen:
                    seen[r["step"]] = r
            m["steps"] = [{"step": s, "load_mode": r["load_mode"], "target": r["target"],
                           "client_limited": s in self.client_limited, "client_cpu_share": 0.1,
                           "loop_lag_p99_s": 0.0005} for s, r in seen.items()]
        return m

    def write_manifest(self, run_dir: Path) -> None:
        mf.dump(self.build_manifest(), Path(run_dir) / "manifest.json")

    def write_bill(self, run_dir: Path) -> None:
        write_parquet(pa.Table.from_pylist(self.bill, schema=BILL), Path(run_dir) / "bill.parquet")

    def write(self, run_dir: Path, bill: bool = True) -> Path:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.write_manifest(run_dir)
        for name, phase in (("warmup_log", "warmup"), ("steady_state_request_log", "steady")):
            rows = [r for r in self.requests if (r["phase"] == "warmup") == (phase == "warmup")]
            write_parquet(pa.Table.from_pylist(rows, schema=REQUEST_LOG), run_dir / f"{name}.parquet")
        write_parquet(pa.Table.from_pylist(self.chunks, schema=CHUNK_LOG), run_dir / "chunk_log.parquet")
        if bill:
            self.write_bill(run_dir)
        if self.telemetry:
            write_parquet(pa.Table.from_pylist(self.telemetry, schema=TELEMETRY),
                          run_dir / "telemetry.parquet")
        if self.events:
            write_parquet(pa.Table.from_pylist(sorted(self.events, key=lambda e: e["at"]),
                                               schema=EVENTS), run_dir / "events.parquet")
        return run_dir


def clean_run(**builder) -> RunBuilder:
    """The hand-computed clean run of tests/analysis/test_metrics.py (see there); `builder`:
    RunBuilder's arguments (run_id, hourly, candidate)."""
    b = RunBuilder(**builder)
    b.request("c=2", phase="warmup", sent=0, chunks=[(100, 1), (110, 1)], finished=120)
    b.request("c=2", sched=1000, sent=1000, chunks=[(1100, 1), (1120, 1), (1150, 1)], finished=1160)
    b.request("c=2", sched=1000, sent=1010, chunks=[(1210, 1), (1250, 1)], finished=1400)
    b.request("c=2", sched=1160, sent=1160, chunks=[(1260, 1), (1300, 1), (1330, 1), (1400, 1)],
              finished=1400)
    b.hourly_bill()
    return b


# --- simulated runs with the analyzer's outputs (the report's fixtures) ----------------------
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
    gate_fail: bool = False           # the `scoped` gate fails -> no cost/headline files
    output_tokens: int = 24
    requests_per_slot: int = 6
    model: str = MODEL
    precision: str = "bf16"
    extra: dict = field(default_factory=dict)


def _ts(values: list[int | None]) -> pa.Array:
    return pa.array(values, pa.int64()).cast(TS)


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
            ttft = int(c.ttft_s * load * rng.lognormal(0, 0.25) * S)
            at, seq, total = sent + ttft, 0, 0
            while total < c.output_tokens:
                tok = 2 if (seq % 7 == 3 and total + 2 <= c.output_tokens) else 1
                if seq > 0:
                    at += int(c.itl_s * load * tok * rng.lognormal(0, 0.3) * S)
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


def _month(ns: int) -> tuple[datetime, datetime]:
    start = datetime.fromtimestamp(ns // S, UTC).replace(day=1, hour=0, minute=0, second=0)
    end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start, end


# What the report's header shows of a measured run on EKS (contract §2.1).
REPORT_MANIFEST = dict(
    max_model_len=131072, engine_version="0.11.0", image_digest="sha256:" + "ab" * 32,
    availability_zone="us-east-1a", k8s_version="1.33", nodegroup="sb-7f3a",
    instance_ids=["i-0123456789abcdef0"], driver_version="570.86.15")
PHASE_SPANS_S = {"provision": (0, 552), "deploy": (552, 1300), "image_pull": (555, 722),
                 "weights_load": (725, 1170), "compile": (1170, 1295), "ready": (1295, 1300),
                 "warmup": (1301, 1350)}


def simulated_run(root: Path, c: Candidate, run_id: str, created_at: str = "2026-11-29T02:00:00Z",
                  seed: int = 0, slo_ttft_s: float = 2.0, slo_tpot_s: float = 0.1) -> Path:
    """Write one run folder, with the analyzer's outputs, under `root`; returns its path."""
    rng = np.random.default_rng(seed)
    created = mf.parse_ts(created_at)
    t = created + 1360 * S
    all_reqs, all_chunks = [], []
    for conc in c.steps:
        reqs, chunks = _simulate_step(c, run_id, conc, t, rng)
        all_reqs += reqs
        all_chunks += chunks
        t = max(r["finished_at"] for r in reqs) + S
    warm_reqs, warm_chunks = _simulate_step(
        replace(c, requests_per_slot=1, failing_step=None), run_id, 1,
        created + 1301 * S, rng)
    for r in warm_reqs:
        r.update(request_id=r["request_id"] + "-warmup", step="c=1")
    for ch in warm_chunks:
        ch["request_id"] += "-warmup"
    b = RunBuilder(run_id, c.instance_type, hourly=c.hourly_usd, source=c.source,
                   created_ns=created, candidate=c.candidate, model=c.model,
                   precision=c.precision, **copy.deepcopy(REPORT_MANIFEST))
    m = b.manifest
    m["scenario"]["output_tokens"] = 24
    m["price_basis"]["source"] = "price_list"
    m["phases"] = {k: {"started_at": mf.format_ts(created + a * S),
                       "ended_at": mf.format_ts(created + e * S)}
                   for k, (a, e) in PHASE_SPANS_S.items()}
    m["phases"]["steady"] = {"started_at": mf.format_ts(created + 1360 * S),
                             "ended_at": mf.format_ts(t)}
    m["steps"] = [{"step": f"c={s}", "load_mode": "concurrency", "target": float(s),
                   "client_limited": False, "client_cpu_share": 0.05, "loop_lag_p99_s": 0.0005}
                  for s in c.steps]
    m.update(c.extra)
    for phase, rows in (("steady", all_reqs), ("warmup", warm_reqs)):
        for r in rows:
            r.update(run_id=run_id, phase=phase, load_mode="concurrency",
                     output_tokens_source="usage")
    b.requests = warm_reqs + all_reqs
    b.chunks = [{**ch, "run_id": run_id} for ch in warm_chunks + all_chunks]
    b.instance_hours(created + 1360 * S, t, source="fixture")
    # the month's KMS key fee: listed behind every step, never prorated (contract §4)
    month = [int(x.timestamp()) * S for x in _month(created + 1360 * S)]
    b.bill_row_ns(month[0], month[1], 1.0, 1.0, service="AWS Key Management Service",
                  usage_type="KMS-Keys", instance_type=None, usage_unit="Keys", source="fixture")
    if c.gate_fail:  # a bill row of another account: the scoped gate (rule 5) rejects the run
        b.bill_row_ns(created + 1360 * S, t, 1.0, 1.0, account_id="999999999999",
                      source="fixture")
    run_dir = b.write(root / run_id)
    # the analyzer itself derives the metrics, gates, cost, headline, frontier and what-if
    # prices the report reads, so a fixture can never disagree with what it would write
    analyze_run(run_dir, slos=[(slo_ttft_s, slo_tpot_s)])
    return run_dir


def _bases(**prices: tuple[float, str]) -> list[dict]:
    return [{"basis": b, "hourly_usd_per_node": p, "price_source": src,
             "retrieved_on": "2026-11-28", "region": "us-east-1"} for b, (p, src) in prices.items()]


# The three candidates of the comparison fixture: a fast measured one with an invalid
# step, an emulated one, and a slow one that meets the SLO at no step.
FAST = Candidate("p5-scout-bf16-tp8", "p5.48xlarge", failing_step=8, extra={
    "price_bases": _bases(on_demand=(55.04, "price_list"), spot=(24.8, "spot_price_history"),
                          reserved_3yr=(24.77, "price_list"),
                          capacity_block=(31.46, "capacity_block_offering"))})
EMULATED = Candidate("g6e-scout-fp8-tp8", "g6e.48xlarge", source="emulated", hourly_usd=30.13,
                     ttft_s=0.3, itl_s=0.025, precision="fp8")
SLOW = Candidate("inf2-scout-bf16-tp24", "inf2.48xlarge", hourly_usd=12.98, ttft_s=2.6,
                 itl_s=0.09, slowdown=0.2)


def build_comparison(root: Path) -> list[Path]:
    """Three candidates; the fast one run three times (repeatability)."""
    dirs = [simulated_run(root, FAST, f"fast-{i}", f"2026-11-2{6 + i}T02:00:00Z", seed=i)
            for i in range(3)]
    dirs.append(simulated_run(root, EMULATED, "emu-0", seed=10))
    dirs.append(simulated_run(root, SLOW, "slow-0", seed=20))
    return dirs


# --- synthetic runs of any size (the benchmarks' folders) -----------------------------------
# Without the optional columns (§2.2, §2.3: absent means one worker, no sessions, no cache
# report, every chunk an answer's): the folder is then also readable by an analyzer from before
# a column was added, which the benchmarks' --baseline runs on the same folder.
_SYNTHETIC_REQUEST_LOG = pa.schema([f for f in REQUEST_LOG if f.name not in OPTIONAL_COLUMNS])
_SYNTHETIC_CHUNK_LOG = pa.schema([f for f in CHUNK_LOG if f.name not in OPTIONAL_CHUNK_COLUMNS])

def _synthetic_requests(rng, run_id, ids, phase, step, mode, target, start_ns, gap_ns, chunks, itl_ns,
              tokens_per_chunk, sched=None):
    n = len(ids)
    if sched is None:
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
    }, schema=_SYNTHETIC_REQUEST_LOG)
    ids_arr = pa.array(ids)
    chunk = pa.table({
        "run_id": pa.DictionaryArray.from_arrays(np.zeros(n * chunks, dtype=np.int32),
                                                 pa.array([run_id])).cast(pa.string()),
        "request_id": ids_arr.take(np.repeat(np.arange(n), chunks)),
        "seq": np.tile(np.arange(chunks, dtype=np.int64), n),
        "at": pa.array(at.reshape(-1), TS),
        "tokens": np.full(n * chunks, tokens_per_chunk, dtype=np.int64),
    }, schema=_SYNTHETIC_CHUNK_LOG)
    return req, chunk, int(finished.max())


def synthetic_run(run_dir: Path, n_requests: int, chunks: int = 128,
                  steps: tuple[int, ...] = (1, 8, 32), seed: int = 0, tokens_per_chunk: int = 1,
                  batch: int = 20_000, hourly: float = 55.04,
                  instance_type: str = "p5.48xlarge") -> Path:
    """Write a complete run folder (manifest, logs, bill) with `n_requests` steady requests."""
    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"synthetic-{n_requests}-{seed}"
    steady_w = pq.ParquetWriter(run_dir / "steady_state_request_log.parquet", _SYNTHETIC_REQUEST_LOG)
    chunk_w = pq.ParquetWriter(run_dir / "chunk_log.parquet", _SYNTHETIC_CHUNK_LOG)
    warm_ids = [str(uuid.UUID(int=int(x), version=4)) for x in rng.integers(0, 2**62, 8)]
    warm, warm_chunks, t = _synthetic_requests(rng, run_id, warm_ids, "warmup", f"c={steps[0]}",
                                               "concurrency", steps[0], T0, S // 10, chunks,
                                               10_000_000, tokens_per_chunk)
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
            req, ch, end = _synthetic_requests(rng, run_id, ids, "steady", f"c={c}",
                                               "concurrency", c, t, gap, chunks, 10_000_000,
                                               tokens_per_chunk)
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
    b = RunBuilder(run_id, instance_type, hourly=hourly, source="emulated",
                   candidate="synthetic-p5-scout", engine="synthetic", account_id="000000000000",
                   expert_parallel=None, cluster_name=None, steps=manifest_steps,
                   scenario={"input_tokens": 512, "output_tokens": chunks * tokens_per_chunk,
                             "dataset": None})
    b.manifest["phases"] = {
        "warmup": {"started_at": mf.format_ts(T0), "ended_at": mf.format_ts(steady_start - S)},
        "steady": {"started_at": mf.format_ts(steady_start), "ended_at": mf.format_ts(t)}}
    b.write_manifest(run_dir)
    b.instance_hours(T0, t)
    b.write_bill(run_dir)
    return run_dir


# --- a synthetic episode: a time-compressed day against autoscaled replicas (benchmarks) ----
# requests/s offered in each hour of the day, relative (the shape of pipelines/day_load.csv)
DAY_SHAPE = (0.4, 0.3, 0.25, 0.2, 0.2, 0.25, 0.4, 0.7, 1.0, 1.2, 1.3, 1.35, 1.4, 1.35, 1.3,
             1.25, 1.3, 1.4, 1.5, 1.4, 1.2, 1.0, 0.8, 0.6)


def _episode_timeline(start: int, seg_ns: int, desired: list[int], cold_ns: int):
    """Replica and node events of a simple scaler: at each segment's start the desired count;
    new replicas rK (one node nK each) requested then, Ready `cold_ns` later (their nodes a
    third of it), the highest stopped (its node gone) on a scale-down. Returns the events and
    each replica's [ready, stopped) in ns (stopped None: up to the end)."""
    ev = [("node_ready", "n0", start - 600 * S, None, None),
          ("replica_ready", "r0", start - 300 * S, None, "n0")]
    spans: list[list] = [[start - 300 * S, None]]   # every replica interval, in order
    billed: list[list] = [[start - 600 * S, None]]  # its node's, from the request
    up = {0: 0}  # replica number → its interval's index
    current = 1
    for k, want in enumerate(desired):
        t = start + k * seg_ns
        ev.append(("scale_decision", "local", t, float(want), f"rps segment {k}"))
        for j in range(current, want):
            name = f"r{j}"
            ev += [("node_requested", f"n{j}", t, None, None),
                   ("node_ready", f"n{j}", t + cold_ns // 3, None, None),
                   ("replica_requested", name, t, None, f"n{j}")]
            for i, phase in enumerate(("image_pull", "weights_load", "compile", "graph_capture")):
                ev.append(("replica_phase", name, t + cold_ns * (i + 1) // 4, cold_ns / 4e9, phase))
            ev.append(("replica_ready", name, t + cold_ns, None, f"n{j}"))
            up[j] = len(spans)
            spans.append([t + cold_ns, None])
            billed.append([t, None])
        for j in range(want, current):
            ev += [("replica_stopped", f"r{j}", t + 5 * S, None, None),
                   ("node_gone", f"n{j}", t + 10 * S, None, None)]
            i = up.pop(j)
            spans[i][1], billed[i][1] = t + 5 * S, t + 10 * S
        current = want
    return ev, spans, billed


def synthetic_episode(run_dir: Path, n_requests: int, chunks: int = 16, length_s: float = 3600.0,
                      seed: int = 0, per_replica_rps: float = 50.0, max_replicas: int = 8,
                      cold_start_s: float = 60.0, bucket_s: float = 10.0,
                      batch: int = 50_000) -> Path:
    """A day's load curve (DAY_SHAPE, 24 segments) compressed into `length_s`, `n_requests`
    Poisson-like arrivals in all, one steady step `schedule` against replicas that a simple
    scaler adds and removes (events.parquet, the log's `replica`), and a bill of the node
    timeline (billed from each node's request). Marked emulated: nothing here was measured."""
    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"synthetic-episode-{n_requests}-{seed}"
    seg_ns = int(length_s / len(DAY_SHAPE) * S)
    weights = np.array(DAY_SHAPE) / sum(DAY_SHAPE)
    rates = weights * n_requests / (seg_ns / S)
    desired = [int(min(max_replicas, max(1, np.ceil(r / per_replica_rps)))) for r in rates]
    start = T0 + 120 * S
    counts = rng.multinomial(n_requests, weights)
    sched = np.sort(np.concatenate([
        start + k * seg_ns + rng.integers(0, seg_ns, c, dtype=np.int64)
        for k, c in enumerate(counts)]))
    ev, spans, billed = _episode_timeline(start, seg_ns, desired, int(cold_start_s * S))
    # the replicas ready at each send: a prefix r0..r{c-1} (the highest stops first)
    edges = sorted({t for a, b in spans for t in (a, b) if t is not None})
    ready_at = np.array([sum(1 for a, b in spans if a <= t and (b is None or t < b))
                         for t in edges], dtype=np.int64)
    schema = pa.schema([*_SYNTHETIC_REQUEST_LOG, REQUEST_LOG.field("replica")])
    steady_w = pq.ParquetWriter(run_dir / "steady_state_request_log.parquet", schema)
    chunk_w = pq.ParquetWriter(run_dir / "chunk_log.parquet", _SYNTHETIC_CHUNK_LOG)
    warm_ids = [str(uuid.UUID(int=int(x), version=4)) for x in rng.integers(0, 2**62, 8)]
    warm, warm_chunks, _ = _synthetic_requests(
        rng, run_id, warm_ids, "warmup", "schedule", "rate", 0.0, T0, S // 10, chunks,
        10_000_000, 1)
    target = float(n_requests / (len(DAY_SHAPE) * seg_ns / S))
    warm = warm.set_column(warm.schema.get_field_index("target"), "target",
                           pa.array(np.full(len(warm_ids), target)))
    pq.write_table(warm, run_dir / "warmup_log.parquet")
    chunk_w.write_table(warm_chunks)
    end = start
    for lo in range(0, n_requests, batch):
        part = sched[lo:lo + batch]
        ids = [str(uuid.UUID(int=int(x), version=4)) for x in rng.integers(0, 2**62, len(part))]
        req, ch, fin = _synthetic_requests(rng, run_id, ids, "steady", "schedule", "rate", target,
                                           0, 0, chunks, 10_000_000, 1, sched=part)
        up = ready_at[np.maximum(np.searchsorted(edges, part, side="right") - 1, 0)]
        idx = np.arange(lo, lo + len(part)) % np.maximum(up, 1)
        replica = pa.array(np.char.add("r", idx.astype(str)).astype(object), pa.string())
        steady_w.write_table(req.append_column(schema.field("replica"), replica))
        chunk_w.write_table(ch)
        end = max(end, fin)
    steady_w.close()
    chunk_w.close()
    write_parquet(pa.Table.from_pylist(
        [{"run_id": run_id, "at": t, "kind": k, "subject": s_, "value": v, "detail": d}
         for k, s_, t, v, d in sorted(ev, key=lambda e: e[2])], schema=EVENTS),
        run_dir / "events.parquet")
    b = RunBuilder(run_id, "p5.48xlarge", source="emulated", candidate="synthetic-episode",
                   engine="synthetic", account_id="000000000000", expert_parallel=None,
                   cluster_name=None, replicas={"min": 1, "max": max_replicas, "initial": 1},
                   autoscaling={"policy": "local", "metric": "rps", "target": per_replica_rps,
                                "activation_target": 0.0, "scale_up_cooldown_s": 0.0,
                                "scale_down_cooldown_s": 0.0},
                   scenario={"kind": "schedule", "input_tokens": 512, "output_tokens": chunks,
                             "segments": [{"duration_s": seg_ns / S, "rate": float(r)}
                                          for r in rates], "bucket_s": bucket_s},
                   steps=[{"step": "schedule", "load_mode": "rate", "target": target,
                           "client_limited": False, "client_cpu_share": None,
                           "loop_lag_p99_s": None}])
    b.manifest["phases"] = {
        "warmup": {"started_at": mf.format_ts(T0), "ended_at": mf.format_ts(start - S)},
        "steady": {"started_at": mf.format_ts(start), "ended_at": mf.format_ts(end)}}
    b.write_manifest(run_dir)
    # the bill: per hour, the node-hours billed from each node's request (EC2 counts from launch)
    for h in range(T0 - T0 % HOUR - HOUR, end, HOUR):
        used = sum(max(0, min(e if e is not None else h + HOUR, h + HOUR) - max(a, h))
                   for a, e in billed) / HOUR
        if used:
            b.bill_row_ns(h, h + HOUR, 55.04 * used, used)
    b.write_bill(run_dir)
    return run_dir
