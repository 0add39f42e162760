"""Plain-text rendering of an analysis for terminals and logs (also markdown for Dagster)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from servingbench.resources.analysis.analyze import NO_MEMORY, NO_ROOM, Analysis
from servingbench.resources.analysis.frontier import cheapest_by_level
from servingbench.resources.contract.deployment_record import band_fraction

NOT_MEASURED = "not measured"


def meets_text(value) -> str:
    """contract §4 meets_slo in words: null (no valid step) is "not measured", never "no"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    return "yes" if value else "no"


def step_why(row: Mapping, manifest_step: Mapping | None = None) -> str:
    """Why a step is invalid (contract §3 validity), in words with its evidence: the metric
    row's own figures, and for a client-limited step the load generator's self-watch."""
    parts = []
    for code in str(row.get("invalid_reason") or "").split(";"):
        if code == "error_rate":
            n, ok = row.get("n_requests") or 0, row.get("n_ok") or 0
            parts.append(f"error rate {_fmt(row.get('error_rate'), '.1%')} > 1 % "
                         f"({n - ok} of {n} requests failed)")
        elif code == "achieved_concurrency":
            parts.append(f"achieved concurrency {_fmt(row.get('achieved_concurrency'), '.2f')} "
                         f"< 0.9 x target {_fmt(row.get('target'), 'g')}")
        elif code == "sched_lag":
            lag = row.get("sched_lag_s_p99")
            parts.append(f"scheduling lag p99 {_fmt(lag * 1e3 if lag is not None else None, '.1f')}"
                         " ms > 10 ms (the client fell behind the arrival process)")
        elif code == "client_limited":
            ms = dict(manifest_step or {})
            evidence = []
            if ms.get("loop_lag_p99_s") is not None:
                evidence.append(f"loop lag p99 {ms['loop_lag_p99_s'] * 1e3:.1f} ms")
            if ms.get("client_cpu_share") is not None:
                evidence.append(f"client CPU {ms['client_cpu_share']:.0%} of a core")
            parts.append("client-limited" + (f": {', '.join(evidence)}" if evidence else ""))
        elif code:
            parts.append(code)
    return "; ".join(parts) or "invalid (no reason recorded)"


def not_measured(metrics: Sequence[Mapping], manifest: Mapping) -> list[str]:
    """One line per invalid step, `c=8: client-limited: loop lag p99 8.8 ms, ...`."""
    by_name = {s["step"]: s for s in manifest.get("steps") or []}
    return [f"{r['step']}: {step_why(r, by_name.get(r['step']))}"
            for r in metrics if not r.get("valid")]


ADVICE = ("Not measured is not a verdict on the hardware: this machine could not drive the load "
          "cleanly (see the reasons above). Close other work, run fewer candidates at once "
          "(--only NAME), or lower the load (--concurrency 1,4).")


FAILED_ADVICE = ("Failed requests are not the client's doing: their status and error are in the "
                 "run's request log. An episode that scales from zero fails the requests that "
                 "arrive while no replica is ready (the balancer answers 503), and a spot run the "
                 "ones its interruptions cut: both count against the SLO attainment printed "
                 "below, and against the error-rate rule here.")


def advice(metrics: Sequence[Mapping]) -> str:
    """What to do about steps that are not measured: when every invalid step failed only on
    its error rate, the requests failed at the server (or the balancer in front of it), and
    advice about this machine's load would send the reader the wrong way."""
    codes = {c for r in metrics if not r.get("valid")
             for c in str(r.get("invalid_reason") or "").split(";") if c}
    return FAILED_ADVICE if codes == {"error_rate"} else ADVICE


def measured_host(manifest: Mapping) -> str | None:
    """For a run measured on this host (the local real engine), the host it ran on: the
    manifest has no host object (contract §2.1), so the local cluster writes the CPU model,
    cores and memory into `nodegroup` ("this host: ...", resources/cluster/host.py)."""
    ng = manifest.get("nodegroup")
    if (manifest.get("source") == "measured" and str(manifest.get("cluster_name") or "")
            .startswith("local:") and isinstance(ng, str) and ng.startswith("this host:")):
        return ng
    return None


def headline_rows(rows: Sequence[Mapping], bands: Mapping[str, Mapping | None] | None = None
                  ) -> list[dict]:
    """Headline rows for display: `meets` in words (contract §4's null is not a "no"), and an
    emulated row's error band (`bands`: run_id -> the emulator's recorded band)."""
    bands = bands or {}
    return [{**r, "meets": meets_text(r.get("meets_slo")),
             "band": band_text(bands.get(r.get("run_id"))) if r.get("source") == "emulated"
             else None} for r in rows]


def band_text(band: Mapping | None) -> str:
    """An emulated figure's error band, short: "±12%", or "uncalibrated"."""
    mape = band_fraction(band)
    return f"±{100 * mape:.0f}%" if mape is not None else "uncalibrated"


def within_bands_lines(pairs: Sequence[tuple]) -> list[str]:
    """One line per pair of emulated candidates the emulator cannot tell apart on cost."""
    return [f"{a.candidate} and {b.candidate} are within each other's error bands "
            f"({band_text({'mape': a.band})}, {band_text({'mape': b.band})}): the emulator "
            f"cannot say which is cheaper (${a.cost:,.4f} vs ${b.cost:,.4f} per 1M output tokens)"
            for a, b in pairs]


def _fmt(value, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and spec:
        return format(value, spec)
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return str(value)


# Markdown's punctuation, escaped in table cells: values come from files (an imported peer's
# result names, step names, error texts) and Dagster renders the table, so `![x](url)` would
# be an image fetched when someone opens the run, `<img …>` raw HTML, a `|` a new cell.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+\-!|~&])")


def _md_text(text: str) -> str:
    """`text` as literal markdown table-cell text: one line, every special escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]], markdown: bool = False) -> str:
    """Rows as an aligned text (or markdown) table; columns are (key, title, format)."""
    cells = [[title for _, title, _ in columns]]
    cells += [[_fmt(r.get(key), spec) for key, _, spec in columns] for r in rows]
    if markdown:
        cells = [[_md_text(c) for c in row] for row in cells]
        head, *body = cells
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


STEP_COLUMNS = [
    ("step", "step", ""), ("n_requests", "n", ""), ("error_rate", "err", ".1%"),
    ("output_tok_s", "out tok/s", ",.1f"), ("request_s", "req/s", ".2f"),
    ("achieved_concurrency", "conc", ".2f"), ("ttft_s_p50", "TTFT p50 s", ".3f"),
    ("ttft_s_p99", "TTFT p99 s", ".3f"), ("tpot_s_p50", "TPOT p50 s", ".4f"),
    ("tpot_s_p99", "TPOT p99 s", ".4f"), ("itl_s_p99", "ITL p99 s", ".4f"),
    ("valid", "valid", ""), ("invalid_reason", "why invalid", ""),
]
COST_COLUMNS = [
    ("step", "step", ""), ("cost_per_1m_output_usd", "USD / 1M out", ",.4f"),
    ("window_cost_usd", "window USD", ",.6f"), ("bill_status", "bill", ""),
    ("bill_source", "bill source", ""), ("cross_check_delta", "x-check", "+.2%"),
    ("included", "included", ""), ("cross_check_note", "note", ""),
]
HEADLINE_COLUMNS = [
    ("candidate", "candidate", ""), ("instance_type", "instance", ""), ("source", "source", ""),
    ("band", "error band", ""),
    ("slo_ttft_s", "SLO TTFT s", ".3g"), ("slo_tpot_s", "SLO TPOT s", ".3g"),
    ("meets", "meets", ""), ("step", "step", ""), ("output_tok_s", "out tok/s", ",.1f"),
    ("ttft_s_p99", "TTFT p99 s", ".3f"), ("tpot_s_p99", "TPOT p99 s", ".4f"),
    ("cost_per_1m_output_usd", "USD / 1M out", ",.4f"), ("bill_status", "bill", ""),
]
# optional headline columns (contract §4): shown only when a row of the table has them
SEARCH_HEADLINE_COLUMNS = [
    ("slo_search_capacity", "search capacity", "g"), ("slo_search_step", "at step", ""),
    ("slo_search_cost_per_1m_output_usd", "SLO cost USD / 1M out", ",.4f"),
]


# shown beside TTFT when some step's first answer token came later than its first token
# (a reasoning model), and beside the ITL when the engine counted speculative drafts
REASONING_COLUMNS = [
    ("ttfat_s_p50", "1st answer p50 s", ".3f"), ("ttfat_s_p99", "1st answer p99 s", ".3f"),
    ("reasoning_tokens", "reasoning tok", ""),
]
SPEC_COLUMNS = [("spec_acceptance_rate", "draft accept", ".1%"),
                ("itl_multi_token_share", "multi-tok chunks", ".1%")]
CONTEXT_COLUMNS = [
    ("step", "step", ""), ("context", "context tokens", ""), ("cache", "cache", ""),
    ("n_ok", "ok", ""), ("ttft_s_p50", "TTFT p50 s", ".3f"), ("ttft_s_p99", "TTFT p99 s", ".3f"),
    ("cached_share", "from cache", ".0%"),
]


def reasoning_differs(rows: Sequence[Mapping]) -> bool:
    """A step whose time to first answer differs from its TTFT, or with reasoning tokens."""
    for r in rows:
        if r.get("reasoning_tokens"):
            return True
        a, b = r.get("ttfat_s_p50"), r.get("ttft_s_p50")
        if a is not None and b is not None and a != b:
            return True
    return False


def step_columns(rows: Sequence[Mapping]) -> list[tuple[str, str, str]]:
    cols = list(STEP_COLUMNS)
    at = next(i for i, c in enumerate(cols) if c[0] == "ttft_s_p99") + 1
    if reasoning_differs(rows):
        cols[at:at] = REASONING_COLUMNS
    if any(r.get("spec_acceptance_rate") is not None for r in rows):
        at = next(i for i, c in enumerate(cols) if c[0] == "itl_s_p99") + 1
        cols[at:at] = SPEC_COLUMNS
    return cols


def cost_rows(cost: Sequence[Mapping], metrics: Sequence[Mapping]) -> tuple[list[dict], list]:
    """The cost table's rows and columns; for a reasoning run, with the cost per 1M ANSWER
    tokens (the window's cost over output less reasoning tokens) beside it."""
    if not reasoning_differs(metrics):
        return [dict(c) for c in cost], COST_COLUMNS
    by_step = {m["step"]: m for m in metrics}
    rows = []
    for c in cost:
        m = by_step.get(c["step"], {})
        out, think, usd = m.get("output_tokens"), m.get("reasoning_tokens"), c.get("window_cost_usd")
        answer = None if out is None or think is None else out - think
        rows.append({**c, "cost_per_1m_answer_usd": (usd / answer * 1e6 if answer and usd is not None
                                                     else None)})
    cols = list(COST_COLUMNS)
    cols.insert(2, ("cost_per_1m_answer_usd", "USD / 1M answer", ",.4f"))
    return rows, cols


def context_text(rows: Sequence[Mapping]) -> str:
    shown = [{**r, "context": f"{r['context_lo']:,}-{r['context_hi']:,}"} for r in rows]
    return table(shown, CONTEXT_COLUMNS)


def headline_columns(rows: Sequence[Mapping]) -> list[tuple[str, str, str]]:
    """The headline table's columns: the search's SLO cost only for a run that searched."""
    searched = any(r.get("slo_search_capacity") is not None for r in rows)
    return HEADLINE_COLUMNS + (SEARCH_HEADLINE_COLUMNS if searched else [])


JOB_COLUMNS = [
    ("requests", "requests", ""), ("ok", "ok", ""), ("makespan_s", "makespan s", ",.3f"),
    ("output_tokens", "output tokens", ""), ("output_tok_s", "out tok/s", ",.1f"),
    ("window_cost_usd", "window USD", ",.6f"), ("cost_per_job_usd", "USD / job", ",.6f"),
]
PROBE_COLUMNS = [("step", "probe", ""), ("target", "target", "g"), ("valid", "valid", ""),
                 ("met", "met SLO", "")]


def job_text(job: Mapping, markdown: bool = False) -> str:
    """contract §3.4 as a one-row table (null cost: the run has no bill)."""
    out = table([dict(job)], JOB_COLUMNS, markdown)
    if job.get("cost_per_job_usd") is None:
        out += "\n\nNo bill behind the job window: no job cost."
    return out


def slo_search_text(capacity: Mapping, cost_usd: float | None = None,
                    markdown: bool = False) -> str:
    """contract §3.5: the SLO, every probe in the order it ran, the capacity and its bracket,
    and (when the run has a bill) the SLO cost: the cost per 1M output tokens at capacity."""
    slo = ", ".join(f"{k} <= {v:g}" for k, v in (capacity.get("slo") or {}).items())
    unit = "req/s" if capacity.get("load_mode") == "rate" else "in flight"
    cap, (low, high) = capacity.get("capacity"), capacity.get("interval") or [None, None]
    lines = [f"SLO {slo}; probing {capacity.get('load_mode')} ({len(capacity['probes'])} probes)"]
    if cap is None:
        lines.append("capacity: none - no probe was valid and met the SLO")
    else:
        lines.append(f"capacity: {cap:g} {unit}, bracket [{_fmt(low, 'g')}, {_fmt(high, 'g')}]"
                     + ("" if high is not None else " (no probe missed: the top is not bracketed)"))
        lines.append("SLO cost: " + (f"{cost_usd:,.4f} USD / 1M output tokens at capacity"
                                     if cost_usd is not None else "- (no cost row at capacity)"))
    sep = "\n\n" if markdown else "\n"
    return sep.join(lines) + "\n\n" + table(list(capacity["probes"]), PROBE_COLUMNS, markdown)


GATE_COLUMNS = [
    ("rule", "rule", ""), ("name", "name", ""), ("result", "result", ""),
    ("offending_rows", "rows", ""), ("examples", "examples", ""), ("message", "why", ""),
]


def gate_rows(gates: list[dict]) -> list[dict]:
    verdict = {True: "pass", False: "FAIL", None: "n/a"}
    return [{**g, "result": verdict[g["passed"]], "examples": g["examples"][:3]} for g in gates]


FRONTIER_COLUMNS = [
    ("step", "step", ""), ("valid", "valid", ""), ("interactivity_tok_s", "tok/s/user", ",.1f"),
    ("output_tok_s_per_accel", "out tok/s/accel", ",.2f"),
    ("cost_per_1m_output_usd", "USD / 1M out", ",.4f"),
    ("cost_per_1m_total_usd", "USD / 1M total", ",.4f"), ("on_frontier", "frontier", ""),
]
WHAT_IF_COLUMNS = [
    ("step", "step", ""), ("basis", "what-if basis", ""), ("price_source", "price source", ""),
    ("hourly_usd_per_node", "USD / node-h", ",.4f"),
    ("cost_per_1m_output_usd", "what-if USD / 1M out", ",.4f"),
    ("cost_per_1m_total_usd", "what-if USD / 1M total", ",.4f"),
]


def render(a: Analysis) -> str:
    """The human summary `servingbench analyze` prints."""
    if a.exit_code == 2:
        return f"MALFORMED: {a.message}"
    if a.exit_code in (NO_ROOM, NO_MEMORY):
        return f"NOT WRITTEN: {a.message}"
    m = a.manifest or {}
    emulated = m.get("source") == "emulated"
    out = []
    if emulated:
        out.append("=" * 72 + "\nEMULATED - every figure below comes from the local engine emulator,"
                   "\nnot from real hardware. Do not quote it as a measurement.\n" + "=" * 72)
    out.append(f"run {m.get('run_id')}  candidate {m.get('candidate')}  "
               f"instance {m.get('instance_type')} x{m.get('node_count')}  source {m.get('source')}")
    host = measured_host(m)
    if host:
        out.append(f"MEASURED on {host} (this host is the scope; its price is the price sheet's)")
    if a.partial:
        out.append(f"note: read from partial streams (run was cut short): {', '.join(a.partial)}")
    out += ["", "Gates (contract §5)", table(gate_rows(a.gates), GATE_COLUMNS)]
    metrics = a.metrics.to_pylist() if a.metrics is not None else []
    if a.metrics is not None:
        out += ["", "Steps (steady phase)", table(metrics, step_columns(metrics))]
        if reasoning_differs(metrics):
            out.append("1st answer: time to the first answer token (reasoning tokens come "
                       "first and count in TTFT, not in it)")
    if a.context is not None and a.context.num_rows and (m.get("scenario") or {}).get(
            "kind") in ("agentic", "multi_turn"):
        out += ["", "TTFT by context length (ttft_by_context.parquet)",
                context_text(a.context.to_pylist())]
    if a.cost is not None:
        rows, cols = cost_rows(a.cost.to_pylist(), metrics)
        out += ["", "Cost per 1M output tokens", table(rows, cols)]
        rows = a.headline.to_pylist()
        out += ["", "Headline (best valid step within the SLO)",
                table(headline_rows(rows), headline_columns(rows))]
        if any(r["meets_slo"] is None for r in a.headline.to_pylist()) and a.metrics is not None:
            out += ["", "Not measured: no step of this run is valid, so no SLO verdict.",
                    *[f"  {line}" for line in not_measured(a.metrics.to_pylist(), m)]]
    elif a.exit_code == 3:
        out += ["", "Cost table WITHHELD: the run was rejected; raw records are kept."]
    else:
        out += ["", "No bill in this run folder: no cost table."]
    if a.frontier is not None:
        out += ["", "Frontier (contract §3.6, frontier.parquet; interactivity = 1 / p50 TPOT)",
                table(a.frontier.to_pylist(), FRONTIER_COLUMNS)]
    if a.what_if is not None:
        out += ["", "WHAT-IF cost at other price bases (contract §4.1, cost_what_if.parquet; "
                "never billed)", table(a.what_if.to_pylist(), WHAT_IF_COLUMNS)]
    if a.job is not None:
        out += ["", "Batch job (contract §3.4, job.json)", job_text(a.job)]
    if a.slo_capacity is not None:
        cost = None
        if a.headline is not None and a.headline.num_rows:
            cost = a.headline.to_pylist()[0].get("slo_search_cost_per_1m_output_usd")
        out += ["", "SLO capacity search (contract §3.5, slo_capacity.json)",
                slo_search_text(a.slo_capacity, cost)]
    verdict = {0: "ACCEPTED", 3: "REJECTED"}[a.exit_code]
    out += ["", f"{verdict}{' (EMULATED)' if emulated else ''}: {a.message}  [{a.run_dir}]"]
    return "\n".join(out)


LEVEL_COLUMNS = [
    ("level_tok_s", ">= tok/s/user", "g"), ("source", "source", ""),
    ("reached", "reach", ""), ("cheapest", "cheapest", ""), ("step", "step", ""),
    ("cost_per_1m_output_usd", "USD / 1M out", ",.4f"), ("runner_up", "runner-up", ""),
    ("runner_up_cost_per_1m_output_usd", "runner-up USD / 1M", ",.4f"),
    ("ratio", "x dearer", ".2f"),
]


def levels_text(levels: Sequence[Mapping], markdown: bool = False,
                bands: Mapping[str, float | None] | None = None) -> str:
    """The interactivity-level table: at each level, the cheapest candidate among the valid
    steps that reach it within the SLO's TTFT, and its runner-up; two emulated candidates
    within each other's error bands (`bands`: candidate -> relative band) are both named,
    neither as the cheaper."""
    rows = cheapest_by_level(levels, bands)
    for r in rows:
        r["reached"] = f"{r['reached']}/{r['of']}"
        if r.get("within_bands"):
            r["cheapest"] = f"{r['cheapest']} or {r['runner_up']} (within error bands)"
    return table(rows, LEVEL_COLUMNS, markdown)
