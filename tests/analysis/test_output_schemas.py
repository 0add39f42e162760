"""The analyzer's outputs are checked against their contract schemas
(resources/contract/outputs.py OUTPUTS) before they are written: a real analysis passes, and
a column missing, unknown or of the wrong type is refused naming it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract.outputs import (
    OUTPUTS,
    OutputSchemaError,
    check_output,
    required_columns,
)

from tests.support.runbuilder import clean_run


def test_every_output_of_a_real_analysis_has_its_contract_schema(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    assert analyze_run(run_dir).accepted
    # the clean run has no telemetry and no price bases, and is no session run (no TTFT by
    # context length: the agentic tests check that file); frontier_levels is the comparison's
    written = {p.stem for p in run_dir.glob("*.parquet")} & set(OUTPUTS)
    assert written == {"derived_metrics", "derived_metrics_by_cache", "cost_per_1m", "headline",
                       "frontier"}
    for name in written:
        schema = OUTPUTS[name]
        got = pq.read_schema(run_dir / f"{name}.parquet")
        assert set(required_columns(name)) <= set(got.names) <= set(schema.names)
        for field in got:
            assert field.type == schema.field(field.name).type or pa.types.is_null(field.type), field


def _headline(**over) -> pa.Table:
    cols = {f.name: pa.array([None], f.type) for f in OUTPUTS["headline"]}
    return pa.table(cols | over)


def test_a_column_missing_unknown_or_mistyped_is_refused():
    check_output(_headline(), "headline")
    check_output(_headline().drop(["slo_search_step"]), "headline")  # an optional one
    with pytest.raises(OutputSchemaError, match="'meets_slo' missing"):
        check_output(_headline().drop(["meets_slo"]), "headline")
    with pytest.raises(OutputSchemaError, match="'extra' is not in its contract schema"):
        check_output(_headline(extra=pa.array([1])), "headline")
    with pytest.raises(OutputSchemaError, match="'output_tok_s' is int64, the contract says double"):
        check_output(_headline(output_tok_s=pa.array([1], pa.int64())), "headline")
    check_output(_headline(step=pa.array([None], pa.null())), "headline")  # nulls only
