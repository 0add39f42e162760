"""Whether a servingbench run is still going, by the Dagster run that materializes it.

The benchmark asset tags its Dagster run with the servingbench run id
(`servingbench.assets.benchmark.RUN_TAG`) as soon as the run id exists, before anything is created in the
cloud; the reaper asks here and keeps a run whose Dagster run has not finished."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
from servingbench.assets.benchmark import RUN_TAG

# Every status before the end: a run queued, starting, running or being cancelled may still
# create or use what carries its tag.
NOT_FINISHED = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED,
                dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
                dg.DagsterRunStatus.CANCELING)


def dagster_alive(instance: dg.DagsterInstance) -> Callable[[str], str | None]:
    """alive(run_id): why the run still lives ("Dagster run 1a2b3c4d STARTED"), or None."""
    def alive(run_id: str) -> str | None:
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={RUN_TAG: run_id}, statuses=list(NOT_FINISHED)), limit=1)
        if not records:
            return None
        run = records[0].dagster_run
        return f"Dagster run {run.run_id[:8]} {run.status.value}"
    return alive
