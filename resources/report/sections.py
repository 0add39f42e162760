"""The sections of a report, each from one part of a run folder: headline, gates, steps,
invalid steps, cost, manifest facts, cold-start phases, the load generator's self-watch."""

from __future__ import annotations

import pandas as pd
from servingbench.resources.analysis.summary import NOT_MEASURED, not_measured, step_why
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.report.html import (
    NULL,
    Cell,
    badge,
    cell,
    esc,
    is_null,
    kv_table,
    num,
    para,
    passed_badge,
    pct,
    table,
    usd,
)
from servingbench.resources.report.rundata import RunData

COLD_START = ("provision", "deploy", "image_pull", "weights_load", "compile", "ready",
              "warmup", "steady")
DEPLOY_SUB = {"image_pull", "weights_load", "compile", "ready"}


def n(value, kind: str = "num", digits: int = 4) -> Cell:
    return Cell(num(value, digits), "null" if is_null(value) else kind)


def money(value) -> Cell:
    return Cell(usd(value), "null" if is_null(value) else "num")


def small_money(value) -> Cell:
    """Dollars, with 4 significant digits below $1 (a small job's cost is not $0.00)."""
    if is_null(value):
        return Cell(NULL, "null")
    v = float(value)
    return Cell(usd(v) if abs(v) >= 1 else f"${v:.4g}", "num")


def share(value) -> Cell:
    return Cell(pct(value), "null" if is_null(value) else "num")


def source_cell(run: RunData) -> Cell:
    """EMULATED with the run's error band (its full text on hover), or measured."""
    if not run.emulated:
        return cell("measured")
    text = (run.fidelity or {}).get("text") or "uncalibrated: no error band recorded"
    label = f"EMULATED ±{100 * run.band:.0f} %" if run.band is not None else "EMULATED (uncalibrated)"
    b = badge(label, "emulated")
    return Cell(f'<span title="{esc(text)}">{b.html}</span>', b.kind)


def status(run: RunData) -> Cell:
    accepted = run.accepted
    if accepted is None:
        return badge("not analyzed", "unknown")
    return badge("accepted", "ok") if accepted else badge("rejected by a gate", "bad")


def no_headline_reason(run: RunData) -> str:
    if run.gates is None:
        return "No headline: the analyzer has not run on this folder (no gates.json)."
    if run.accepted is False:
        return "No headline or cost: a gate failed, so cost rows are withheld (contract §5)."
    return "No headline or cost: the run has no bill (a load-only run)."


def meets(value) -> bool | None:
    """contract §4 meets_slo as read back through pandas: null (no valid step) stays None."""
    return None if value is None or pd.isna(value) else bool(value)


def meets_badge(value) -> Cell:
    m = meets(value)
    if m is None:
        return badge(NOT_MEASURED, "unknown")
    return badge("yes", "ok") if m else badge("meets no step", "bad")


def not_measured_lines(run: RunData) -> list[str]:
    """Each invalid step with its reason, for a run whose headline says "not measured"."""
    if run.metrics is None:
        return []
    rows = run.metrics.astype(object).where(run.metrics.notna(), None).to_dict("records")
    return not_measured(rows, run.manifest)


def headline(run: RunData) -> str:
    if run.headline is None or run.headline.empty:
        return para(no_headline_reason(run))
    rows, classes = [], []
    unmeasured = False
    searched = ("slo_search_capacity" in run.headline
                and run.headline["slo_search_capacity"].notna().any())
    for h in run.headline.itertuples(index=False):
        meets_slo = meets(h.meets_slo)
        unmeasured = unmeasured or meets_slo is None
        rows.append([n(h.slo_ttft_s), n(h.slo_tpot_s), meets_badge(h.meets_slo),
                     cell(h.step), n(h.output_tok_s), n(h.ttft_s_p99), n(h.tpot_s_p99),
                     money(h.cost_per_1m_output_usd), cell(h.bill_status)]
                    + ([n(h.slo_search_capacity), cell(h.slo_search_step),
                        money(h.slo_search_cost_per_1m_output_usd)] if searched else []))
        classes.append("" if meets_slo is not False else "bad")
    out = table(("SLO TTFT (s)", "SLO TPOT (s)", "meets SLO", "step", "output tok/s",
                 "p99 TTFT (s)", "p99 TPOT (s)", "USD / 1M output tok", "bill")
                + (("search capacity", "at step", "SLO cost USD / 1M output tok")
                   if searched else ()), rows, classes)
    if searched:
        out += para("SLO cost: the cost per 1M output tokens at the highest load the SLO "
                    "search found within its own SLO (slo_capacity.json).")
    if unmeasured:
        out += para("Not measured: no step of this run is valid, so there is no SLO verdict "
                    "(not a failure of the hardware). " + "; ".join(not_measured_lines(run)))
    return out


def gates(run: RunData) -> str:
    if run.gates is None:
        return para("No gates.json: the analyzer has not run on this folder.")
    rows = [[cell(g["rule"]), cell(g["name"]), passed_badge(g["passed"]),
             n(g["offending_rows"]), cell(", ".join(map(str, g["examples"] or [])) or None),
             cell(g["message"])] for g in run.gates]
    classes = ["bad" if g["passed"] is False else "" for g in run.gates]
    return table(("rule", "name", "result", "offending rows", "examples", "message"),
                 rows, classes)


def _ordered(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics.sort_values(["load_mode", "target"], kind="stable")


def steps(run: RunData) -> str:
    if run.metrics is None or run.metrics.empty:
        return para("No derived_metrics.parquet: run `servingbench analyze` on this folder.")
    rows, classes = [], []
    for m in _ordered(run.metrics).itertuples(index=False):
        rows.append([cell(m.step), cell(m.load_mode), n(m.target), n(m.n_requests), n(m.n_ok),
                     share(m.error_rate), n(m.achieved_concurrency, digits=3),
                     n(m.output_tok_s), n(m.request_s), n(m.goodput_s), n(m.ttft_s_p50),
                     n(m.ttft_s_p99), n(m.ttft_sched_s_p99), n(m.sched_lag_s_p99),
                     n(m.itl_s_p50), n(m.itl_s_p99), share(m.itl_multi_token_share),
                     n(m.tpot_s_p50), n(m.tpot_s_p99), n(m.e2e_s_p99),
                     badge("valid", "ok") if m.valid else badge("INVALID", "bad")])
        classes.append("" if m.valid else "invalid")
    return table(("step", "mode", "target", "requests", "ok", "errors", "achieved conc.",
                  "output tok/s", "req/s", "goodput/s", "TTFT p50", "TTFT p99",
                  "TTFT from schedule p99", "sched. lag p99", "ITL p50", "ITL p99",
                  "multi-token chunks", "TPOT p50", "TPOT p99", "E2E p99", "valid"),
                 rows, classes) + para("Latencies in seconds, client side, steady phase only.")


def why_invalid(m, manifest_step: dict | None) -> str:
    row = {k: (None if v is None or (not isinstance(v, str) and pd.isna(v)) else v)
           for k, v in m._asdict().items()}
    return step_why(row, manifest_step)


def invalid_steps(run: RunData) -> str:
    if run.metrics is None:
        return para("No derived metrics.")
    bad = _ordered(run.metrics)
    bad = bad[~bad["valid"].fillna(False).astype(bool)]
    if bad.empty:
        return para("Every step is valid.")
    by_name = {s["step"]: s for s in run.manifest.get("steps") or []}
    rows = [[cell(m.step), cell(m.invalid_reason), cell(why_invalid(m, by_name.get(m.step)))]
            for m in bad.itertuples(index=False)]
    return table(("step", "invalid_reason", "why"), rows) + para(
        "Invalid steps stay in every table but are never ranked or used for the headline.")


def _excluded(items) -> str | None:
    if items is None or len(items) == 0:
        return None
    return "; ".join(f"{i['service']} {i['usage_type']} {usd(i['amount'])}" for i in items)


def cost(run: RunData) -> str:
    if run.cost is None or run.cost.empty:
        return para(no_headline_reason(run))
    rows = [[cell(c.step), cell(c.bill_source), cell(c.bill_status), money(c.window_cost_usd),
             n(c.output_tokens), money(c.cost_per_1m_output_usd),
             money(c.cost_per_1m_via_rate_usd), share(c.cross_check_delta),
             cell(c.cross_check_note), cell(", ".join(c.included) if c.included is not None else None),
             cell(_excluded(c.excluded_items))] for c in run.cost.itertuples(index=False)]
    return table(("step", "bill source", "bill status", "window cost", "output tokens",
                  "USD / 1M output tok", "via hourly rate", "cross-check delta", "note",
                  "included", "excluded items (not prorated)"), rows)


def manifest_facts(run: RunData) -> list[tuple[str, object]]:
    m = run.manifest
    pb = m.get("price_basis") or {}
    sc = m.get("scenario") or {}
    return [
        ("run_id", m["run_id"]), ("candidate", m.get("candidate")),
        ("source", source_cell(run)), ("created_at", m["created_at"]),
        ("model", m.get("model")), ("model_revision", m.get("model_revision")),
        ("precision", m.get("precision")), ("tensor_parallel", m.get("tensor_parallel")),
        ("expert_parallel", m.get("expert_parallel")), ("max_model_len", m.get("max_model_len")),
        ("engine", m.get("engine")), ("engine_version", m.get("engine_version")),
        ("image_digest", m.get("image_digest")), ("driver_version", m.get("driver_version")),
        ("instance_type", m.get("instance_type")), ("node_count", m.get("node_count")),
        ("instance_ids", ", ".join(m.get("instance_ids") or []) or None),
        ("region / AZ", f"{m.get('region') or NULL} / {m.get('availability_zone') or NULL}"),
        ("cluster / nodegroup / k8s",
         f"{m.get('cluster_name') or NULL} / {m.get('nodegroup') or NULL} / {m.get('k8s_version') or NULL}"),
        ("scenario", ", ".join(f"{k}={NULL if v is None else v}" for k, v in sc.items()) or None),
        ("price basis", (f"{usd(pb.get('hourly_usd_per_node'))}/node-hour, {pb.get('purchase_option')}, "
                         f"{pb.get('region')}, {pb.get('source')}, retrieved {pb.get('retrieved_on')}")
         if pb else None),
    ]


def manifest(run: RunData) -> str:
    return kv_table(manifest_facts(run)) + para(f"{NULL} = unknown (null in the manifest).")


def phase_seconds(run: RunData) -> dict[str, float]:
    out = {}
    for name, span in (run.manifest.get("phases") or {}).items():
        if span.get("started_at") and span.get("ended_at"):
            out[name] = (parse_ts(span["ended_at"]) - parse_ts(span["started_at"])) / 1e9
    return out


def cold_start(run: RunData) -> str:
    phases = run.manifest.get("phases") or {}
    secs = phase_seconds(run)
    if not phases:
        return para("The manifest records no phases.")
    longest = max(secs.values(), default=0.0) or 1.0
    rows, names = [], [p for p in COLD_START if p in phases]
    for name in names:
        span, dur = phases[name], secs.get(name)
        width = 0 if dur is None else max(0.5, 100 * dur / longest)
        bar = Cell(f'<div class="bar{" sub" if name in DEPLOY_SUB else ""}" '
                   f'style="width:{width:.1f}%"></div>', "barcell")
        label = f"\u2003{name}" if name in DEPLOY_SUB else name
        rows.append([cell(label), cell(span.get("started_at")), cell(span.get("ended_at")),
                     n(dur), bar])
    return table(("phase", "started_at", "ended_at", "seconds", ""), rows) + para(
        "Deploy sub-phases (indented) are part of deploy. Cold start is reported apart "
        "from the steady state and never mixed into its figures.")


def self_watch(run: RunData) -> str:
    st = run.manifest.get("steps") or []
    if not st:
        return para("The manifest lists no steps.")
    rows = [[cell(s.get("step")), cell(s.get("load_mode")), n(s.get("target")),
             badge("yes", "bad") if s.get("client_limited") else cell("no"),
             share(s.get("client_cpu_share")), n(s.get("loop_lag_p99_s"))] for s in st]
    return table(("step", "mode", "target", "client limited", "client CPU share",
                  "event-loop lag p99 (s)"), rows)


def title_line(run: RunData) -> str:
    m = run.manifest
    return (f"{esc(m.get('candidate'))} \u00b7 {esc(m.get('instance_type'))} \u00d7 "
            f"{esc(m.get('node_count'))} \u00b7 {esc(m.get('model'))} \u00b7 "
            f"{esc(m.get('precision'))} \u00b7 TP {esc(m.get('tensor_parallel'))}")


def job(run: RunData) -> str:
    """contract §3.4: a batch job's makespan, throughput and cost over the job window."""
    j = run.job
    if j is None:
        return para("Not a batch run (no job.json).")
    out = table(("requests", "ok", "makespan (s)", "output tokens", "output tok/s (job)",
                 "window cost", "cost per job"),
                [[n(j["requests"]), n(j["ok"]), n(j["makespan_s"]), n(j["output_tokens"]),
                  n(j["output_tok_s"]), small_money(j["window_cost_usd"]),
                  small_money(j["cost_per_job_usd"])]])
    if j["cost_per_job_usd"] is None:
        out += para("No bill behind the job window: no job cost.")
    return out


def slo_search(run: RunData) -> str:
    """contract §3.5: the SLO, each probe in the order it ran, the capacity and its bracket,
    and the SLO cost (the cost per 1M output tokens at capacity, from the headline)."""
    c = run.slo_capacity
    if c is None:
        return para("Not an SLO-search run (no slo_capacity.json).")
    slo = ", ".join(f"{k} \u2264 {num(v)} s" for k, v in c["slo"].items())
    low, high = c["interval"]
    cost = None
    if run.headline is not None and "slo_search_cost_per_1m_output_usd" in run.headline \
            and not run.headline.empty:
        cost = run.headline["slo_search_cost_per_1m_output_usd"].iloc[0]
    facts = [("SLO", slo), ("probed", c["load_mode"]), ("probes", len(c["probes"])),
             ("capacity", Cell(num(c["capacity"]), "num") if c["capacity"] is not None
              else badge("none met the SLO", "bad")),
             ("bracket [met, not met]", f"[{num(low)}, {num(high)}]"),
             ("SLO cost (USD / 1M output tok at capacity)", usd(cost))]
    rows = [[n(i + 1), cell(p["step"]), n(p["target"]),
             badge("valid", "ok") if p["valid"] else badge("INVALID", "bad"),
             badge("met", "ok") if p["met"] else badge("missed", "bad")]
            for i, p in enumerate(c["probes"])]
    return kv_table(facts) + table(("#", "probe step", "target", "valid", "SLO"), rows) + para(
        "Every probe is an ordinary step of the run: it appears in the steps, gates and "
        "cost tables above.")
