"""Where a run's bill comes from: one interface, the embedded default's price sheet beside
Cost Explorer (resources/billing). Every bill is a contract §2.4 table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa


class BillSource(ABC):
    """A file of resources/billing defines one; the package finds it by `source`, its name
    (the bill rows' `source` value, and what a profile names it by)."""

    source: str

    @classmethod
    def from_aws(cls, aws) -> BillSource:
        """This source for a profile: `aws` (resources.billing.Aws) on the eks profile, None
        on the local one. A source that reads nothing from AWS needs no arguments."""
        return cls()

    @abstractmethod
    def fetch_bill(self, manifest: dict) -> pa.Table:
        """The bill rows for the run's scope and steady phase, in the BILL schema."""

    def price_bases(self, manifest: dict) -> list[dict] | None:
        """What-if prices (contract §4.1) looked up for the run, or None when this source
        looks up none (the embedded default's come from its price sheet)."""
        return None
