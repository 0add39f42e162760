"""A bill source is one file: a BillSource subclass names its `source`, the file declares it
(`PLUGIN`), resources/billing finds it, and a profile asks for it by that name. Checked on a package of dropped-in files,
and on the profiles' own sources."""

from __future__ import annotations

import pytest
from servingbench.resources import billing

from tests.support.droppedin import package

FLAT = '''
from servingbench.resources.billing.interface import BillSource


class FlatRateBill(BillSource):
    source = "flat_rate"

    def fetch_bill(self, manifest):
        raise NotImplementedError


PLUGIN = FlatRateBill
'''


def test_a_dropped_in_source_file_is_found_by_its_name(tmp_path, monkeypatch):
    found = billing.discover(package(tmp_path, monkeypatch, {"flat.py": FLAT}))
    assert list(found) == ["flat_rate"]
    assert found["flat_rate"].from_aws(None).source == "flat_rate"


@pytest.mark.parametrize(("source", "says"), [
    (FLAT.replace('    source = "flat_rate"\n', ""), "FlatRateBill must name its source"),
    (FLAT.replace("FlatRateBill", "OtherBill"), "source 'flat_rate' is already FlatRateBill's"),
    (FLAT.replace("PLUGIN = FlatRateBill", ""), "must end with PLUGIN = a BillSource subclass"),
    (FLAT.replace("PLUGIN = FlatRateBill", "PLUGIN = BillSource"), "got ABCMeta"),
])
def test_a_malformed_source_file_fails_loudly_naming_the_file(tmp_path, monkeypatch, source, says):
    files = {"flat.py": source, "aaa_flat.py": FLAT}  # the name's first file, by file name
    with pytest.raises(ImportError, match=says) as err:
        billing.discover(package(tmp_path, monkeypatch, files))
    assert "/flat.py" in str(err.value) or str(err.value).startswith("flat.py")


def test_the_profiles_sources_are_found_and_an_unknown_one_is_named():
    assert set(billing.names()) >= {"price_sheet", "cost_explorer"}
    assert billing.build("price_sheet").source == "price_sheet"
    with pytest.raises(ValueError, match="bill source 'cost_explorer' reads AWS Cost Explorer"):
        billing.build("cost_explorer")  # the local profile has no AWS to read it from
    with pytest.raises(ValueError, match=r"bill source 'price_sheeet': expected one of "):
        billing.build("price_sheeet")
