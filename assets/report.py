"""benchmark_report: the run's self-contained HTML report (with its plots and the server
reconciliation) written into the run folder, and the nightly regression check on the
headline (non-blocking, WARN): this run against the trailing median of the same
candidate's last runs (resources.report, the same code as `servingbench report`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dagster as dg
from servingbench.resources.analysis.summary import table
from servingbench.resources.contract import manifest as mf
from servingbench.resources.report.regression import Thresholds, compare_to_history, headline_record
from servingbench.resources.report.rundata import ReportError

REGRESSION_WINDOW = 5           # trailing median of the last N earlier runs
REGRESSION_THRESHOLDS = Thresholds()  # throughput -10 %, p99 TTFT +20 %, cost per 1M +10 %
CHECK = "headline_has_not_regressed"
# Prometheus counters are floats; the counts they carry are whole
RECONCILIATION_COLUMNS = [
    # the engine's counters are floats in Prometheus text; they count whole tokens
    ("step", "step", ""), ("client_tokens", "client tokens", ",.0f"),
    ("server_tokens", "server tokens", ",.0f"), ("gap", "token gap", "+.2%"),
    ("client_requests", "client requests", ",.0f"),
    ("server_requests", "server requests", ",.0f"),
    ("result", "result", ""),
]


def reconciliation_md(rec: dict | None) -> str:
    if rec is None:
        return "no server_metrics.json: the engine's counters were not scraped for this run"
    if not rec["available"]:
        return f"server metrics unavailable: {rec['reason']}"
    rows = [{**r, "result": "FLAGGED" if r["flagged"] else "ok"} for r in rec["steps"]]
    head = ("EMULATED server counters — " if rec.get("emulated") else "") + (
        f"client vs server per step (flagged when a gap exceeds {rec['tolerance']:.0%})\n\n")
    return head + table(rows, RECONCILIATION_COLUMNS, markdown=True)


def history_dirs(runs_dir: Path, candidate: str, exclude: Path) -> list[Path]:
    """The other run folders of `candidate` under `runs_dir`, newest first."""
    found = []
    for manifest in Path(runs_dir).glob("*/manifest.json"):
        run_dir = manifest.parent
        if run_dir.resolve() == Path(exclude).resolve():
            continue
        try:
            m = mf.load(manifest)
        except mf.ManifestError:
            continue  # a broken folder is not history
        if m.get("candidate") == candidate:
            found.append((mf.parse_ts(m["created_at"]), m["run_id"], run_dir))
    return [d for *_, d in sorted(found, reverse=True)]


def regression(run_dir: Path, runs_dir: Path, n: int = REGRESSION_WINDOW,
               thresholds: Thresholds = REGRESSION_THRESHOLDS):
    """compare_to_history for one run folder against its candidate's other runs; None when
    the run has no headline."""
    current = headline_record(run_dir)
    if current is None:
        return None
    history = []
    for d in history_dirs(runs_dir, current["candidate"], run_dir):
        try:
            row = headline_record(d, current["slo_ttft_s"], current["slo_tpot_s"])
        except ReportError:
            continue
        if row is not None:
            history.append(row)
    return compare_to_history(current, history, n=n, thresholds=thresholds)


def build(partitions_def) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=partitions_def, group_name="benchmark",
              description="The run's HTML report (plots, headline, gates, cost, server "
                          "reconciliation) in its run folder; `servingbench report` writes "
                          "the same file.",
              required_resource_keys={"storage"})
    def benchmark_report(context, cost_per_1m_output_tokens: dict) -> dg.Output:
        from servingbench.resources.report import write_run_report

        run_dir = Path(cost_per_1m_output_tokens["run_dir"])
        try:
            path = write_run_report(run_dir)
        except ReportError as exc:
            raise dg.Failure(description=f"cannot write the report: {exc}") from None
        rec_file = run_dir / "reconciliation.json"
        rec = json.loads(rec_file.read_text()) if rec_file.exists() else None
        emulated = mf.load(run_dir / "manifest.json")["source"] == "emulated"
        metadata = {
            "report": dg.MetadataValue.path(str(path)),
            "source": dg.MetadataValue.text("emulated" if emulated else "measured"),
            "reconciliation": dg.MetadataValue.md(reconciliation_md(rec)),
            "flagged_steps": dg.MetadataValue.json(rec["flagged_steps"] if rec else []),
        }
        if rec is not None:
            metadata["reconciliation_json"] = dg.MetadataValue.path(str(rec_file))
        for png in sorted((run_dir / "plots").glob("*.png")):
            metadata[f"plot_{png.stem}"] = dg.MetadataValue.path(str(png))
        if rec and rec["flagged_steps"]:
            context.log.warning(f"server reconciliation flagged {rec['flagged_steps']}")
        # the run is finished: its folder is published (marker last) where every pod reads it
        published = context.resources.storage.publish_folder(run_dir)
        if published:
            metadata["published"] = dg.MetadataValue.text(published)
        return dg.Output(dict(cost_per_1m_output_tokens, report=str(path)), metadata=metadata)

    return benchmark_report


GATE_STEPS = ("request_log_gates", "bill_gates")


@dg.failure_hook(required_resource_keys={"storage"})
def publish_unfinished_run(context) -> None:
    """A run that a gate rejected, or that failed mid-chain, is published too (with
    SERVINGBENCH_DATA_URI), its marker saying `rejected` or `failed`: the pod's scratch
    folder dies with the pod, and a rejected run keeps all its raw records. A rejected
    run is analyzed first (gates.json and the metrics, never the cost tables)."""
    storage = context.resources.storage
    if not storage.remote_uri:
        return
    run_dir = storage.folder_of(context.run_id)
    if run_dir is None:
        return  # it failed before its folder existed: nothing to publish
    status = "rejected" if context.op.name in GATE_STEPS else "failed"
    if status == "rejected":
        from servingbench.resources.analysis.analyze import analyze_run
        from servingbench.resources.analysis.gates import recorded

        analyze_run(run_dir, gated=recorded(run_dir))  # the rules the check already ran
    uri = storage.publish_folder(run_dir, status=status)
    context.log.info(f"run folder published as {status}: {uri}")


def _spec(partitions_def) -> dg.AssetCheckSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            CHECK, asset="cost_per_1m_output_tokens", blocking=False,
            partitions_def=partitions_def,
            description=f"Nightly regression (WARN, non-blocking): the headline against the "
                        f"trailing median of the candidate's last {REGRESSION_WINDOW} runs.")


def build_checks(partitions_def) -> list:
    @dg.multi_asset_check(specs=[_spec(partitions_def)], name=CHECK,
                          ins={"cost": dg.AssetIn("cost_per_1m_output_tokens")},
                          required_resource_keys={"storage"})
    def headline_has_not_regressed(context, cost: dict):
        run_dir = Path(cost["run_dir"])
        res = regression(run_dir, context.resources.storage.runs_dir)
        if res is None:
            yield dg.AssetCheckResult(
                asset_key="cost_per_1m_output_tokens", check_name=CHECK, passed=True,
                severity=dg.AssetCheckSeverity.WARN, description="no headline: nothing to compare")
            return
        yield dg.AssetCheckResult(
            asset_key="cost_per_1m_output_tokens", check_name=CHECK, passed=res.passed,
            severity=dg.AssetCheckSeverity.WARN, description=res.summary(),
            metadata={k: _meta(v) for k, v in res.metadata.items()})

    return [headline_has_not_regressed]


def _meta(value):
    if value is None:
        return dg.MetadataValue.null()
    if isinstance(value, list | dict):
        return dg.MetadataValue.json(value)
    return value
