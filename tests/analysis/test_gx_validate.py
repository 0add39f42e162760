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


def _by_gx_validation_definition(df: pd.DataFrame, make=_items,
                                 name: str = "reference") -> list[tuple[bool, set[int]]]:
    """The same expectations through GX's ValidationDefinition.run, untouched by gx.py."""
    _, ctx, source = gx._context()
    import great_expectations as ge

    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
    suite = ctx.suites.add(ge.ExpectationSuite(name=name))
    items = make()
    for i, item in enumerate(items):
        item.meta = {"position": i}
        suite.add_expectation(item)
    vd = ctx.validation_definitions.add(ge.ValidationDefinition(name=name, data=batch,
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


def _formats_asked(monkeypatch) -> list[str]:
    asked: list[str] = []
    validate = gx._validate

    def recording(batch_definition, suite, df, result_format):
        asked.append(result_format["result_format"])
        return validate(batch_definition, suite, df, result_format)
    monkeypatch.setattr(gx, "_validate", recording)
    return asked


def test_facts_that_pass_cost_one_pass_fail_validation_and_failures_get_their_rows(monkeypatch):
    asked = _formats_asked(monkeypatch)
    passing = _facts().assign(first=lambda d: d["sent"] + 2, status="ok", tokens=5)
    ours = [(o.success, set(o.rows)) for o in gx.validate(passing, _items(), "passing")]
    assert ours == [(True, set())] * 4
    assert asked == ["BOOLEAN_ONLY"]
    asked.clear()
    failing = [(o.success, set(o.rows)) for o in gx.validate(_facts(), _items(), "passing")]
    assert asked == ["BOOLEAN_ONLY", "COMPLETE"]
    assert failing[0][1] == {i for i in range(300) if i % 53 == 0}
    monkeypatch.undo()
    assert _by_gx_validation_definition(passing, name="reference_passing") == ours


def _tolerant_items():
    E = gx.expectations()
    return [E.ExpectColumnValuesToNotBeNull(column="tokens", mostly=0.9),
            E.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"])]


def test_an_expectation_that_tolerates_some_rows_passes_and_still_names_them(monkeypatch):
    # `mostly`: a pass with unexpected rows, which only the complete result lists
    asked = _formats_asked(monkeypatch)
    df = _facts().assign(status="ok")
    ours = [(o.success, set(o.rows)) for o in gx.validate(df, _tolerant_items(), "tolerant")]
    assert asked == ["COMPLETE"]
    assert ours == [(True, {i for i in range(300) if i % 53 == 0}), (True, set())]
    monkeypatch.undo()
    assert _by_gx_validation_definition(df, _tolerant_items, "reference_tolerant") == ours
