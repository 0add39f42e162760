"""Every asset of the chain is partitioned by date × candidate."""

from __future__ import annotations

import dagster as dg

START_DATE = "2026-11-01"


def partitions_def(candidate_names: list[str]) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition({
        "date": dg.DailyPartitionsDefinition(start_date=START_DATE, end_offset=1),
        "candidate": dg.StaticPartitionsDefinition(list(candidate_names)),
    })


def candidate_of(context) -> str:
    return context.partition_key.keys_by_dimension["candidate"]


def run_value(run_id: str, run_dir, **extra) -> dict:
    """What an asset of the chain stores: where its run folder is, plus a few facts."""
    return {"run_id": run_id, "run_dir": str(run_dir), **extra}
