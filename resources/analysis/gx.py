"""Great Expectations 1.x, run in-process on pandas DataFrames of facts.

GX is imported lazily (it takes seconds) and used through one ephemeral context per
process with progress bars off. Each call validates one DataFrame against a list of
expectations and returns, per expectation, the `_row` keys of its unexpected rows.

What GX imports that an in-memory pandas validation never uses is kept out of the import
(measured in benchmarks/analyze_startup.py, docs/performance.md): the optional integrations
it probes for are hidden while it is imported (`HIDDEN`), so it records them as not
installed; its data sources other than the in-memory pandas one and the built-in
expectations the gates do not use are stand-ins (`UNUSED`, `EXPECTATIONS`), whose classes
refuse to be made, naming this module; two modules it imports at module level only for an
expectation the gates never run are loaded on first use instead (`DEFERRED`). A process
that also uses GX for something else sets SERVINGBENCH_GX_WHOLE=1 and gets all of it (or
imports GX itself first: nothing already imported is replaced). `preload()` starts the
import on a thread of its own, so it overlaps the DuckDB work that comes before the first
validation.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import logging
import sys
import threading
import types
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servingbench.resources.contract import settings

if TYPE_CHECKING:  # imported by GX itself, on the preload thread: not on the CLI's start
    import pandas as pd

_counter = itertools.count()

# GX's optional integrations (`try: import sqlalchemy ... except ImportError` in
# great_expectations/compatibility/): SQL, cloud storage and Spark data sources. The gates
# validate pandas DataFrames in memory, so GX may take them as not installed. A module some
# other part of the process has already imported stays as it is.
HIDDEN = ("sqlalchemy", "boto3", "botocore", "google", "azure", "pyspark", "snowflake",
          "trino", "databricks", "pyathena", "psycopg2", "pyodbc", "py4j")
# Imported at module level by GX's distribution tests (scipy.stats, by the metric
# column_parameterized_distribution_ks_test_p_value) and charts (altair), which the gates
# never use: both load on first attribute access instead, should anything touch them.
DEFERRED = ("scipy.stats", "altair")


# GX's data sources other than the in-memory pandas one (every module of
# great_expectations/datasource/fluent/ that great_expectations/__init__ imports): Spark's need
# pyspark (not a dependency), the SQL ones and the cloud-storage pandas ones need what HIDDEN
# hides, and the file-path ones read files the gates never read (about a third of GX's import).
_FLUENT = "great_expectations.datasource.fluent."
UNUSED = tuple(_FLUENT + name for name in (
    "spark_datasource", "spark_file_path_datasource", "spark_filesystem_datasource",
    "spark_dbfs_datasource", "spark_s3_datasource", "spark_google_cloud_storage_datasource",
    "spark_azure_blob_storage_datasource", "data_asset.path.spark",
    "sql_datasource", "sqlite_datasource", "postgres_datasource", "neon_datasource",
    "citus_datasource", "aurora_datasource", "alloy_datasource", "redshift_datasource",
    "snowflake_datasource", "databricks_sql_datasource", "bigquery_datasource",
    "sql_server_datasource", "fabric", "fabric_datasource",
    "pandas_s3_datasource", "pandas_google_cloud_storage_datasource",
    "pandas_azure_blob_storage_datasource", "pandas_dbfs_datasource",
    "pandas_filesystem_datasource", "pandas_file_path_datasource", "data_asset.path.pandas"))
# The built-in expectations the gates use (resources/analysis/gates.py); GX's other sixty
# (great_expectations/expectations/core/expect_*.py) are stand-ins. A gate that uses
# another adds its module here: until then making one raises, naming this list.
_CORE = "great_expectations.expectations.core."
EXPECTATIONS = tuple(_CORE + name for name in (
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null",
    "expect_column_values_to_be_in_set", "expect_column_values_to_be_between",
    "expect_column_values_to_be_unique", "expect_column_pair_values_to_be_equal",
    "expect_column_pair_values_a_to_be_greater_than_b"))
WHOLE_ENV = "SERVINGBENCH_GX_WHOLE"


def _whole() -> bool:
    """Whether this process imports GX whole (WHOLE_ENV set to anything but empty or 0)."""
    return (settings.get(WHOLE_ENV) or "") not in ("", "0")


def stands_in(name: str) -> bool:
    """Whether module `name` is a stand-in when servingbench imports GX."""
    if _whole():
        return False
    if any(name == u or name.startswith(u + ".") for u in UNUSED):
        return True
    return (name.startswith(_CORE + "expect_") and name.count(".") == 3
            and name not in EXPECTATIONS)


class _NotLoaded:
    """The base of every class a stand-in module hands out: GX's own modules import them by
    name (and may test isinstance against them); making one says why it is missing."""

    def __init__(self, *args, **kwargs) -> None:
        raise RuntimeError(
            f"great_expectations' {type(self).__name__} was not imported: servingbench imports "
            f"GX without what its gates do not use (resources/analysis/gx.py); set "
            f"{WHOLE_ENV}=1, or import great_expectations before servingbench validates")


class _StandIn(types.ModuleType):
    """A module of GX that the gates never use: any name asked of it is a _NotLoaded class."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        made = type(attr, (_NotLoaded,), {"__module__": self.__name__})
        setattr(self, attr, made)
        return made


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module) -> None:
        module.__path__ = []  # a package: GX imports submodules of some of them


class _Hide(importlib.abc.MetaPathFinder):
    """While it is on sys.meta_path, to the thread importing GX only (another thread may
    import them meanwhile): answers 'not installed' for the HIDDEN packages and a stand-in
    for the modules that `stands_in`."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, name, path=None, target=None):
        if threading.get_ident() != self.thread:
            return None
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"{name} hidden while Great Expectations is imported",
                                      name=name)
        if stands_in(name):
            return importlib.machinery.ModuleSpec(name, _StandInLoader(), is_package=True)
        return None


class _Deferred(types.ModuleType):
    """Stands in sys.modules for a module not imported yet; the first attribute asked of it
    imports the real one (which then replaces it) and answers from it. (importlib's
    LazyLoader would not do: `import altair` reads the module's `__spec__`, which loads it.)"""

    def __getattr__(self, attr: str):
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is self:
                delattr(sys.modules[parent], child)
        return getattr(importlib.import_module(name), attr)


def _defer(name: str) -> None:
    """Put a stand-in for module `name` into sys.modules (and on its parent package)."""
    spec = None if name in sys.modules else importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec  # importlib.util.find_spec(name) answers as for the real one
    sys.modules[name] = stand_in
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, stand_in)


def _import_gx():
    if _whole():
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig
        return gx, ProgressBarsConfig
    hide = _Hide()
    sys.meta_path.insert(0, hide)
    try:
        for name in DEFERRED:
            _defer(name)
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig
    finally:
        sys.meta_path.remove(hide)
    return gx, ProgressBarsConfig


_lock = threading.Lock()
_ctx: tuple | None = None


def _context():
    with _lock:
        return _context_unlocked()


def _context_unlocked():
    """The process's (gx, context, pandas datasource); the caller holds `_lock`."""
    global _ctx
    if _ctx is None:
        logging.getLogger("great_expectations").setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gx, progress_bars = _import_gx()
        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = progress_bars(globally=False)
        source = ctx.data_sources.add_pandas("servingbench")
        _ctx = (gx, ctx, source)
    return _ctx


_preload_lock = threading.Lock()  # not _lock: the import thread holds that one for seconds
_preload_thread: threading.Thread | None = None


def _preload() -> None:
    try:
        _context()
    except Exception:  # noqa: BLE001 - the first validation imports again and raises
        pass


def preload() -> None:
    """Start importing GX on a daemon thread (a no-op once it is imported): DuckDB releases
    the GIL while it scans, so the import overlaps the SQL that runs before the gates. For a
    process that only analyzes (the CLI): the import silences warnings process-wide while it
    runs. At most one such thread: the CLI calls this before importing the command, and the
    command again (it may also be called in-process, without the CLI's early start)."""
    global _preload_thread
    with _preload_lock:
        if _ctx is None and _preload_thread is None:
            _preload_thread = threading.Thread(target=_preload, name="gx-import", daemon=True)
            _preload_thread.start()


@dataclass(frozen=True)
class Outcome:
    expectation: str      # e.g. expect_column_values_to_not_be_null(sent_at)
    success: bool
    rows: frozenset[int]  # `_row` keys of the unexpected rows


def expectations():
    """The `great_expectations.expectations` module (imported lazily)."""
    return _context()[0].expectations


# One batch definition and suite per distinct list of expectations, made on first use and
# used again for every later DataFrame: adding them to the context costs GX more than
# validating a run's facts (it stores and re-serialises its whole datasource on each add),
# and a process analysing many runs (a sweep, a Dagster job, the tests) asks for the same few
# lists every time.
_definitions: dict[tuple, Any] = {}


def _definition(items: list[Any], label: str):
    """(batch definition, suite) for this list of expectations."""
    key = (label, *map(repr, items))
    with _lock:
        found = _definitions.get(key)
        if found is None:
            gx, ctx, source = _context_unlocked()
            uid = f"{label}_{next(_counter)}"
            batch = source.add_dataframe_asset(uid).add_batch_definition_whole_dataframe("all")
            suite = ctx.suites.add(gx.ExpectationSuite(name=uid))
            for item in items:
                suite.add_expectation(item)
            found = _definitions[key] = (batch, suite)
        return found


# GX rebuilds an expectation's configuration (a pydantic dump and a name conversion) every
# time it reads one of its arguments, a few hundred times per validation: a third of the
# validation's time on a run's facts (benchmarks/gx_validate.py). The expectations GX
# validates are made afresh from the suite for each validation and nothing changes them
# while it runs, so within one `validate` call, on its own thread, each one's configuration
# is built once. Outside such a call the property is GX's own.
_memo = threading.local()
_patch_lock = threading.Lock()
_patched = False


def _remember_configurations() -> None:
    global _patched
    with _patch_lock:
        if _patched:
            return
        from great_expectations.expectations.expectation import Expectation

        build = Expectation.configuration.fget

        def configuration(self):
            cache = getattr(_memo, "cache", None)
            if cache is None:
                return build(self)
            hit = cache.get(id(self))
            if hit is None:  # the entry holds the expectation, so its id is not reused
                hit = cache[id(self)] = (self, build(self))
            return hit[1]

        Expectation.configuration = property(configuration, doc=Expectation.configuration.__doc__)
        _patched = True


_INDEX = "servingbench_index"


def validate(df: pd.DataFrame, items: list[Any], label: str) -> list[Outcome]:
    """Validate `df` (which has a `_row` key column) against expectation objects; one
    Outcome per item, in the items' order."""
    # GX returns a suite's results in an order of its own (grouped by kind of expectation)
    # and would take two equal expectations for one: each carries its position in `meta`
    for i, item in enumerate(items):
        item.meta = {**(item.meta or {}), _INDEX: i}
    batch_definition, suite = _definition(items, label)
    _remember_configurations()
    _memo.cache = {}
    try:
        # a Batch's validate, not a ValidationDefinition's run: the same validator, without
        # storing every result in the context (an in-memory store that only grows in a
        # long-lived process: a Dagster code server, a sweep)
        batch = batch_definition.get_batch(batch_parameters={"dataframe": df})
        result = batch.validate(suite, result_format={
            "result_format": "COMPLETE", "unexpected_index_column_names": ["_row"]})
    finally:
        _memo.cache = None
    outcomes: list[Outcome | None] = [None] * len(items)
    for r in result.results:
        exc = (r.exception_info or {}).get("raised_exception")
        if exc:
            raise RuntimeError(f"great_expectations failed on {r.expectation_config.type}: "
                               f"{r.exception_info.get('exception_message')}")
        kwargs = r.expectation_config.kwargs
        cols = ",".join(str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs)
        rows = frozenset(int(d["_row"]) for d in r.result.get("unexpected_index_list") or [])
        outcomes[int(r.expectation_config.meta[_INDEX])] = Outcome(
            f"{r.expectation_config.type}({cols})", bool(r.success), rows)
    missing = [i for i, o in enumerate(outcomes) if o is None]
    if missing:
        raise RuntimeError(f"great_expectations returned no result for expectation(s) {missing} "
                           f"of {label}")
    return outcomes
