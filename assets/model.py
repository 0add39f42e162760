"""deployed_model: the engine serving the candidate, with its cold-start sub-phases."""

from __future__ import annotations

import dagster as dg
from servingbench.resources.analysis.summary import table
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.model_server.interface import Deployment

PHASE_ORDER = ("deploy", "image_pull", "weights_load", "compile", "ready")


def phase_rows(phases: dict) -> list[dict]:
    rows = []
    for name in PHASE_ORDER:
        span = phases.get(name)
        if span and span.get("started_at") and span.get("ended_at"):
            rows.append({"phase": name, "started_at": span["started_at"],
                         "seconds": (parse_ts(span["ended_at"]) - parse_ts(span["started_at"])) / 1e9})
    return rows


def metadata(dep: Deployment) -> dict:
    rows = phase_rows(dep.phases)
    md = {"endpoint": dg.MetadataValue.url(dep.endpoint),
          "served_model": dg.MetadataValue.text(dep.served_model),
          "source": dg.MetadataValue.text("emulated" if dep.emulated else "measured"),
          "cold_start": dg.MetadataValue.md(table(rows, [("phase", "phase", ""),
                                                         ("seconds", "seconds", ".3f"),
                                                         ("started_at", "started at", "")],
                                                  markdown=True))}
    md.update({f"cold_start_{r['phase']}_s": dg.MetadataValue.float(r["seconds"]) for r in rows})
    md.update({k: dg.MetadataValue.text(str(v)) for k, v in dep.facts.items() if v is not None})
    return md
