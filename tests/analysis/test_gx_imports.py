"""Great Expectations is imported without what the gates do not need (its optional SQL and
cloud integrations, its other data sources and expectations, scipy.stats and altair), still
validates, a module it deferred works when something does use it, and what it left out says
so when asked for. A fresh process: what matters is what an import leaves behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib.util, json, sys
import pandas as pd
from servingbench.resources.analysis import gx
E = gx.expectations()
out = gx.validate(pd.DataFrame({"_row": [0, 1, 2], "x": [1.0, None, 3.0]}),
                  [E.ExpectColumnValuesToNotBeNull(column="x")], "probe")
seen = {m: m in sys.modules and type(sys.modules[m]).__name__ != "_Deferred"
        for m in ("sqlalchemy", "boto3", "scipy.stats", "altair")}
stand_ins = {m: type(sys.modules.get(m)).__name__ for m in (
    "great_expectations.datasource.fluent.postgres_datasource",
    "great_expectations.expectations.core.expect_column_mean_to_be_between",
    "great_expectations.expectations.core.expect_column_values_to_not_be_null")}
try:
    E.ExpectColumnMeanToBeBetween(column="x", min_value=0)
    refused = ""
except RuntimeError as exc:
    refused = str(exc)
spec = importlib.util.find_spec("scipy.stats").name
from scipy import stats
cdf = float(stats.norm.cdf(0.0))
print(json.dumps({"seen": seen, "rows": sorted(out[0].rows), "success": out[0].success,
                  "spec": spec, "cdf": cdf, "stand_ins": stand_ins, "refused": refused}))
"""


def test_gx_imports_without_what_the_gates_do_not_need_and_still_validates():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["seen"] == {"sqlalchemy": False, "boto3": False, "scipy.stats": False,
                           "altair": False}
    assert got["success"] is False and got["rows"] == [1]  # the null row, found by GX
    assert got["spec"] == "scipy.stats" and got["cdf"] == 0.5  # the deferred module works
    assert got["stand_ins"] == {
        "great_expectations.datasource.fluent.postgres_datasource": "_StandIn",
        "great_expectations.expectations.core.expect_column_mean_to_be_between": "_StandIn",
        "great_expectations.expectations.core.expect_column_values_to_not_be_null": "module"}
    assert "ExpectColumnMeanToBeBetween was not imported" in got["refused"]
    assert "SERVINGBENCH_GX_WHOLE=1" in got["refused"]


def test_what_stands_in_and_the_switch_that_imports_gx_whole(monkeypatch):
    from servingbench.resources.analysis import gx

    monkeypatch.delenv(gx.WHOLE_ENV, raising=False)
    core = "great_expectations.expectations.core."
    assert gx.stands_in(core + "expect_column_kl_divergence_to_be_less_than")
    assert not gx.stands_in(core + "expect_column_values_to_be_in_set")  # the gates use it
    assert not gx.stands_in(core + "expect_column_values_to_be_in_set.sub")
    assert gx.stands_in("great_expectations.datasource.fluent.data_asset.path.spark.csv_asset")
    assert not gx.stands_in("great_expectations.datasource.fluent.pandas_datasource")
    monkeypatch.setenv(gx.WHOLE_ENV, "1")
    assert not gx.stands_in(core + "expect_column_kl_divergence_to_be_less_than")
