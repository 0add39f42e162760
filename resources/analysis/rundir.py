"""A run folder (contract §6) opened for analysis: its manifest, checked record sets, and a
DuckDB connection with one view per record set (`steady`, `warmup`, `chunks`, `bill`) and
the table `chunk_gaps` (sql/chunk_gaps.sql) that the gates and the metrics share.

Parquet files are scanned by DuckDB by their exact paths (only their schema is read here), so
a 128M-row chunk log never passes through Python or Arrow; a path DuckDB would read as a
pattern goes through an Arrow dataset instead. A run killed half-way is read from its
`.partial.arrows` streams.

DuckDB works within a memory limit (`SERVINGBENCH_ANALYZE_MEMORY`, default 4GB), on a
database file it compresses and spill files for what does not fit, both in a private folder
under the system's temporary directory (TMPDIR), removed when the run is closed: its defaults
would take 80 % of the machine's memory and spill into `.tmp` in the working directory.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from servingbench.resources.analysis import chunks, sqlfiles
from servingbench.resources.contract import durable, run_files, settings
from servingbench.resources.contract import manifest as manifest_mod
from servingbench.resources.contract.schemas import (
    EVENTS,
    PARTIAL_SUFFIX,
    RECORD_SETS,
    RUN_FILES,
    SchemaError,
    conform,
    read_records,
    record_files,
)

VIEWS = {"steady_state_request_log": "steady", "warmup_log": "warmup", "chunk_log": "chunks",
         "bill": "bill"}
REQUIRED = RECORD_SETS


@dataclass
class RunFolder:
    path: Path
    manifest: dict
    con: duckdb.DuckDBPyConnection
    has_bill: bool
    partial: list[str] = field(default_factory=list)  # record sets read from a partial stream
    scratch: Path | None = None  # DuckDB's spill folder, removed on close
    # what was read, per record set: (path, inode, size, mtime_ns) of each file. Two opens of
    # an unchanged folder read the same bytes (see `identity`).
    files: dict[str, tuple] = field(default_factory=dict)
    # contract §2.6: whether events.parquet has replica_ready / node_ready events of the run
    # (without them the replica and node counts are fixed: the manifest's)
    replica_events: bool = False
    node_events: bool = False
    foreign_events: int = 0  # event rows of another run_id (rule 3; ignored by every output)

    @property
    def fixed_replicas(self) -> int | None:
        """The replica count without replica events (`replicas.initial`, else 1); None when
        the timeline says it."""
        if self.replica_events:
            return None
        return int((self.manifest.get("replicas") or {}).get("initial") or 1)

    @property
    def fixed_nodes(self) -> int | None:
        """The node count without node events (the manifest's `node_count`); None when the
        timeline says it."""
        return None if self.node_events else self.manifest.get("node_count")

    def identity(self, names) -> tuple:
        """The identity of what this folder's record sets `names` and manifest hold: equal
        for two opens of the same unchanged files (a rewrite changes the inode or the
        modification time), so a result computed from them alone can be reused."""
        return (str(self.path.resolve()), json.dumps(self.manifest, sort_keys=True, default=str),
                tuple(self.files.get(n, ()) for n in names))

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_parquet_schema(path: Path, name: str) -> set[str]:
    """Check one parquet file's schema; return the names of its columns."""
    try:
        found = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(f"{path}: unreadable parquet ({exc})") from exc
    conform(found.empty_table(), RUN_FILES[name], path)
    return set(found.names)


# Characters DuckDB's file reader treats as a pattern (or expands): a path holding none of
# them names exactly one file, so DuckDB's own (faster) parquet scan is exact for it.
_PATTERN_CHARS = set("*?[]{}\\~")
_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
                 pa.timestamp("ns", tz="UTC"): "TIMESTAMPTZ"}


def _stamp(f: Path) -> tuple:
    st = f.stat()
    return (str(f), st.st_ino, st.st_size, st.st_mtime_ns)


def _register(con: duckdb.DuckDBPyConnection, run_dir: Path, name: str, view: str,
              read: dict[str, tuple]) -> str:
    """Make record set `name` the view `view`; returns how it was read.

    Shards are unioned with the merged file; a missing optional column reads as null. Paths
    are absolute and checked: DuckDB's read_parquet expands `*`, `?` and `[...]`, so a
    folder named `a[1]` would read `a1/`; such paths go through an Arrow dataset over the
    exact file list instead (about 1.5x slower to scan, measured in benchmarks/exact_paths.py).
    """
    files = [f.resolve() for f in record_files(run_dir, name)]
    if not files:
        return "missing"
    read[name] = tuple(_stamp(f) for f in files)
    if any(f.name.endswith(PARTIAL_SUFFIX) for f in files):
        con.register(view, read_records(run_dir, name))
        return "partial"
    present: set[str] = set()
    for f in files:
        present |= _check_parquet_schema(f, name)
    schema = RUN_FILES[name]
    if any(_PATTERN_CHARS & set(str(f)) for f in files):
        con.register(view, ds.dataset([str(f) for f in files], format="parquet", schema=schema))
        return "parquet"
    # an optional column (contract §2.2) that no file has reads as a typed null; conform()
    # has refused any other missing column
    cols = [f'"{c.name}"' if c.name in present
            else f'CAST(NULL AS {_DUCKDB_TYPES[c.type]}) AS "{c.name}"' for c in schema]
    rel = con.read_parquet([str(f) for f in files], union_by_name=len(files) > 1)
    rel.select(", ".join(cols)).create_view(view)
    return "parquet"


def locate_unreadable(run_dir: Path, error: Exception) -> SchemaError:
    """The record file behind a read error met mid-query (a corrupt page only shows when it
    is scanned): every file is read through once, and the first that fails is named."""
    for name in VIEWS:
        for path in record_files(run_dir, name):
            if path.name.endswith(PARTIAL_SUFFIX):
                continue  # read whole (and checked) when the folder was opened
            try:
                with pa.OSFile(str(path), "rb") as f:
                    for _ in pq.ParquetFile(f).iter_batches():
                        pass
            except (pa.ArrowException, OSError) as exc:
                return SchemaError(f"{path}: unreadable parquet ({_first_line(exc)})")
    return SchemaError(f"{run_dir}: records unreadable ({_first_line(error)})")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


MEMORY_ENV = "SERVINGBENCH_ANALYZE_MEMORY"


def memory_limit() -> str:
    """DuckDB's memory limit for one analysis (the setting, or its default)."""
    return settings.get(MEMORY_ENV)


def connect(duckdb_path: str | None = None) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """A DuckDB connection bounded in memory, with a new private folder (returned; the caller
    removes it) for its spill files and, unless `duckdb_path` names another, its database
    file. A database file, not `:memory:`: DuckDB compresses the tables it writes to a file
    (chunk_gaps: ~10 bytes a row instead of ~42 in memory), so the chunk-level table of a
    128M-chunk run stays within the limit instead of spilling. The limit covers DuckDB's
    buffers (tables, sorts, hash tables), not the Python process around it."""
    scratch = Path(tempfile.mkdtemp(prefix="servingbench-duckdb-"))
    try:
        con = duckdb.connect(duckdb_path or str(scratch / "analysis.duckdb"), config={
            "memory_limit": memory_limit(),
            "temp_directory": str(scratch / "spill"),
        })
        # DuckDB's own bar is drawn on stdout for any query past 2 s: in the middle of the
        # CLI's output (and of a --json answer) on a night-sized run. (A session setting:
        # connect()'s config refuses it.)
        con.execute("SET enable_progress_bar = false")
        # contract §3's SLO rule for one request, and an interval's overlap with a window:
        # one definition each for every query that counts with it (sql/slo_met.sql,
        # sql/overlap_ns.sql)
        con.execute(sqlfiles.load("slo_met"))
        con.execute(sqlfiles.load("overlap_ns"))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return con, scratch


def open_run(path: Path, duckdb_path: str | None = None) -> RunFolder:
    """Open and check a run folder. Raises ManifestError or SchemaError (→ exit 2)."""
    path = Path(path)
    if not path.is_dir():
        raise SchemaError(f"{path}: not a run folder (no such directory)")
    manifest = manifest_mod.load(path / "manifest.json")
    try:
        con, scratch = connect(duckdb_path)
    except duckdb.Error as exc:
        raise SchemaError(f"{MEMORY_ENV}: {_first_line(exc)}") from None
    con.execute("SET TimeZone = 'UTC'")
    partial: list[str] = []
    has_bill = False
    read: dict[str, tuple] = {}
    try:
        for name, view in VIEWS.items():
            how = _register(con, path, name, view, read)
            if how == "missing":
                if name in REQUIRED:
                    raise SchemaError(f"{path / (name + '.parquet')}: missing")
                continue
            has_bill = has_bill or name == "bill"
            if how == "partial":
                partial.append(name)
        foreign = _register_events(con, path, manifest["run_id"], read)
        # the chunk-level relations the gates and the metrics share (chunks.py); the
        # timelines (contract §2.6) by the metrics, the cost, rule 5 and the episode outputs
        chunks.build(con)
        sqlfiles.create(con, "timeline")
        kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM timeline").fetchall()}
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        con.close()
        shutil.rmtree(scratch, ignore_errors=True)
        if is_disk_full(exc) or isinstance(exc, duckdb.OutOfMemoryException):
            raise  # the input is fine: the machine's limits stopped it
        raise locate_unreadable(path, exc) from None
    except BaseException:
        con.close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return RunFolder(path=path, manifest=manifest, con=con, has_bill=has_bill, partial=partial,
                     scratch=scratch, files=read, replica_events="replica" in kinds,
                     node_events="node" in kinds, foreign_events=foreign)


EVENTS_FILE = run_files.EVENTS_FILE


def _register_events(con: duckdb.DuckDBPyConnection, run_dir: Path, run_id: str,
                     read: dict[str, tuple]) -> int:
    """events.parquet (contract §2.6, optional) as the table `events`, holding only the rows
    of the manifest's run_id (another run's rows fail rule 3 and are ignored by every
    output), and `events_all` with every row; an empty table without the file. Returns the
    number of foreign rows. Events are few (a row per start, phase, decision): read whole."""
    table = run_files.read_events(run_dir)  # every run's rows: the foreign ones are counted
    if table is None:
        table = EVENTS.empty_table()
    else:
        read["events"] = (_stamp((run_dir / EVENTS_FILE).resolve()),)
    con.register("events_in", table)
    con.execute("CREATE TABLE events_all AS SELECT * FROM events_in")
    con.execute("CREATE TABLE events AS SELECT * FROM events_all WHERE run_id = $run_id "
                "ORDER BY \"at\"", {"run_id": run_id})
    con.unregister("events_in")
    [(foreign,)] = con.execute("SELECT count(*) FROM events_all WHERE run_id IS DISTINCT FROM "
                               "$run_id", {"run_id": run_id}).fetchall()
    return int(foreign)


def is_disk_full(exc: BaseException) -> bool:
    """A full disk, met writing an output or by DuckDB spilling (which reports it as an
    IOException naming the OS error, not as an OSError)."""
    if durable.is_disk_full(exc):
        return True
    return isinstance(exc, duckdb.Error) and "No space left on device" in str(exc)
