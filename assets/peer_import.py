"""peer_import_job: other tools' results (a folder, or an S3 prefix) imported into run folders
and analyzed, as `servingbench import` and `servingbench analyze` do one at a time
(docs/import.md). Each result becomes `<runs_dir>/<run_id>/`; a run whose folder already
exists is left as it is (imports never overwrite), so the job can run again over a prefix
that keeps growing.

No `from __future__ import annotations` here: Dagster reads the op's config class from its
annotation at definition time, and a string annotation it cannot resolve."""

import tempfile
from pathlib import Path

import dagster as dg
from servingbench.assets.peer_prefix import (
    LEDGER,
    ROOTS,
    check_source,
    import_roots,
    listing,
    read_ledger,
    record,
    to_download,
)
from servingbench.resources import peers
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.summary import table
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract import settings as envvars
from servingbench.resources.contract.yamltext import short
from servingbench.resources.peers.discover import results_in
from servingbench.resources.peers.records import PeerFileError, read_result
from servingbench.resources.peers.run_writer import default_run_id, write_run
from servingbench.resources.storage.runstore import RunStoreError, get, is_remote

COLUMNS = [("result", "result", ""), ("run_id", "run", ""), ("outcome", "outcome", "")]


class PeerImportConfig(dg.Config):
    peer: str
    source: str  # a local folder or s3://bucket/prefix holding the peer's results
    run_source: str = "emulated"  # "measured" only when the peer ran against a real engine
    candidate: str | None = None


def import_results(folder: Path, cfg: PeerImportConfig, runs_dir: Path) -> list[dict]:
    """Import and analyze every result of `cfg.peer` under `folder`; one row per result,
    each its own outcome (imported and analyzed, already imported, or malformed: why), so
    one bad file never fails the job nor keeps the results after it out."""
    rows = []
    reader = peers.get(cfg.peer)
    base = {"candidate": cfg.candidate} if cfg.candidate else {}
    real = folder.resolve()
    for path in results_in(folder, cfg.peer):
        name = str(path.relative_to(folder))
        if not path.resolve().is_relative_to(real):  # a symlink out of the source folder
            rows.append({"result": name, "run_id": None,
                         "outcome": "not imported: a link that leaves the source folder"})
            continue
        try:
            run = read_result(reader, path)
            run_id = default_run_id(run)
            out = runs_dir / run_id
            if out.exists():
                rows.append({"result": name, "run_id": run_id, "outcome": "already imported"})
                continue
            write_run(run, out, base, run_id=run_id, source=cfg.run_source)
        except (PeerFileError, mf.ManifestError, FileExistsError) as exc:
            rows.append({"result": name, "run_id": None, "outcome": f"malformed: {exc}"})
            continue
        except OSError as exc:  # unreadable here, or the runs folder's disk: this result only
            rows.append({"result": name, "run_id": None,
                         "outcome": f"not imported: {short(str(exc), 300)}"})
            continue
        result = analyze_run(out)
        outcome = {0: "accepted", 3: "rejected by a gate"}.get(result.exit_code, result.message)
        rows.append({"result": name, "run_id": run_id, "outcome": outcome, "run_dir": str(out)})
    return rows


@dg.op(required_resource_keys={"storage"},
       description="Import a peer's results (aiperf, guidellm, inference-perf, vllm) from a "
                   "folder or S3 prefix into run folders and analyze each.")
def import_peer_results(context, config: PeerImportConfig) -> list[dict]:
    if config.peer not in peers.names():
        raise dg.Failure(description=f"peer: {config.peer!r} is not one of {peers.names()}")
    if config.run_source not in mf.SOURCES:
        raise dg.Failure(description=f"run_source: {config.run_source!r} is not one of "
                                     f"{mf.SOURCES}")
    storage = context.resources.storage
    runs_dir = Path(storage.runs_dir)
    try:
        check_source(config.source, import_roots(envvars.get(ROOTS), runs_dir.parent))
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from None
    runs_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer-import-") as tmp:
        folder = Path(config.source)
        skipped: list[dict] = []
        if is_remote(config.source):
            ledger_path = runs_dir.parent / LEDGER
            ledger = read_ledger(ledger_path)
            try:
                listed = listing(config.source)
                keys, skipped = to_download(config.peer, listed, ledger.get(config.source, {}),
                                            runs_dir)
                get(config.source, keys, Path(tmp))
            except (RunStoreError, OSError) as exc:
                raise dg.Failure(description=f"source: {exc}") from None
            folder = Path(tmp)
        elif not folder.is_dir():
            raise dg.Failure(description=f"source: {config.source} is not a folder")
        rows = skipped + import_results(folder, config, runs_dir)
        if is_remote(config.source):
            record(ledger_path, ledger, config.source, config.peer, listed, rows)
    for row in rows:
        if row.get("run_dir") and row["outcome"] in ("accepted", "rejected by a gate"):
            storage.publish_folder(Path(row["run_dir"]),
                                   status="accepted" if row["outcome"] == "accepted" else "rejected")
    context.add_output_metadata({"results": dg.MetadataValue.md(table(rows, COLUMNS, markdown=True)),
                                 "imported": len([r for r in rows if r.get("run_dir")])})
    return rows


# Dagster's run monitoring stops a run past this (pipelines/schedules.py has the others).
@dg.job(name="peer_import_job", executor_def=dg.in_process_executor,
        tags={"dagster/max_runtime": "3600"},
        description="Import another tool's benchmark results into run folders and analyze "
                    "them (docs/import.md).")
def peer_import_job():
    import_peer_results()
