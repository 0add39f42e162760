"""The gates' validation path gives GX's own answers: the same outcomes as a ValidationDefinition
run (GX's documented path) on facts with failures of every kind the gates look for, with
each expectation's configuration built once per validation and GX's own property
everywhere else, and nothing kept in the context per validation."""

from __future__ import annotations

import pandas as pd
from servingbench.resources.analysis import gx


def _facts() -> pd.DataFrame:
    n = 300
    return pd.DataFrame({
        "_row": range(n),
        "sent": range(n),
        "first": [i + (-1 if i % 37 == 0 else 2) for i in range(n)],  # out of order
        "status": ["ok" if i % 41 else "error" for i in range(n)],
        "tokens": [None if i % 53 == 0 else 5 for i in range(n)],  # missing
    })


def _items():
    E = gx.expectations()
    return [E.ExpectColumnValuesToNotBeNull(column="tokens"),
            E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="first", column_B="sent",
                                                      or_equal=True),
            E.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"]),
            E.ExpectColumnValuesToBeBetween(column="tokens", min_value=0)]


def _by_gx_validation_definition(df: pd.DataFrame) -> list[tuple[bool, set[int]]]:
    """The same expectations through GX's ValidationDefinition.run, untouched by gx.py."""
    _, ctx, source = gx._context()
    import great_expectations as ge

    batch = source.add_dataframe_asset("reference").add_batch_definition_whole_dataframe("all")
    suite = ctx.suites.add(ge.ExpectationSuite(name="reference"))
    items = _items()
    for i, item in enumerate(items):
        item.meta = {"position": i}
        suite.add_expectation(item)
    vd = ctx.validation_definitions.add(ge.ValidationDefinition(name="reference", data=batch,
                                                               suite=suite))
    result = vd.run(batch_parameters={"dataframe": df}, result_format={
        "result_format": "COMPLETE", "unexpected_index_column_names": ["_row"]})
    out: list = [None] * len(items)
    for r in result.results:
        out[r.expectation_config.meta["position"]] = (
            bool(r.success), {int(d["_row"]) for d in r.result.get("unexpected_index_list") or []})
    return out


def test_the_gates_path_answers_as_gx_own_run_and_keeps_nothing_per_validation():
    df = _facts()
    stored = len(gx._context()[1].validation_results_store.list_keys())
    ours = [(o.success, set(o.rows)) for o in gx.validate(df, _items(), "parity")]
    again = [(o.success, set(o.rows)) for o in gx.validate(df, _items(), "parity")]
    assert ours == again
    assert [ok for ok, _ in ours] == [False, False, False, True]  # every kind of failure found
    assert ours[0][1] == {i for i in range(300) if i % 53 == 0}
    assert ours[1][1] == {i for i in range(300) if i % 37 == 0}
    assert len(gx._context()[1].validation_results_store.list_keys()) == stored
    assert _by_gx_validation_definition(df) == ours
    # outside a validation the configuration is GX's own: built afresh on every read, so an
    # expectation changed after it was validated answers with its new arguments
    item = _items()[2]
    first = item.configuration
    assert item.configuration is not first
    item.value_set = ["ok", "error"]
    assert item.configuration.kwargs["value_set"] == ["ok", "error"]
