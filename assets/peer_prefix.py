"""Where the peer import job may read, and what it takes from an S3 prefix.

Its `source` comes from a run's config, which anyone with the UI can write: it must lie
under one of the import roots (SERVINGBENCH_IMPORT_ROOTS, by default `<data folder>/imports`),
a local one after its symlinks and `..` are resolved, so `/` or `../..` never reads the
host's files. From an S3 prefix, decided from the listing before any download: the prefix
is capped in objects and bytes, only the objects of a peer's results are fetched, a result
past the per-file cap is not fetched at all, and a result imported before (its objects
unchanged, its run folder present) is skipped."""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Sequence
from pathlib import Path

import pyarrow.fs as pafs
from servingbench.resources.contract import durable
from servingbench.resources.contract.yamltext import short
from servingbench.resources.peers import records
from servingbench.resources.peers.discover import MARKERS
from servingbench.resources.storage.runstore import RunStoreError, filesystem, is_remote

# What one run of the job takes from an S3 prefix: a team's drop folder holds a few hundred
# results; past these the prefix is refused whole (name a narrower one), so a prefix that
# grows without bound never makes one run download without bound.
MAX_PREFIX_FILES = 20_000
MAX_PREFIX_BYTES = 16 << 30
# Beside the runs folder: per source, each imported result's objects (key, size, modified
# time) and the run folder their content became. An S3 object's size and modified time
# change with every write, so a result whose objects are all as recorded, with its run
# folder present, is the same content imported before: it is skipped without downloading.
LEDGER = "peer_imports.json"


ROOTS = "SERVINGBENCH_IMPORT_ROOTS"


def _s3_parts(uri: str) -> list[str] | None:
    """s3://bucket/a/b as [bucket, a, b]; None when a part is empty, `.` or `..`."""
    parts = uri[len("s3://"):].rstrip("/").split("/")
    return None if any(p in ("", ".", "..") for p in parts) else parts


def import_roots(text: str | None, data_dir: Path) -> tuple[str, ...]:
    """The roots the job may import from: SERVINGBENCH_IMPORT_ROOTS's comma-separated
    absolute folders (resolved) and s3://bucket[/prefix]es, or `<data_dir>/imports`.
    ValueError names the setting and the entry."""
    if not text:
        return (str((Path(data_dir) / "imports").resolve()),)
    roots = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if is_remote(part):
            parts = _s3_parts(part)
            if parts is None:
                raise ValueError(f"{ROOTS}: {short(part, 200)!r} is not s3://bucket[/prefix] "
                                 "of plain parts")
            roots.append("s3://" + "/".join(parts))
        elif Path(part).is_absolute():
            roots.append(str(Path(part).resolve()))
        else:
            raise ValueError(f"{ROOTS}: {short(part, 200)!r} is not an absolute folder or "
                             "s3://bucket[/prefix]")
    return tuple(roots)


def check_source(source: str, roots: Sequence[str]) -> None:
    """ValueError unless `source` lies under one of `roots`: an S3 prefix part by part (so
    s3://b/imports-x is not under s3://b/imports), a folder after resolving its symlinks
    and `..` (so neither a link nor `../` leaves the root)."""
    if is_remote(source):
        parts = _s3_parts(source)
        if parts is None:
            raise ValueError(f"source: {short(source, 200)!r}: an empty, `.` or `..` part")
        inside = any(r.startswith("s3://") and parts[:len(r[5:].split("/"))] == r[5:].split("/")
                     for r in roots)
    else:
        if not Path(source).is_absolute():
            raise ValueError(f"source: {short(source, 200)!r} is not an absolute folder or "
                             "s3://bucket/prefix")
        real = Path(source).resolve()
        inside = any(not is_remote(r) and real.is_relative_to(r) for r in roots)
    if not inside:
        raise ValueError(f"source: {short(source, 200)!r} is outside the import roots "
                         f"({', '.join(roots)}; {ROOTS} names them)")


def listing(source: str) -> dict[str, tuple[int, int]]:
    """key (relative to `source`) -> (size, modified time in ns) of every object under it;
    RunStoreError past MAX_PREFIX_FILES or MAX_PREFIX_BYTES."""
    fs, base = filesystem(source)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except ValueError as exc:
        raise RunStoreError(f"{source}: a key under it is not a plain relative path ({exc})") from None
    out = {}
    for i in infos:
        if i.type == pafs.FileType.File and i.path.startswith(base + "/"):
            out[i.path[len(base) + 1:]] = (int(i.size or 0), int(i.mtime_ns or 0))
            if len(out) > MAX_PREFIX_FILES:
                raise RunStoreError(f"{source}: more than {MAX_PREFIX_FILES:,} objects; "
                                    "import a narrower prefix")
    total = sum(size for size, _ in out.values())
    if total > MAX_PREFIX_BYTES:
        raise RunStoreError(f"{source}: {total:,} bytes, more than {MAX_PREFIX_BYTES:,}; "
                            "import a narrower prefix")
    return out


def results_listed(peer: str, listed: dict) -> dict[str, list[str]]:
    """result name (as import_results names it) -> the keys it is read from, from the
    listing alone (discover.py's rules): nothing else under the prefix is downloaded."""
    # as each peer's file declares it (vllm: every JSON file is one result)
    marker, is_folder = MARKERS.get(peer, ("*.json", False))
    out = {}
    for key in sorted(listed):
        if not fnmatch.fnmatchcase(posixpath.basename(key), marker):
            continue
        if not is_folder:
            out[key] = [key]
            continue
        folder = posixpath.dirname(key)
        out[folder or "."] = [k for k in listed if not folder or k.startswith(folder + "/")]
    return out


def to_download(peer: str, listed: dict, seen: dict, runs_dir: Path) -> tuple[list[str], list[dict]]:
    """The keys to download, and a row for each result not downloaded: already imported
    (its objects as the ledger recorded them, its run folder present) or too large."""
    keys: set[str] = set()
    rows = []
    for name, files in sorted(results_listed(peer, listed).items()):
        before = seen.get(name) or {}
        same = before.get("files") == {k: list(listed[k]) for k in files}
        if same and before.get("run_id") and (runs_dir / before["run_id"]).is_dir():
            rows.append({"result": name, "run_id": before["run_id"],
                         "outcome": "already imported"})
            continue
        big = [k for k in files if listed[k][0] > records.MAX_FILE_BYTES]
        if big:
            rows.append({"result": name, "run_id": None,
                         "outcome": f"malformed: {big[0]}: larger than "
                                    f"{records.MAX_FILE_BYTES} bytes; not downloaded"})
            continue
        keys.update(files)
    return sorted(keys), rows


def read_ledger(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}  # none yet, or unreadable: every result is looked at again
    return doc if isinstance(doc, dict) else {}


def record(path: Path, ledger: dict, source: str, peer: str, listed: dict,
            rows: list[dict]) -> None:
    results = results_listed(peer, listed)
    seen = ledger.setdefault(source, {})
    for row in rows:
        if row.get("run_id") and row["result"] in results:
            seen[row["result"]] = {"files": {k: list(listed[k]) for k in results[row["result"]]},
                                   "run_id": row["run_id"]}
    durable.write_json(path, ledger)
