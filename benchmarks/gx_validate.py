"""One gate validation, GX's documented way against the gates' way, side by side in one process:
a ValidationDefinition's run (which stores every result in the context and rebuilds each
expectation's configuration whenever it reads an argument) against `gx.validate` (a Batch's
validate, each configuration built once per validation, and a complete result, with the
unexpected rows, asked for only when a pass/fail one found a failure), and against the
gates' way that always asks for the complete result. On facts with failures and on facts
that pass; same expectations, same outcomes (checked); alternating repetitions; CPU
milliseconds per validation, and the ratios are the figures.

    .venv/bin/python benchmarks/gx_validate.py [--rows 10000] [--reps 5] [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import pandas as pd  # noqa: E402
from servingbench.resources.analysis import gx  # noqa: E402

RESULT_FORMAT = {"result_format": "COMPLETE", "unexpected_index_column_names": ["_row"]}


def facts(rows: int, failing: bool = True) -> pd.DataFrame:
    bad = (lambda i, k: i % k == 0) if failing else (lambda i, k: False)
    return pd.DataFrame({
        "_row": range(rows), "sent": range(rows),
        "first": [i + (-1 if bad(i, 997) else 2) for i in range(rows)],
        "status": ["error" if bad(i, 1009) else "ok" for i in range(rows)],
        "tokens": [None if bad(i, 991) else 5 for i in range(rows)]})


def items():
    E = gx.expectations()
    return [E.ExpectColumnValuesToNotBeNull(column="tokens"),
            E.ExpectColumnValuesToNotBeNull(column="sent"),
            E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="first", column_B="sent",
                                                      or_equal=True),
            E.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"]),
            E.ExpectColumnValuesToBeBetween(column="tokens", min_value=0)]


def gx_own():
    import great_expectations as ge

    _, ctx, source = gx._context()
    batch = source.add_dataframe_asset("bench").add_batch_definition_whole_dataframe("all")
    suite = ctx.suites.add(ge.ExpectationSuite(name="bench"))
    for i, item in enumerate(items()):
        item.meta = {"position": i}
        suite.add_expectation(item)
    vd = ctx.validation_definitions.add(ge.ValidationDefinition(name="bench", data=batch,
                                                               suite=suite))

    def run(df):
        result = vd.run(batch_parameters={"dataframe": df}, result_format=RESULT_FORMAT)
        out = [None] * len(result.results)
        for r in result.results:
            out[r.expectation_config.meta["position"]] = (
                bool(r.success),
                frozenset(int(d["_row"]) for d in r.result.get("unexpected_index_list") or []))
        return out
    return run


def gates_way(df):
    return [(o.success, o.rows) for o in gx.validate(df, items(), "bench")]


def complete_always(df):
    """The gates' way before a pass/fail validation came first: always the complete result."""
    its = items()
    for i, item in enumerate(its):
        item.meta = {**(item.meta or {}), gx._INDEX: i}
    batch_definition, suite = gx._definition(its, "bench")
    gx._remember_configurations()
    result = gx._validate(batch_definition, suite, df, gx._COMPLETE)
    return [(bool(r.success),
             frozenset(int(d["_row"]) for d in r.result.get("unexpected_index_list") or []))
            for r in gx._in_order(result, its, "bench")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args()
    ways = {"ValidationDefinition.run": gx_own(), "gx.validate": gates_way,
            "complete result always": complete_always}
    for failing in (True, False):
        df = facts(args.rows, failing)
        answers = {name: way(df) for name, way in ways.items()}  # warm, and the same answers
        for name in ways:
            assert answers[name] == answers["ValidationDefinition.run"], answers
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.reps):
            for name, way in ways.items():
                t0 = time.process_time()
                for _ in range(args.calls):
                    way(df)
                times[name].append((time.process_time() - t0) / args.calls * 1000)
        print(f"{args.rows} rows, 5 expectations, {'some fail' if failing else 'all pass'}, "
              f"{args.reps} x {args.calls} calls each, alternating")
        for name, ms in times.items():
            print(f"  {name:26s} CPU ms per validation: median {statistics.median(ms):6.1f} "
                  f"({', '.join(f'{m:.1f}' for m in ms)})")
        own, ours, complete = (statistics.median(times[n]) for n in ways)
        print(f"  ratio gx.validate / ValidationDefinition.run: {ours / own:.2f}; "
              f"gx.validate / complete result always: {ours / complete:.2f}")

if __name__ == "__main__":
    main()
