"""The frontier of a sweep in the terminal: every step of every combination that ran, from
each run's frontier.parquet (contract §3.6), and which of them make the sweep's one frontier
when its members' steps are pooled, by the rule the comparison's plots draw it with
(resources/report/frontier_plots.pareto). A combination that failed quality parity is shown
and never on it; an invalid step never is."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = [
    ("candidate", "candidate", ""), ("step", "step", ""), ("valid", "valid", ""),
    ("interactivity_tok_s", "tok/s/user", ",.2f"), ("output_tok_s_per_accel", "out tok/s/accel", ",.2f"),
    ("ttft_s_p99", "TTFT p99 s", ",.2f"), ("cost_per_1m_output_usd", "USD / 1M out", ",.2f"),
    ("on_frontier", "run's", ""), ("sweep_frontier", "sweep's", ""), ("parity", "quality", ""),
]


def _parity(run_dir: Path) -> str:
    path = run_dir / "quality_parity.json"
    if not path.exists():
        return "-"
    return "pass" if json.loads(path.read_text()).get("passed") else "FAILED (unranked)"


def rows(run_dirs: list[str]) -> list[dict]:
    import pandas as pd
    from servingbench.resources.analysis.frontier import read_frontier
    from servingbench.resources.contract import manifest as mf
    from servingbench.resources.report.frontier_plots import pareto

    out: list[dict] = []
    for d in map(Path, run_dirs):
        manifest = mf.load(d / "manifest.json")
        frontier = read_frontier(d, manifest)
        if frontier is None:
            continue
        parity = _parity(d)
        for r in frontier.to_pylist():
            out.append({**r, "candidate": manifest["candidate"], "parity": parity})
    ranked = [i for i, r in enumerate(out) if not r["parity"].startswith("FAILED")]
    points = pd.DataFrame([out[i] for i in ranked], index=ranked)
    best = set(pareto(points).index) if len(points) else set()
    for i, r in enumerate(out):
        r["sweep_frontier"] = i in best
    return out


def text(run_dirs: list[str], label: str) -> str:
    from servingbench.resources.analysis.summary import table

    found = rows(run_dirs)
    if not found:
        return "no frontier: no combination of the sweep was analysed"
    head = (f"Frontier of the sweep — {label} (every step of every combination; tok/s/user = "
            "1 / p50 TPOT; 'sweep's' marks the steps no other valid step of the sweep beats on "
            "both tok/s/user and out tok/s/accel)")
    return head + "\n" + table(found, COLUMNS)
