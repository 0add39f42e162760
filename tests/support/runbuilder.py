"""A small builder for run folders (contract §6), for tests with hand-computed answers.

Times are integer milliseconds after T0 (2026-11-29T02:00:00Z), so every duration in a
test's expected values is plain arithmetic on the numbers written in the test.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pyarrow as pa

from resources.contract import manifest as mf
from resources.contract.schemas import BILL, CHUNK_LOG, REQUEST_LOG, TELEMETRY, write_parquet

T0 = mf.parse_ts("2026-11-29T02:00:00Z")
MS = 1_000_000
HOUR_MS = 3_600_000


def at(ms: float | None):
    return None if ms is None else T0 + int(round(ms * MS))


def step_mode(step: str) -> tuple[str, float]:
    kind, value = step.split("=")
    return ("concurrency" if kind == "c" else "rate"), float(value)


class RunBuilder:
    def __init__(self, run_id: str = "run-1", instance_type: str = "p5.48xlarge",
                 node_count: int = 1, hourly: float | None = 55.04, source: str = "emulated"):
        self.run_id = run_id
        self.requests: list[dict] = []
        self.chunks: list[dict] = []
        self.bill: list[dict] = []
        self.telemetry: list[dict] = []
        m = mf.empty(run_id, source, T0)
        m.update(candidate="p5-scout-bf16-tp8", model="meta-llama/Llama-4-Scout-17B-16E-Instruct",
                 precision="bf16", tensor_parallel=8, expert_parallel=False, engine="vllm",
                 account_id="123456789012", region="us-east-1", cluster_name="bench",
                 instance_type=instance_type, node_count=node_count,
                 scenario={"input_tokens": 512, "output_tokens": 128, "dataset": None},
                 price_basis=None if hourly is None else {
                     "region": "us-east-1", "purchase_option": "on_demand",
                     "retrieved_on": "2026-11-28", "source": "price_sheet",
                     "hourly_usd_per_node": hourly})
        self.manifest = m
        self.client_limited: set[str] = set()

    # --- requests -------------------------------------------------------------------
    def request(self, step: str = "c=1", *, sent: float, chunks: list[tuple[float, int]] = (),
                finished: float | None = None, sched: float | None = None,
                phase: str = "steady", status: str = "ok", output_tokens: int | None = -1,
                input_tokens: int | None = 512, tokens_source: str = "usage",
                request_id: str | None = None, http_status: int | None = 200,
                first: float | None = -1.0, last: float | None = -1.0) -> str:
        """Add one request; first/last token times and output tokens default to the chunks'."""
        rid = request_id or str(uuid.UUID(int=len(self.requests) + 1))
        mode, target = step_mode(step)
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
            "http_status": http_status, "error": None if status == "ok" else f"{status} (test)",
        })
        for seq, (t, k) in enumerate(chunks):
            self.chunks.append({"run_id": self.run_id, "request_id": rid, "seq": seq,
                                "at": at(t), "tokens": k})
        return rid

    # --- bill -----------------------------------------------------------------------
    def bill_row(self, start_ms: float, end_ms: float, amount: float, quantity: float, *,
                 usage_unit: str = "Hrs", instance_type: str | None = "", service: str =
                 "Amazon Elastic Compute Cloud - Compute", usage_type: str | None = None,
                 estimated: bool = False, source: str = "price_sheet", unit: str = "USD",
                 account_id: str | None = "", region: str | None = "",
                 tag_value: str | None = "") -> None:
        m = self.manifest
        itype = m["instance_type"] if instance_type == "" else instance_type
        self.bill.append({
            "run_id": self.run_id, "period_start": at(start_ms), "period_end": at(end_ms),
            "account_id": m["account_id"] if account_id == "" else account_id,
            "region": m["region"] if region == "" else region, "service": service,
            "usage_type": usage_type or f"USE1-BoxUsage:{itype}", "instance_type": itype,
            "tag_key": "servingbench:run-id",
            "tag_value": self.run_id if tag_value == "" else tag_value,
            "metric": "UnblendedCost", "amount": amount, "unit": unit,
            "usage_quantity": quantity, "usage_unit": usage_unit, "estimated": estimated,
            "source": source})

    def hourly_bill(self, hours: int = 1, rate: float | None = None, **kw) -> None:
        """Instance rows for hours [0, hours) after T0 at the price basis' rate."""
        rate = rate if rate is not None else self.manifest["price_basis"]["hourly_usd_per_node"]
        n = self.manifest["node_count"]
        for h in range(hours):
            self.bill_row(h * HOUR_MS, (h + 1) * HOUR_MS, rate * n, float(n), **kw)

    # --- telemetry (contract §2.5) -------------------------------------------------------
    def sample(self, ms: float, device: str, metric: str, value: float | None,
               source: str = "dcgm") -> None:
        self.telemetry.append({"run_id": self.run_id, "at": at(ms), "source": source,
                               "device": device, "metric": metric, "value": value})

    # --- output ---------------------------------------------------------------------
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
            seen = []
            for r in self.requests:
                if r["phase"] == "steady" and r["step"] not in seen:
                    seen.append(r["step"])
            m["steps"] = [{"step": s, "load_mode": step_mode(s)[0], "target": step_mode(s)[1],
                           "client_limited": s in self.client_limited, "client_cpu_share": 0.1,
                           "loop_lag_p99_s": 0.0005} for s in seen]
        return m

    def write(self, run_dir: Path, bill: bool = True) -> Path:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        mf.dump(self.build_manifest(), run_dir / "manifest.json")
        for name, phase in (("warmup_log", "warmup"), ("steady_state_request_log", "steady")):
            rows = [r for r in self.requests if (r["phase"] == "warmup") == (phase == "warmup")]
            write_parquet(pa.Table.from_pylist(rows, schema=REQUEST_LOG), run_dir / f"{name}.parquet")
        write_parquet(pa.Table.from_pylist(self.chunks, schema=CHUNK_LOG), run_dir / "chunk_log.parquet")
        if bill:
            write_parquet(pa.Table.from_pylist(self.bill, schema=BILL), run_dir / "bill.parquet")
        if self.telemetry:
            write_parquet(pa.Table.from_pylist(self.telemetry, schema=TELEMETRY),
                          run_dir / "telemetry.parquet")
        return run_dir


def clean_run() -> RunBuilder:
    """The hand-computed clean run of tests/analysis/test_metrics.py (see there)."""
    b = RunBuilder()
    b.request("c=2", phase="warmup", sent=0, chunks=[(100, 1), (110, 1)], finished=120)
    b.request("c=2", sched=1000, sent=1000, chunks=[(1100, 1), (1120, 1), (1150, 1)], finished=1160)
    b.request("c=2", sched=1000, sent=1010, chunks=[(1210, 1), (1250, 1)], finished=1400)
    b.request("c=2", sched=1160, sent=1160, chunks=[(1260, 1), (1300, 1), (1330, 1), (1400, 1)],
              finished=1400)
    b.hourly_bill()
    return b
