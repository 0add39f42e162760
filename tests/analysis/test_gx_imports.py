"""Great Expectations is imported as GX itself imports: no finder on the import system, no
stand-in modules tied to GX's internal layout (a GX upgrade must not break the gates), and
what the gates do not use is GX's own, real module. A fresh process: what matters is what
an import leaves behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipelines", "assets", "resources", "emulator")

PROBE = r"""
import json, sys
import pandas as pd
from servingbench.resources.analysis import gx
E = gx.expectations()
out = gx.validate(pd.DataFrame({"_row": [0, 1, 2], "x": [1.0, None, 3.0]}),
                  [E.ExpectColumnValuesToNotBeNull(column="x")], "probe")
mean = E.ExpectColumnMeanToBeBetween(column="x", min_value=0)  # one the gates never use
kinds = {m: type(sys.modules.get(m)).__name__ for m in (
    "great_expectations.datasource.fluent.postgres_datasource",
    "great_expectations.expectations.core.expect_column_mean_to_be_between")}
print(json.dumps({"rows": sorted(out[0].rows), "success": out[0].success, "kinds": kinds,
                  "mean": type(mean).__name__, "ours": [type(f).__module__ for f in sys.meta_path
                           if type(f).__module__.startswith("servingbench")]}))
"""


def test_gx_imports_whole_and_validates():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["success"] is False and got["rows"] == [1]  # the null row, found by GX
    assert got["kinds"] == {
        "great_expectations.datasource.fluent.postgres_datasource": "module",
        "great_expectations.expectations.core.expect_column_mean_to_be_between": "module"}
    assert got["mean"] == "ExpectColumnMeanToBeBetween"
    assert got["ours"] == []  # no finder of servingbench's on the import system


def test_no_product_module_touches_the_import_system():
    hits = [f"{p.relative_to(ROOT)}" for folder in PRODUCT
            for p in sorted((ROOT / folder).rglob("*.py"))
            if "meta_path" in p.read_text(encoding="utf-8")]
    assert hits == []
