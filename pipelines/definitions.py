"""Dagster definitions: the asset chain, its gates, jobs and schedules, with the resources
of the chosen profile (pipelines/profiles.py). `dagster dev -w workspace.yaml` loads `defs`."""

from __future__ import annotations

import dagster as dg
from servingbench.assets import benchmark, bill, checks, cost, metrics, quality, report
from servingbench.assets.partitions import partitions_def
from servingbench.pipelines.profiles import Settings, resources_for
from servingbench.pipelines.schedules import jobs, schedules


def build_definitions(settings: Settings | None = None, resources: dict | None = None) -> dg.Definitions:
    """The definitions for `settings` (default: from the environment). `resources` replaces
    profile resources by key (asset tests pass fixture resources this way)."""
    settings = settings or Settings.from_env()
    res = resources_for(settings) | (resources or {})
    names = list(res["candidates"])
    parts = partitions_def(names)
    return dg.Definitions(
        assets=[benchmark.build(parts), bill.build(parts), metrics.build(parts), cost.build(parts),
                report.build(parts)],
        asset_checks=checks.build(parts) + report.build_checks(parts)
        + quality.build_checks(parts),
        jobs=jobs(parts, {n: c.pool for n, c in res["candidates"].items() if c.pool}),
        # the nightly schedule runs the file's candidates; a sweep runs when asked
        # (`servingbench run --sweep`), each combination in its own partition
        schedules=schedules([n for n, c in res["candidates"].items()
                             if c.sweep is None], settings.profile),
        resources=res,
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
