"""The frontier of a sweep in the terminal: every step of every combination that ran, from
each run's frontier.parquet (contract §3.6), and which of them make the sweep's one frontier
when its members' steps are pooled, by the frontier rule (sql/pareto.sql, through
resources/analysis/frontier.pareto, as the comparison's plots draw it). A combination that
failed quality parity is shown and never on it; an invalid step never is."""

from __future__ import annotations

from pathlib import Path

COLUMNS = [
    ("candidate", "candidate", ""), ("step", "step", ""), ("valid", "valid", ""),
    ("interactivity_tok_s", "tok/s/user", ",.2f"), ("output_tok_s_per_accel", "out tok/s/accel", ",.2f"),
    ("ttft_s_p99", "TTFT p99 s", ",.2f"), ("cost_per_1m_output_usd", "USD / 1M out", ",.2f"),
    ("on_frontier", "run's", ""), ("sweep_frontier", "sweep's", ""), ("parity", "quality", ""),
]


def rows(run_dirs: list[str]) -> list[dict]:
    import pyarrow as pa
    from servingbench.resources.analysis.frontier import pareto, read_frontier
    from servingbench.resources.contract import manifest as mf
    from servingbench.resources.contract import parity

    out: list[dict] = []
    tables, ranked = [], []
    for d in map(Path, run_dirs):
        manifest = mf.load(d / "manifest.json")
        frontier = read_frontier(d, manifest)
        if frontier is None:
            continue
        verdict = parity.read(d)
        word = ("-" if verdict is None or verdict.get("passed") is None else
                "FAILED (unranked)" if parity.failed(verdict) else "pass")
        for r in frontier.to_pylist():
            out.append({**r, "candidate": manifest["candidate"], "parity": word})
        tables.append(frontier)
        ranked += [not parity.failed(verdict)] * frontier.num_rows
    if not out:
        return out
    pooled = pareto(pa.concat_tables(tables), ranked)["on_frontier"].to_pylist()
    for r, best in zip(out, pooled, strict=True):
        r["sweep_frontier"] = best
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
