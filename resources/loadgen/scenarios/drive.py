"""The steady phase of a run whose scenario is not `fixed`: one module per kind."""

from __future__ import annotations


async def scenario_steady(run) -> None:
    kind = run.cfg.scenario.kind
    if kind == "multi_turn":
        from resources.loadgen.scenarios.multi_turn import steady
    elif kind == "agentic":
        from resources.loadgen.scenarios.agentic import steady
    elif kind == "trace":
        from resources.loadgen.scenarios.trace import steady
    elif kind == "batch":
        from resources.loadgen.scenarios.batch import steady
    else:  # slo_search (spec.check allows nothing else here)
        from resources.loadgen.scenarios.slo_search import steady
    await steady(run)
