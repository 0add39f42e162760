"""contract §5: the six gates, as Great Expectations validations over facts computed in DuckDB.

Each gate reports `{rule, name, passed, offending_rows, examples, message}`; `passed` is
None for the bill rules when the run has no bill. A comparison with a null side is left to
rule 1 (GX's column-pair expectations ignore such rows), so nothing is counted twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from servingbench.resources.analysis import gx, sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract import run_files
from servingbench.resources.contract.schemas import PHASES
from servingbench.resources.contract.timestamps import format_ts, parse_ts

# One vocabulary for the six rules: the contract's word (gates.json, the report) and the
# Dagster asset check that enforces it, named as a predicate on the asset it checks.
RULES: dict[int, tuple[str, str]] = {
    1: ("complete", "steady_requests_are_complete"),
    2: ("ordered", "request_timestamps_are_ordered"),
    3: ("phased", "warmup_and_steady_are_separated"),
    4: ("counted", "output_tokens_are_counted"),
    5: ("scoped", "bill_matches_run_scope"),
    6: ("single-source", "bill_has_a_single_source"),
}
NAMES = {rule: name for rule, (name, _) in RULES.items()}
RULE_OF = {name: rule for rule, name in NAMES.items()}
CHECK_NAMES = {rule: check for rule, (_, check) in RULES.items()}
REQUEST_RULES, BILL_RULES = (1, 2, 3, 4), (5, 6)
MAX_EXAMPLES = 5
OK = 'status=="ok"'


@dataclass
class Gate:
    rule: int
    name: str
    passed: bool | None
    offending_rows: int
    examples: list[str] = field(default_factory=list)
    message: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _finish(rule: int, problems: list[tuple[str, set]], keys: pd.Series, extra: int = 0,
            extra_examples: list[str] | None = None, extra_problems: list[str] | None = None) -> Gate:
    """Union the offending `_row`s of every failed check of a rule into one Gate."""
    rows: set[int] = set().union(*(r for _, r in problems)) if problems else set()
    failed = [f"{what} ({len(r)} rows)" for what, r in problems if r] + (extra_problems or [])
    examples = sorted({str(keys.iloc[i]) for i in rows} | set(extra_examples or []))[:MAX_EXAMPLES]
    n = len(rows) + extra
    return Gate(rule, NAMES[rule], n == 0 and not failed, n, examples,
                "passed" if n == 0 and not failed else "; ".join(failed))


def _run(df: pd.DataFrame, checks: list[tuple[str, object]], label: str) -> list[tuple[str, set]]:
    return _run_many(df, [checks], label)[0]


def _run_many(df: pd.DataFrame, groups: list[list[tuple[str, object]]],
              label: str) -> list[list[tuple[str, set]]]:
    """Several rules' checks of one DataFrame in one validation (GX's cost is mostly per
    call and per expectation, not per row), each rule's (what, rows) back in its own list."""
    if df.empty:
        return [[] for _ in groups]
    flat = [c for checks in groups for c in checks]
    outcomes = iter(gx.validate(df, [c for _, c in flat], label))
    return [[(what, set(next(outcomes).rows)) for what, _ in checks] for checks in groups]


def _complete_checks() -> list[tuple[str, object]]:
    E = gx.expectations()
    checks = [(f"{c} missing", E.ExpectColumnValuesToNotBeNull(column=c))
              for c in ("sent_at", "finished_at")]
    checks += [(f"ok request without {c}", E.ExpectColumnValuesToNotBeNull(
                   column=c, row_condition=OK, condition_parser="pandas"))
               for c in ("first_token_at", "last_token_at", "output_tokens")]
    return checks


def complete(facts: pd.DataFrame, problems: list[tuple[str, set]]) -> Gate:
    """`problems`: what the `_complete_checks()` found in `facts` (see request_gates)."""
    return _finish(1, problems, facts["request_id"])


def _ordered_checks() -> list[tuple[str, object]]:
    E = gx.expectations()
    return [("timestamps out of order", E.ExpectColumnValuesToBeNull(column="order_violation")),
            ("chunk times decrease with seq", E.ExpectColumnValuesToBeBetween(
                column="chunks_out_of_order", max_value=0)),
            ("chunk outside [sent_at, finished_at]", E.ExpectColumnValuesToBeBetween(
                column="chunks_outside", max_value=0))]


def ordered(facts: pd.DataFrame, problems: list[tuple[str, set]]) -> Gate:
    """`problems`: what the `_ordered_checks()` found in `facts` (see request_gates)."""
    if problems and problems[0][1]:
        kinds = sorted(set("; ".join(facts["order_violation"].dropna()).split("; ")))
        problems[0] = (f"timestamps out of order: {', '.join(kinds)}", problems[0][1])
    return _finish(2, problems, facts["request_id"])


def phased(facts: pd.DataFrame, chunk_facts: dict | None = None,
           event_facts: dict | None = None) -> Gate:
    """Rule 3. `facts` has one row per request of both logs (sql/phase_facts.sql);
    `chunk_facts` counts the chunk rows with a foreign run_id or no request in either log
    (sql/chunk_phase_facts.sql), each offending chunk row once; `event_facts` the rows of
    events.parquet with a foreign run_id (sql/event_phase_facts.sql; examples: at and kind)."""
    E = gx.expectations()
    checks = [
        ("request_id repeated", E.ExpectColumnValuesToBeUnique(column="request_id")),
        ("phase missing", E.ExpectColumnValuesToNotBeNull(column="phase")),
        ("phase unknown", E.ExpectColumnValuesToBeInSet(column="phase", value_set=list(PHASES))),
        ("phase differs from its log", E.ExpectColumnValuesToBeInSet(
            column="phase_matches_file", value_set=[True])),
        ("steady request sent before the last warm-up request finished",
         E.ExpectColumnPairValuesAToBeGreaterThanB(
             column_A="sent_at", column_B="warmup_end", or_equal=True,
             ignore_row_if="either_value_is_missing")),
        ("request run_id is not the manifest's", E.ExpectColumnValuesToBeInSet(
            column="run_id_matches", value_set=[True])),
    ]
    chunk_facts = chunk_facts or {"offending": 0, "foreign_rows": 0, "orphan_rows": 0,
                                  "examples": []}
    chunk_problems = [f"{what} ({chunk_facts[key]} rows)" for what, key in [
        ("chunk run_id is not the manifest's", "foreign_rows"),
        ("chunk request_id in neither request log", "orphan_rows")] if chunk_facts[key]]
    event_facts = event_facts or {"offending": 0, "examples": []}
    if event_facts["offending"]:
        chunk_problems.append(f"event run_id is not the manifest's ({event_facts['offending']} rows)")
    return _finish(3, _run(facts, checks, "phased"), facts["request_id"],
                   extra=chunk_facts["offending"] + event_facts["offending"],
                   extra_examples=list(chunk_facts["examples"]) + list(event_facts["examples"]),
                   extra_problems=chunk_problems)


def _counted_checks() -> list[tuple[str, object]]:
    E = gx.expectations()
    return [
        ("ok request with output_tokens < 1", E.ExpectColumnValuesToBeBetween(
            column="output_tokens", min_value=1, row_condition=OK, condition_parser="pandas")),
        ("chunk tokens do not sum to output_tokens", E.ExpectColumnPairValuesToBeEqual(
            column_A="output_tokens", column_B="chunk_tokens",
            ignore_row_if="either_value_is_missing",
            row_condition='status=="ok" and output_tokens_source=="usage"',
            condition_parser="pandas")),
    ]


def counted(facts: pd.DataFrame, problems: list[tuple[str, set]]) -> Gate:
    """`problems`: what the `_counted_checks()` found in `facts` (see request_gates)."""
    return _finish(4, problems, facts["request_id"])


def _uncovered(periods: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """Stretches of [start, end] that no billing period covers."""
    gaps, cursor = [], start
    for p_start, p_end in periods:
        if p_start > cursor:
            gaps.append((cursor, min(p_start, end)))
        cursor = max(cursor, p_end)
        if cursor >= end:
            break
    if cursor < end:
        gaps.append((cursor, end))
    return [(a, b) for a, b in gaps if a < b]


def scoped(run: RunFolder) -> Gate:
    m, con = run.manifest, run.con
    E = gx.expectations()
    facts = sqlfiles.query(con, "bill_facts", account_id=m["account_id"], region=m["region"],
                           run_id=m["run_id"], instance_type=m["instance_type"]).to_pandas()
    keys = facts["period_start"].map(lambda t: format_ts(t.value))
    checks = [(f"bill row {what}", E.ExpectColumnValuesToBeInSet(column=col, value_set=[False]))
              for what, col in [("names another account", "other_account"),
                                ("names another region", "other_region"),
                                ("carries another run-id tag value", "other_tag"),
                                ("names another instance type", "other_instance_type"),
                                ("is not in USD", "not_usd")]]
    problems = _run(facts, checks, "scoped")
    steady = m["phases"].get("steady") or {}
    start, end = steady.get("started_at"), steady.get("ended_at")
    if not (start and end and m["instance_type"] and m["node_count"]):
        return _finish(5, problems, keys, extra_problems=[
            "manifest lacks phases.steady, instance_type or node_count: coverage unknown"])
    s_ns, e_ns = parse_ts(start), parse_ts(end)
    # a spot run's instance rows are its SpotUsage usage types (contract §3.8)
    spot = m.get("capacity") == "spot"
    periods = sqlfiles.query(con, "instance_periods", instance_type=m["instance_type"],
                             spot=spot).to_pylist()
    gaps = _uncovered([(p["start_ns"], p["end_ns"]) for p in periods], s_ns, e_ns)
    window = dict(instance_type=m["instance_type"], spot=spot,
                  steady_start=pd.Timestamp(s_ns, tz="UTC"), steady_end=pd.Timestamp(e_ns, tz="UTC"))
    # contract §4: the bounds follow the node timeline of events.parquet; without node
    # events the timeline is the manifest's node_count throughout (one query either way)
    usage = sqlfiles.query(con, "bill_usage", fixed_nodes=run.fixed_nodes, **window).to_pandas()
    if run.node_events:
        bounds = [("usage_missing", "instance-hours below 95 % of ∫ nodes(t) dt over the overlap"),
                  ("usage_outside_scope", "instance-hours above 105 % of the most nodes "
                   "(from their request) × period")]
    else:
        bounds = [("usage_missing", "instance-hours below 95 % of node_count × overlap"),
                  ("usage_outside_scope", "instance-hours above 105 % of node_count × period")]
    bad_periods: dict[str, set] = {}
    for flag, what in bounds:
        hit = usage[usage[flag]]
        if len(hit):
            starts = set(hit["period_start"])
            bad_periods[what] = set(facts.index[facts["period_start"].isin(starts)
                                                & facts["is_instance"]])
    problems += list(bad_periods.items())
    gap_text = [f"steady phase not covered by instance rows from {format_ts(a)} to {format_ts(b)}"
                for a, b in gaps]
    return _finish(5, problems, keys, extra=len(gaps),
                   extra_examples=[format_ts(a) for a, _ in gaps], extra_problems=gap_text)


def single_source(run: RunFolder) -> Gate:
    E = gx.expectations()
    facts = sqlfiles.query(run.con, "bill_facts", account_id=None, region=None, run_id=None,
                           instance_type=None).to_pandas()
    keys = facts["period_start"].map(lambda t: format_ts(t.value))
    if facts.empty:
        return _finish(6, [], keys)
    counts = facts["source"].value_counts(dropna=False)
    common = counts.index[0]
    checks = [(f"bill row source differs from the most common one ({common})",
               E.ExpectColumnValuesToBeInSet(column="source", value_set=[common])),
              # which names a source may take is the billing package's (one file each,
              # resources/billing/), not a list here: a row must only name one
              ("bill row names no source", E.ExpectColumnValuesToNotBeNull(column="source"))]
    return _finish(6, _run(facts, checks, "single_source"), keys)


def no_bill(rule: int) -> Gate:
    return Gate(rule, NAMES[rule], None, 0, [], "no bill")


def request_gates(run: RunFolder) -> list[Gate]:
    """Rules 1-4, on the request logs and the chunk log."""
    facts = sqlfiles.query(run.con, "request_facts").to_pandas()
    run_id = run.manifest["run_id"]
    phases = sqlfiles.query(run.con, "phase_facts", run_id=run_id).to_pandas()
    chunk_facts = sqlfiles.query(run.con, "chunk_phase_facts", run_id=run_id,
                                 max_examples=MAX_EXAMPLES).to_pylist()[0]
    events = sqlfiles.query(run.con, "event_phase_facts", run_id=run_id,
                            max_examples=MAX_EXAMPLES).to_pylist()[0]
    event_facts = {"offending": events["offending"], "examples": [
        f"{format_ts(t) if t is not None else 'null'} {k}"
        for t, k in zip(events["at_ns"], events["kinds"], strict=True)]}
    # rules 1, 2 and 4 read the same per-request facts: one validation for the three
    p1, p2, p4 = _run_many(facts, [_complete_checks(), _ordered_checks(), _counted_checks()],
                           "requests")
    return [complete(facts, p1), ordered(facts, p2), phased(phases, chunk_facts, event_facts),
            counted(facts, p4)]


def bill_gates(run: RunFolder) -> list[Gate]:
    """Rules 5-6, on the bill (reported `passed: None`, "no bill", without one)."""
    if not run.has_bill:
        return [no_bill(5), no_bill(6)]
    return [scoped(run), single_source(run)]


def run_gates(run: RunFolder, done: list[Gate] = ()) -> list[Gate]:
    """All six rules, in order. The rules in `done` were run on this folder already (the
    pipeline's blocking checks, read back from gates.json): they are not run again."""
    have = {g.rule: g for g in done}
    for rules, gates in ((REQUEST_RULES, request_gates), (BILL_RULES, bill_gates)):
        if not all(rule in have for rule in rules):
            have.update((g.rule, g) for g in gates(run))
    return [have[rule] for rule in sorted(RULES)]


# gates.json: the verdicts of one gating, written where they were reached (the pipeline's
# blocking checks each write their own rules; the analysis writes all six) and read by what
# comes after in the same chain run, so each rule is validated once per run. The file's one
# reader and writer are the contract's (contract/run_files.py).


def recorded(run_dir: Path) -> list[Gate]:
    """The gates in `run_dir`'s gates.json; none if it is missing or malformed (the rules
    are then run again)."""
    try:
        doc = run_files.read_gates(run_dir) or []
    except run_files.RunFileError:
        return []
    return [Gate(**d) for d in doc if d["rule"] in RULES]


def record(run_dir: Path, gates: list[Gate]) -> None:
    """Write `gates` into gates.json, keeping the other rules already there, in rule order."""
    mine = {g.rule for g in gates}
    kept = [g for g in recorded(run_dir) if g.rule not in mine]
    run_files.write_gates(run_dir, [g.as_dict() for g in
                                    sorted(kept + list(gates), key=lambda g: g.rule)])
