"""Great Expectations 1.x, run in-process on pandas DataFrames of facts.

GX is imported lazily (it takes seconds) and used through one ephemeral context per
process with progress bars off. Each call validates one DataFrame against a list of
expectations and returns, per expectation, the `_row` keys of its unexpected rows.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any

import pandas as pd

_counter = itertools.count()


@dataclass(frozen=True)
class Outcome:
    expectation: str      # e.g. expect_column_values_to_not_be_null(sent_at)
    success: bool
    rows: frozenset[int]  # `_row` keys of the unexpected rows


@cache
def _context():
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = ctx.data_sources.add_pandas("servingbench")
    return gx, ctx, source


def expectations():
    """The `great_expectations.expectations` module (imported lazily)."""
    return _context()[0].expectations


def validate(df: pd.DataFrame, items: list[Any], label: str) -> list[Outcome]:
    """Validate `df` (which has a `_row` key column) against expectation objects."""
    gx, ctx, source = _context()
    uid = f"{label}_{next(_counter)}"
    batch = source.add_dataframe_asset(uid).add_batch_definition_whole_dataframe("all")
    suite = ctx.suites.add(gx.ExpectationSuite(name=uid))
    for item in items:
        suite.add_expectation(item)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=uid, data=batch, suite=suite))
    result = vd.run(
        batch_parameters={"dataframe": df},
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["_row"]},
    )
    outcomes = []
    for r in result.results:
        exc = (r.exception_info or {}).get("raised_exception")
        if exc:
            raise RuntimeError(f"great_expectations failed on {r.expectation_config.type}: "
                               f"{r.exception_info.get('exception_message')}")
        kwargs = r.expectation_config.kwargs
        cols = ",".join(str(kwargs[k]) for k in ("column", "column_A", "column_B") if k in kwargs)
        rows = frozenset(int(d["_row"]) for d in r.result.get("unexpected_index_list") or [])
        outcomes.append(Outcome(f"{r.expectation_config.type}({cols})", bool(r.success), rows))
    return outcomes
