"""Great Expectations 1.x, run in-process on pandas DataFrames of facts.

GX is imported lazily (it takes seconds) and used through one ephemeral context per
process with progress bars off. Each call validates one DataFrame against a list of
expectations and returns, per expectation, the `_row` keys of its unexpected rows.

GX is imported whole, as its own package imports itself: nothing here depends on its
internal module layout, so an upgrade of GX cannot break the gates' import.
`preload()` starts the import on a thread of its own, so it overlaps the DuckDB work that
comes before the first validation (docs/performance.md).
"""

from __future__ import annotations

import itertools
import logging
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by GX itself, on the preload thread: not on the CLI's start
    import pandas as pd

_counter = itertools.count()


def _import_gx():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig
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

        prop = getattr(Expectation, "configuration", None)
        if not isinstance(prop, property):  # another GX layout: its own, uncached
            _patched = True
            return
        build = prop.fget

        def configuration(self):
            cache = getattr(_memo, "cache", None)
            if cache is None:
                return build(self)
            hit = cache.get(id(self))
            if hit is None:  # the entry holds the expectation, so its id is not reused
                hit = cache[id(self)] = (self, build(self))
            return hit[1]

        Expectation.configuration = property(configuration, doc=prop.__doc__)
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
    # Most validations pass. A pass/fail answer costs GX half of a complete one (it computes
    # no lists of unexpected values or rows: benchmarks/gx_validate.py), and a passing
    # expectation has no unexpected row to report, unless it allows some (`mostly` < 1). So
    # the complete result, with the rows, is asked for only when something failed.
    if not any(_tolerant(item) for item in items):
        passed = _validate(batch_definition, suite, df, _PASS_FAIL)
        if all(r.success for r in passed.results):
            return [Outcome(_name(r), True, frozenset()) for r in _in_order(passed, items, label)]
    outcomes = []
    for r in _in_order(_validate(batch_definition, suite, df, _COMPLETE), items, label):
        exc = (r.exception_info or {}).get("raised_exception")
        if exc:
            raise RuntimeError(f"great_expectations failed on {r.expectation_config.type}: "
                               f"{r.exception_info.get('exception_message')}")
        rows = frozenset(int(d["_row"]) for d in r.result.get("unexpected_index_list") or [])
        outcomes.append(Outcome(_name(r), bool(r.success), rows))
    return outcomes


_COMPLETE = {"result_format": "COMPLETE", "unexpected_index_column_names": ["_row"]}
_PASS_FAIL = {"result_format": "BOOLEAN_ONLY"}


def _tolerant(item: Any) -> bool:
    """Whether the expectation passes with some unexpected rows (GX's `mostly` below 1)."""
    mostly = getattr(item, "mostly", None)
    return mostly is not None and mostly < 1


def _validate(batch_definition, suite, df: pd.DataFrame, result_format: dict):
    _memo.cache = {}
    try:
        # a Batch's validate, not a ValidationDefinition's run: the same validator, without
        # storing every result in the context (an in-memory store that only grows in a
        # long-lived process: a Dagster code server, a sweep)
        batch = batch_definition.get_batch(batch_parameters={"dataframe": df})
        return batch.validate(suite, result_format=result_format)
    finally:
        _memo.cache = None


def _name(r) -> str:
    kwargs = r.expectation_config.kwargs
    cols = ",".join(str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs)
    return f"{r.expectation_config.type}({cols})"


def _in_order(result, items: list[Any], label: str) -> list:
    """The results in the items' order (GX groups them by kind of expectation)."""
    ordered: list = [None] * len(items)
    for r in result.results:
        ordered[int(r.expectation_config.meta[_INDEX])] = r
    missing = [i for i, r in enumerate(ordered) if r is None]
    if missing:
        raise RuntimeError(f"great_expectations returned no result for expectation(s) {missing} "
                           f"of {label}")
    return ordered
