"""Run folders wherever pyarrow's filesystem layer reaches: a local folder, or
`s3://bucket/prefix` (AWS, MinIO, moto: the endpoint comes from AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL, credentials from the usual AWS chain, never from here).

A run folder is published by copying its files and then writing the completion marker
last; listings and readers skip a folder without it, so a half-written run is never read
as complete, and publishing again completes a publish that died halfway. Every object is
written under a temporary key (`<run>/_tmp/…`) and copied into place only once whole, so an
error mid-copy never leaves a truncated object under a real name. Keys read from a listing
are checked before they name a local file: `..`, empty or absolute parts are refused.
Readers scan parquet across runs as pyarrow datasets, which DuckDB queries directly (its
httpfs extension is not needed); one run with a malformed marker or manifest is left out
of the index, never the reason the others cannot be listed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.dataset as ds
import pyarrow.fs as pafs
from servingbench.resources.contract import durable
from servingbench.resources.contract.timestamps import format_ts

MARKER = "_COMPLETE"
TMP = "_tmp"  # objects being written, under the run's own prefix (never listed as files)
CHUNK = 8 << 20
MAX_DOC_BYTES = 16 << 20  # a marker, manifest or partition document larger than this is not one


class RunStoreError(ValueError):
    """The location cannot be used: bad URI, missing run, or a run without its marker."""


def is_remote(uri: str | Path) -> bool:
    return str(uri).startswith("s3://")


def filesystem(uri: str | Path, env=None, timeout_s: float | None = None,
               client=None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it for a local folder or an s3:// URI;
    `timeout_s` bounds S3's connect and each request (pyarrow's defaults are long).
    `client`: a boto3 S3 client to go through (the composition's S3 resource configures
    it) instead of pyarrow's S3 filesystem configured from the environment."""
    text = str(uri)
    if not is_remote(text):
        return pafs.LocalFileSystem(), str(Path(text).resolve())
    env = os.environ if env is None else env
    parts = urlsplit(text)
    if not parts.netloc:
        raise RunStoreError(f"{text}: expected s3://bucket/prefix")
    if client is not None:
        from servingbench.resources.storage.s3client import filesystem as client_filesystem

        return client_filesystem(client), f"{parts.netloc}{parts.path}".rstrip("/")
    kwargs = {"region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        ep = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
    if timeout_s is not None:
        kwargs.update(connect_timeout=timeout_s, request_timeout=timeout_s)
    return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{parts.path}".rstrip("/")


def check_key(name: str, where: str = "") -> str:
    """`name` if it is a plain relative key (parts separated by `/`, none empty, `.` or `..`,
    no backslash); else RunStoreError naming the key (the CLI's exit 2)."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise RunStoreError(f"{where + ': ' if where else ''}key {name!r} is not a plain relative "
                            "path (empty, absolute, `.` or `..` parts): refused")
    return name


def _local_target(local_dir: Path, name: str) -> Path:
    root = Path(local_dir).resolve()
    target = (root / check_key(name, str(local_dir))).resolve()
    if root not in target.parents:  # a symlink inside the folder pointing out of it
        raise RunStoreError(f"{local_dir}: key {name!r} leads outside the folder: refused")
    return target


def _write(fs, base: str, name: str, fill) -> None:
    """Write `base/name` through a temporary object: `fill(stream)` writes the bytes; only a
    stream closed without error is moved (a local rename) or copied (S3: CopyObject) into
    place, and the temporary object is deleted either way."""
    check_key(name, base)
    token = secrets.token_hex(8)
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:  # beside the target: the rename stays on one filesystem
        fs.create_dir(f"{base}/{name}".rsplit("/", 1)[0], recursive=True)
        tmp = f"{base}/{name}.{TMP}-{token}"
    else:
        tmp = f"{base}/{TMP}/{token}"
    try:
        with fs.open_output_stream(tmp) as out:
            fill(out)
        if local:
            fs.move(tmp, f"{base}/{name}")
        else:
            fs.copy_file(tmp, f"{base}/{name}")
    finally:
        try:
            if fs.get_file_info(tmp).type == pafs.FileType.File:
                fs.delete_file(tmp)
        except OSError:
            pass  # a leftover under _tmp/ is never listed, and the next publish ignores it


def _copy(src_fs, src: str, dst_fs, dst_base: str, name: str) -> None:
    def fill(out) -> None:
        with src_fs.open_input_stream(src) as i:
            while chunk := i.read(CHUNK):
                out.write(chunk)
    _write(dst_fs, dst_base, name, fill)


def _files(fs, path: str) -> list[str]:
    """The files under `path`, as keys relative to it, checked (RunStoreError for a key
    that is not a plain relative path), without the objects being written (`_tmp/`)."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    except ValueError as exc:  # pyarrow refuses a listed key with an empty part (`a//b`)
        raise RunStoreError(f"{path}: a key under it is not a plain relative path ({exc})") from None
    names = []
    for i in infos:
        if i.type != pafs.FileType.File:
            continue
        name = i.path[len(path) + 1:] if i.path.startswith(path + "/") else i.path
        if name.startswith(f"{TMP}/") or f".{TMP}-" in name.rsplit("/", 1)[-1]:
            continue  # an object being written (or left by a write that died)
        if durable.is_temp(name):
            continue  # a local write's temp file, left by a run that was killed mid-write
        names.append(check_key(name, path))
    return sorted(names)


def _read_doc(fs, path: str) -> dict:
    """A small JSON object (marker, manifest, partition); ValueError for anything else."""
    with fs.open_input_stream(path) as i:
        raw = i.read(MAX_DOC_BYTES + 1)
    if len(raw) > MAX_DOC_BYTES:
        raise ValueError(f"{path}: larger than {MAX_DOC_BYTES} bytes")
    try:
        doc = json.loads(raw or b"{}")
    except RecursionError:  # `[` nested past the interpreter's limit: not a document of ours
        raise ValueError(f"{path}: nested too deeply to be a marker, manifest or partition") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a JSON object")
    return doc


def put(local_dir: Path, uri: str, names: dict[str, str], client=None) -> None:
    """Copy files of `local_dir` to `uri` as {local name: remote name}, no marker: what a
    load pod uploads into a run prefix the pipeline publishes later. Only objects under
    `uri` are written (no bucket or directory call): the pods' policy grants no more."""
    fs, base = filesystem(uri, client=client)
    local = pafs.LocalFileSystem()
    src = Path(local_dir).resolve()
    for name, remote in names.items():
        _copy(local, str(_local_target(src, name)), fs, base, check_key(remote, uri))


def get(uri: str, names: list[str], local_dir: Path, client=None) -> list[str]:
    """Copy the files of `names` that exist under `uri` into `local_dir` (exact names, never
    a pattern); returns the names copied. No marker is asked for: this collects the parts
    of a run that is still being made."""
    fs, base = filesystem(uri, client=client)
    local = pafs.LocalFileSystem()
    found = []
    for name in names:
        target = _local_target(local_dir, name)
        if fs.get_file_info(f"{base}/{name}").type != pafs.FileType.File:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{base}/{name}", local, str(target.parent), target.name)
        found.append(name)
    return found


def download(uri: str, local_dir: Path) -> list[str]:
    """Copy every file under `uri` (a folder or an S3 prefix) into `local_dir`, keeping the
    layout; no marker is asked for: this brings in files other tools wrote (peer results)."""
    fs, base = filesystem(uri)
    local = pafs.LocalFileSystem()
    names = _files(fs, base)
    for name in names:
        target = _local_target(local_dir, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{base}/{name}", local, str(target.parent), target.name)
    return names


STATUSES = ("accepted", "rejected", "failed")


def publish(local_dir: Path, uri: str, names: list[str] | None = None,
            status: str = "accepted", drop: list[str] = (), client=None) -> None:
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
    fs, base = filesystem(uri, client=client)
    local = pafs.LocalFileSystem()
    src = str(Path(local_dir).resolve())
    held = [n for n in _files(local, src) if n != MARKER]  # the run folder's own files
    names = [check_key(n, str(local_dir)) for n in (names if names is not None else held)
             if n != MARKER and not durable.is_temp(n)]
    if fs.get_file_info(f"{base}/{MARKER}").type == pafs.FileType.File:
        fs.delete_file(f"{base}/{MARKER}")
    remove(uri, list(drop), client=client)
    for name in names:
        _copy(local, f"{src}/{name}", fs, base, name)
    # the marker lists the folder's own files, never what else is under the prefix: a load
    # pod may write shard names under any run's prefix (its policy cannot tell runs apart),
    # and readers take only the listed files (fetch)
    doc = json.dumps({"published_at": format_ts(time.time_ns()), "status": status,
                      "files": sorted(held)}).encode()
    _write(fs, base, MARKER, lambda out: out.write(doc))


def marker(uri: str, client=None) -> dict | None:
    """The completion marker's content (None: no marker; RunStoreError: a marker that is
    not a JSON object). Markers written before `status` existed were only ever written for
    finished runs: read as accepted."""
    fs, base = filesystem(uri, client=client)
    if fs.get_file_info(f"{base}/{MARKER}").type != pafs.FileType.File:
        return None
    try:
        data = _read_doc(fs, f"{base}/{MARKER}")
    except ValueError as exc:
        raise RunStoreError(f"{uri}/{MARKER}: malformed marker ({exc})") from None
    return {"status": "accepted", **data}


def remove(uri: str, names: list[str], client=None) -> None:
    """Delete files of a published run (a re-analysis that now withholds the cost tables)."""
    fs, base = filesystem(uri, client=client)
    for name in names:
        if fs.get_file_info(f"{base}/{check_key(name, uri)}").type == pafs.FileType.File:
            fs.delete_file(f"{base}/{name}")


def is_complete(uri: str, client=None) -> bool:
    fs, base = filesystem(uri, client=client)
    return fs.get_file_info(f"{base}/{MARKER}").type == pafs.FileType.File


def fetch(uri: str, local_dir: Path, unmarked: bool = False) -> Path:
    """Copy a complete run folder to `local_dir`: the files its marker lists, nothing else
    under its prefix (a shard a load pod planted there after the publish is never read); a
    folder without its marker is refused (`unmarked`: taken as it is, to complete a publish
    that stopped halfway, if it holds a manifest), and so is any key that would land
    outside `local_dir` (all checked before one file is written)."""
    fs, base = filesystem(uri)
    if not is_complete(uri) and not unmarked:
        raise RunStoreError(f"{uri}: no {MARKER} marker (the run is not finished, or this "
                            "is not a run folder); `servingbench analyze --complete URI` "
                            "completes an analyze on S3 that stopped halfway, "
                            "`servingbench publish RUN_DIR URI` a publish from a local copy")
    local = pafs.LocalFileSystem()
    names = [n for n in _files(fs, base) if n != MARKER]
    listed = (marker(uri) or {}).get("files") if not unmarked else None
    if isinstance(listed, list):  # a file the publisher did not list is foreign: never read
        names = [n for n in names if n in set(listed)]
    if "manifest.json" not in names:
        raise RunStoreError(f"{uri}: no manifest.json: not a run folder")
    targets = {n: _local_target(local_dir, n) for n in names}
    for name, target in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{base}/{name}", local, str(target.parent), target.name)
    return Path(local_dir)


def complete_runs(runs_uri: str) -> list[str]:
    """Run ids under `runs_uri` whose folder carries the completion marker (folders whose
    name is not a plain key are skipped: they are no run of ours)."""
    fs, base = filesystem(runs_uri)
    infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    runs = sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory
                  and i.base_name not in ("", ".", "..", TMP))
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
        docs: dict[str, dict | None] = {}
        for name in (MARKER, "manifest.json", "partition.json"):
            try:  # one malformed document leaves its fields empty, never the index
                docs[name] = _read_doc(fs, f"{base}/{run}/{name}")
            except (OSError, ValueError):
                docs[name] = None
        m = docs["manifest.json"] or {}
        # a marker from before `status` existed means accepted; an unreadable one, unknown
        mark = {} if docs[MARKER] is None else {"status": "accepted", **docs[MARKER]}

        def text(doc: dict, key: str) -> str | None:
            v = doc.get(key)
            return v if isinstance(v, str) else None

        rows.append({"run_id": run, "status": text(mark, "status"),
                     "partition": text(docs["partition.json"] or {}, "partition"),
                     "candidate": text(m, "candidate"), "instance_type": text(m, "instance_type"),
                     "source": text(m, "source"), "created_at": text(m, "created_at"),
                     "manifest": _as_text(m)})
    schema = pa.schema([(k, pa.string()) for k in ("run_id", "status", "partition", "candidate",
                                                   "instance_type", "source", "created_at",
                                                   "manifest")])
    return pa.Table.from_pylist(rows, schema=schema)


def _as_text(doc: dict) -> str | None:
    """The document as JSON text; None when empty or nested too deeply to write back (one
    that parsed just under the interpreter's limit can exceed it when encoded deeper down)."""
    try:
        return json.dumps(doc) if doc else None
    except RecursionError:
        return None


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
