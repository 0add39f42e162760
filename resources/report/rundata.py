"""One run folder (contract §6) read for reporting: the manifest, the analyzer's outputs and
the raw records behind the CDFs. Reading only; a report never rewrites a run's files.

Every problem with the input raises ReportError naming the file (and the column), so the
CLI can print one clear line instead of a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.analysis.frontier import read_frontier
from servingbench.resources.contract import deployment_record, run_files
from servingbench.resources.contract import manifest as manifest_mod
from servingbench.resources.contract import parity as parity_file
from servingbench.resources.contract.outputs import JOB_KEYS, OUTPUTS, PROBE_KEYS, required_columns
from servingbench.resources.contract.schemas import SchemaError, read_records

# The analyzer's outputs: their columns and types are the contract's (outputs.py OUTPUTS).
# Extra columns are the contract's optional ones; a missing required one is an error.
COST_COLUMNS = required_columns("cost_per_1m")
HEADLINE_COLUMNS = required_columns("headline")


def _kind_ok(want: pa.DataType, typ: pa.DataType) -> tuple[bool, str]:
    """Type families, not exact types: the report reads values, it does not re-check the
    analyzer's precision (a null-only column may be typed `null`)."""
    if pa.types.is_null(typ):
        return True, ""
    if pa.types.is_string(want):
        return pa.types.is_string(typ) or pa.types.is_large_string(typ), "string"
    if pa.types.is_timestamp(want):
        return pa.types.is_timestamp(typ), "timestamp"
    if pa.types.is_boolean(want):
        return pa.types.is_boolean(typ), "bool"
    if pa.types.is_list(want):
        return pa.types.is_list(typ) or pa.types.is_large_list(typ), "list"
    return pa.types.is_integer(typ) or pa.types.is_floating(typ), "number"


class ReportError(ValueError):
    """A run folder cannot be reported on; the message names the file and what is wrong."""


@dataclass
class RunData:
    run_dir: Path
    manifest: dict
    gates: list[dict] | None
    metrics: pd.DataFrame | None
    cost: pd.DataFrame | None
    headline: pd.DataFrame | None
    requests: pa.Table | None = field(repr=False, default=None)
    chunks: pa.Table | None = field(repr=False, default=None)
    telemetry_metrics: pd.DataFrame | None = None
    telemetry: pa.Table | None = field(repr=False, default=None)  # contract §2.5 samples
    quality: dict | None = None     # quality_summary.json (contract §3.3); None: none recorded
    parity: dict | None = None      # quality_parity.json: the verdict against the reference
    job: dict | None = None         # job.json (contract §3.4): a batch run
    slo_capacity: dict | None = None  # slo_capacity.json (contract §3.5): an SLO-search run
    frontier: pd.DataFrame | None = None  # frontier.parquet (contract §3.6), or derived
    what_if: pd.DataFrame | None = None   # cost_what_if.parquet (contract §4.1)
    # the emulator's error band for an emulated run (deployment.json: its accelerator's and
    # engine's cross-validated error against published measurements); None: none recorded
    fidelity: dict | None = None

    @property
    def band(self) -> float | None:
        """The emulated figures' relative error band (None: measured or uncalibrated)."""
        return deployment_record.band_fraction(self.fidelity) if self.emulated else None

    @property
    def failed_parity(self) -> bool:
        return parity_file.failed(self.parity)

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def candidate(self) -> str:
        return self.manifest.get("candidate") or self.run_id

    @property
    def created_at_ns(self) -> int:
        return manifest_mod.parse_ts(self.manifest["created_at"])

    @property
    def emulated(self) -> bool:
        """True when anything in the run came from the emulator (manifest or any row)."""
        if self.manifest.get("source") == "emulated":
            return True
        for frame in (self.metrics, self.cost, self.headline):
            if frame is not None and "source" in frame and (frame["source"] == "emulated").any():
                return True
        return False

    @property
    def accepted(self) -> bool | None:
        """None when the analyzer has not run (no gates.json)."""
        return run_files.accepted(self.gates)


def _read_frame(path: Path, name: str) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ReportError(f"{path}: unreadable ({exc})") from None
    missing = [c for c in required_columns(name) if c not in table.column_names]
    if missing:
        raise ReportError(f"{path}: missing column {missing[0]!r} (contract §3/§4)")
    schema = OUTPUTS[name]
    for col in (c for c in schema.names if c in table.column_names):
        ok, kind = _kind_ok(schema.field(col).type, table.schema.field(col).type)
        if not ok:
            raise ReportError(f"{path}: column {col!r} has type "
                              f"{table.schema.field(col).type}, expected a {kind}")
    return table.to_pandas()


def _read_parity(run_dir: Path) -> dict | None:
    try:
        return parity_file.read(run_dir)
    except parity_file.ParityFileError as exc:
        raise ReportError(str(exc)) from None


def _read_json(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return doc


def _read_gates(run_dir: Path) -> list[dict] | None:
    try:
        return run_files.read_gates(run_dir)
    except run_files.RunFileError as exc:
        raise ReportError(str(exc)) from None


SEARCH_MODES = ("rate", "concurrency")


def _number_or_null(value) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _read_job(path: Path) -> dict | None:
    """job.json (contract §3.4): every key present, each a number or null."""
    job = _read_json(path)
    if job is None:
        return None
    for key in JOB_KEYS:
        if key not in job:
            raise ReportError(f"{path}: missing key {key!r} (contract §3.4)")
        if not _number_or_null(job[key]):
            raise ReportError(f"{path}: {key!r} must be a number or null, got {job[key]!r:.80}")
    return job


def _read_capacity(path: Path) -> dict | None:
    """slo_capacity.json (contract §3.5): slo, load_mode, probes, capacity, interval."""
    doc = _read_json(path)
    if doc is None:
        return None
    for key in ("slo", "load_mode", "probes", "capacity", "interval"):
        if key not in doc:
            raise ReportError(f"{path}: missing key {key!r} (contract §3.5)")
    if not isinstance(doc["slo"], dict) or not all(_number_or_null(v) for v in doc["slo"].values()):
        raise ReportError(f"{path}: 'slo' must map each percentile to seconds")
    if doc["load_mode"] not in SEARCH_MODES:
        raise ReportError(f"{path}: 'load_mode' must be one of {SEARCH_MODES}")
    if not isinstance(doc["probes"], list):
        raise ReportError(f"{path}: 'probes' must be a list")
    for i, probe in enumerate(doc["probes"]):
        if not isinstance(probe, dict) or any(k not in probe for k in PROBE_KEYS):
            raise ReportError(f"{path}: probe [{i}] must have keys {', '.join(PROBE_KEYS)}")
        if not isinstance(probe["step"], str) or not _number_or_null(probe["target"]) \
                or not isinstance(probe["valid"], bool) or not isinstance(probe["met"], bool):
            raise ReportError(f"{path}: probe [{i}]: step is a string, target a number, "
                              "valid and met booleans")
    if not _number_or_null(doc["capacity"]):
        raise ReportError(f"{path}: 'capacity' must be a number or null")
    if not isinstance(doc["interval"], list) or len(doc["interval"]) != 2 \
            or not all(_number_or_null(v) for v in doc["interval"]):
        raise ReportError(f"{path}: 'interval' must be [met, not_met] (numbers or null)")
    return doc


def load_run(run_dir: Path | str, raw: bool = True) -> RunData:
    """Read a run folder. `raw=False` skips the request and chunk logs (no CDFs)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: not a run folder (no such directory)")
    try:
        manifest = manifest_mod.load(run_dir / "manifest.json")
    except manifest_mod.ManifestError as exc:
        raise ReportError(str(exc)) from None
    run = RunData(
        run_dir=run_dir,
        manifest=manifest,
        gates=_read_gates(run_dir),
        metrics=_read_frame(run_dir / "derived_metrics.parquet", "derived_metrics"),
        cost=_read_frame(run_dir / "cost_per_1m.parquet", "cost_per_1m"),
        headline=_read_frame(run_dir / "headline.parquet", "headline"),
        telemetry_metrics=_read_frame(run_dir / "telemetry_metrics.parquet", "telemetry_metrics"),
        quality=_read_json(run_dir / "quality_summary.json"),
        parity=_read_parity(run_dir),
        job=_read_job(run_dir / "job.json"),
        slo_capacity=_read_capacity(run_dir / "slo_capacity.json"),
        fidelity=deployment_record.fidelity(run_dir),
    )
    try:
        table = read_frontier(run_dir, manifest)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ReportError(f"{run_dir / 'frontier.parquet'}: unreadable ({exc})") from None
    run.frontier = None if table is None else table.to_pandas()
    run.what_if = _read_frame(run_dir / "cost_what_if.parquet", "cost_what_if")
    if raw:
        try:
            run.requests = read_records(run_dir, "steady_state_request_log")
            run.chunks = read_records(run_dir, "chunk_log")
            run.telemetry = read_records(run_dir, "telemetry")
        except SchemaError as exc:
            raise ReportError(str(exc)) from None
    return run


def latest_per_candidate(runs: list[RunData]) -> list[RunData]:
    """The newest run (by manifest created_at, then run_id) of each candidate, in
    candidate order."""
    best = run_files.latest(runs, lambda r: r.candidate, lambda r: (r.created_at_ns, r.run_id))
    return [best[c] for c in sorted(best)]


def headline_row(run: RunData, slo: tuple[float, float] | None = None) -> dict | None:
    """The one rule for "a run's headline row": the row for `slo` (ttft, tpot) when given,
    else the first (the run's first SLO); None when there is no such row. Missing values
    are None, never NaN."""
    if run.headline is None or run.headline.empty:
        return None
    rows = run.headline
    if slo is not None:
        rows = rows[(rows["slo_ttft_s"] == slo[0]) & (rows["slo_tpot_s"] == slo[1])]
    if rows.empty:
        return None
    return {k: (None if not isinstance(v, list | tuple) and pd.isna(v) else v)
            for k, v in rows.iloc[0].to_dict().items()}
