"""Quality parity (contract §3.3): the same evaluation set, at temperature 0, scored exactly,
on the endpoint a run measured; and the check that a candidate's accuracy matches its
group's reference before its cost is compared with anyone's."""

from servingbench.resources.quality.evaluate import (
    QUALITY_FILE,
    SUMMARY_FILE,
    QualityError,
    evaluate,
    load_summary,
    score,
    wilson,
)
from servingbench.resources.quality.parity import Parity, find_reference, parity

__all__ = ["QUALITY_FILE", "SUMMARY_FILE", "Parity", "QualityError", "evaluate",
           "find_reference", "load_summary", "parity", "score", "wilson"]
