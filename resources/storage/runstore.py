"""Run folders wherever pyarrow's filesystem layer reaches: a local folder, or
`s3://bucket/prefix` (AWS, MinIO, moto: the endpoint comes from AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL, credentials from the usual AWS chain, never from here).

A run folder is published by copying its files and then writing the completion marker
last; listings and readers skip a folder without it, so a half-written run is never read
as complete. Readers scan parquet across runs as pyarrow datasets, which DuckDB queries
directly (its httpfs extension is not needed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.dataset as ds
import pyarrow.fs as pafs

from resources.contract.timestamps import format_ts

MARKER = "_COMPLETE"
CHUNK = 8 << 20


class RunStoreError(ValueError):
    """The location cannot be used: bad URI, missing run, or a run without its marker."""


def is_remote(uri: str | Path) -> bool:
    return str(uri).startswith("s3://")


def filesystem(uri: str | Path, env=None, timeout_s: float | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it for a local folder or an s3:// URI;
    `timeout_s` bounds S3's connect and each request (pyarrow's defaults are long)."""
    text = str(uri)
    if not is_remote(text):
        return pafs.LocalFileSystem(), str(Path(text).resolve())
    env = os.environ if env is None else env
    parts = urlsplit(text)
    if not parts.netloc:
        raise RunStoreError(f"{text}: expected s3://bucket/prefix")
    kwargs = {"region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
    if timeout_s is not None:
        kwargs.update(connect_timeout=timeout_s, request_timeout=timeout_s)
    return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{parts.path}".rstrip("/")


def _copy(src_fs, src: str, dst_fs, dst: str) -> None:
    with src_fs.open_input_stream(src) as i, dst_fs.open_output_stream(dst) as o:
        while chunk := i.read(CHUNK):
            o.write(chunk)


def _files(fs, path: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


def put(local_dir: Path, uri: str, names: dict[str, str]) -> None:
    """Copy files of `local_dir` to `uri` as {local name: remote name}, no marker: what a
    load pod uploads into a run prefix the pipeline publishes later."""
    fs, base = filesystem(uri)
    local = pafs.LocalFileSystem()
    src = str(Path(local_dir).resolve())
    fs.create_dir(base, recursive=True)
    for name, remote in names.items():
        _copy(local, f"{src}/{name}", fs, f"{base}/{remote}")


def get(uri: str, names: list[str], local_dir: Path) -> list[str]:
    """Copy the files of `names` that exist under `uri` into `local_dir` (exact names, never
    a pattern); returns the names copied. No marker is asked for: this collects the parts
    of a run that is still being made."""
    fs, base = filesystem(uri)
    local = pafs.LocalFileSystem()
    found = []
    for name in names:
        if fs.get_file_info(f"{base}/{name}").type != pafs.FileType.File:
            continue
        target = Path(local_dir).resolve() / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{base}/{name}", local, str(target))
        found.append(name)
    return found


def download(uri: str, local_dir: Path) -> list[str]:
    """Copy every file under `uri` (a folder or an S3 prefix) into `local_dir`, keeping the
    layout; no marker is asked for: this brings in files other tools wrote (peer results)."""
    fs, base = filesystem(uri)
    local = pafs.LocalFileSystem()
    names = _files(fs, base)
    for name in names:
        target = Path(local_dir).resolve() / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{base}/{name}", local, str(target))
    return names


STATUSES = ("accepted", "rejected", "failed")


def publish(local_dir: Path, uri: str, names: list[str] | None = None,
            status: str = "accepted", drop: list[str] = ()) -> None:
    """Copy a local run folder's files (or just `names`) to `uri`, then write the marker.

    The marker says the folder is complete, not that the run is good: `status` is
    `accepted` (every gate passed), `rejected` (a gate failed: raw records and gates.json,
    no cost tables) or `failed` (the chain stopped: whatever the run wrote). An update
    removes the old marker first, so a reader never takes a folder being rewritten for a
    complete one; after a crash the folder has no marker until the next publish. `drop`:
    files to delete from the published folder (a re-analysis that now withholds them),
    removed while the marker is away too."""
    if status not in STATUSES:
        raise RunStoreError(f"publish status {status!r}: expected one of {STATUSES}")
    fs, base = filesystem(uri)
    local = pafs.LocalFileSystem()
    src = str(Path(local_dir).resolve())
    names = [n for n in (names if names is not None else _files(local, src)) if n != MARKER]
    fs.create_dir(base, recursive=True)
    if fs.get_file_info(f"{base}/{MARKER}").type == pafs.FileType.File:
        fs.delete_file(f"{base}/{MARKER}")
    remove(uri, list(drop))
    for name in names:
        _copy(local, f"{src}/{name}", fs, f"{base}/{name}")
    with fs.open_output_stream(f"{base}/{MARKER}") as o:
        o.write(json.dumps({"published_at": format_ts(time.time_ns()), "status": status,
                            "files": sorted(set(_files(fs, base)) - {MARKER})}).encode())


def marker(uri: str) -> dict | None:
    """The completion marker's content (None: no marker). Markers written before `status`
    existed were only ever written for finished runs: read as accepted."""
    fs, base = filesystem(uri)
    if fs.get_file_info(f"{base}/{MARKER}").type != pafs.FileType.File:
        return None
    with fs.open_input_stream(f"{base}/{MARKER}") as i:
        data = json.loads(i.read(1 << 20) or b"{}")
    return {"status": "accepted", **data}


def remove(uri: str, names: list[str]) -> None:
    """Delete files of a published run (a re-analysis that now withholds the cost tables)."""
    fs, base = filesystem(uri)
    for name in names:
        if fs.get_file_info(f"{base}/{name}").type == pafs.FileType.File:
            fs.delete_file(f"{base}/{name}")


def is_complete(uri: str) -> bool:
    fs, base = filesystem(uri)
    return fs.get_file_info(f"{base}/{MARKER}").type == pafs.FileType.File


def fetch(uri: str, local_dir: Path) -> Path:
    """Copy a complete run folder to `local_dir`; a folder without its marker is refused."""
    fs, base = filesystem(uri)
    if not is_complete(uri):
        raise RunStoreError(f"{uri}: no {MARKER} marker (the run is not finished, or this "
                            "is not a run folder)")
    local = pafs.LocalFileSystem()
    for name in _files(fs, base):
        if name != MARKER:
            (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
            _copy(fs, f"{base}/{name}", local, str(Path(local_dir).resolve() / name))
    return Path(local_dir)


def complete_runs(runs_uri: str) -> list[str]:
    """Run ids under `runs_uri` whose folder carries the completion marker."""
    fs, base = filesystem(runs_uri)
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    runs = sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
    return [r for r in runs
            if fs.get_file_info(f"{base}/{r}/{MARKER}").type == pafs.FileType.File]


def scan(runs_uri: str, name: str) -> ds.Dataset:
    """`name` (e.g. cost_per_1m.parquet) across every complete run that has it, as one
    dataset: `duckdb.connect().register("cost", scan(uri, "cost_per_1m.parquet"))`."""
    fs, base = filesystem(runs_uri)
    paths = [f"{base}/{r}/{name}" for r in complete_runs(runs_uri)]
    paths = [p for p in paths if fs.get_file_info(p).type == pafs.FileType.File]
    if not paths:
        return ds.dataset([], filesystem=fs, format="parquet")
    return ds.dataset(paths, filesystem=fs, format="parquet")


RUN_TABLES = ("derived_metrics", "cost_per_1m", "headline", "telemetry_metrics")


def runs_index(runs_uri: str):
    """One row per published run (any status): run_id, status, partition, candidate,
    instance_type, source, created_at, the manifest as JSON text — read from the run
    folders themselves, so every pod sees the same index."""
    import pyarrow as pa

    fs, base = filesystem(runs_uri)
    rows = []
    for run in complete_runs(runs_uri):
        mark = marker(f"{runs_uri.rstrip('/')}/{run}") or {}
        docs = {}
        for name in ("manifest.json", "partition.json"):
            try:
                with fs.open_input_stream(f"{base}/{run}/{name}") as i:
                    docs[name] = json.loads(i.read(16 << 20))
            except (OSError, ValueError):
                docs[name] = {}
        m = docs["manifest.json"]
        rows.append({"run_id": run, "status": mark.get("status"),
                     "partition": docs["partition.json"].get("partition"),
                     "candidate": m.get("candidate"), "instance_type": m.get("instance_type"),
                     "source": m.get("source"), "created_at": m.get("created_at"),
                     "manifest": json.dumps(m) if m else None})
    schema = pa.schema([(k, pa.string()) for k in ("run_id", "status", "partition", "candidate",
                                                   "instance_type", "source", "created_at",
                                                   "manifest")])
    return pa.Table.from_pylist(rows, schema=schema)


def catalog(runs_uri: str):
    """An in-memory DuckDB with `runs` and the cross-run tables (`derived_metrics`,
    `cost_per_1m`, `headline`, `telemetry_metrics`) over the published runs, through
    pyarrow datasets: the store any pod can query, where the DuckDB file is one pod's.
    A table no published run has yet is absent."""
    import duckdb

    con = duckdb.connect()
    con.register("runs", runs_index(runs_uri))
    for name in RUN_TABLES:
        dataset = scan(runs_uri, f"{name}.parquet")
        if dataset.files:
            con.register(name, dataset)
    return con
