"""`servingbench load`'s workload flags: `--scenario`, `--trace`, `--slo-search`, `--schedule`
(a shape with its keys, or a file of segments) → the Scenario a run drives, and `--ladder`
→ the Ladder it climbs; a LoadConfigError names the flag (and the file and key). The keys'
rules are the workload kinds' own (resources/loadgen/scenarios/spec.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.scenarios.spec import default


def given(**values) -> dict:
    """The flags given (not None): a scenario fills the rest with its kind's defaults."""
    return {k: v for k, v in values.items() if v is not None}


def scenario_from_args(a: argparse.Namespace):
    """The scenario the workload flags ask for (None: plain steps); LoadConfigError names the flag."""
    from servingbench.resources.loadgen.scenarios.spec import Scenario, parse_slo

    asked = [f for f, on in (("--scenario", a.scenario), ("--trace", a.trace),
                             ("--slo-search", a.slo_search), ("--schedule", a.schedule),
                             ("--profile", a.profile)) if on]
    if len(asked) > 1:
        raise LoadConfigError(f"{asked[0]} and {asked[1]}: choose one workload")
    if a.schedule:
        return schedule_from_arg(a.schedule)
    if a.profile:  # a schedule given as its segments, on the command line
        from servingbench.resources.loadgen.scenarios.spec import from_mapping

        segments = [{"duration_s": d, "rate": r} for d, r in a.profile]
        return from_mapping({"kind": "schedule", "segments": segments}, "--profile")[0]
    if a.trace_format and not a.trace:
        raise LoadConfigError("--trace-format: needs --trace FILE")
    if a.trace:
        if not a.trace_format:
            raise LoadConfigError("--trace: needs --trace-format mooncake|azure")
        return Scenario("trace", trace=a.trace, trace_format=a.trace_format,
                        **given(speedup=a.speedup, max_requests=a.max_requests))
    search_flags = [f for f, v in (("--slo-search-over", a.slo_search_over),
                                   ("--start-rate", a.start_rate),
                                   ("--start-concurrency", a.start_concurrency)) if v is not None]
    if search_flags and not a.slo_search:
        raise LoadConfigError(f"{search_flags[0]}: needs --slo-search KEY=SECONDS,...")
    if a.slo_search:
        over = a.slo_search_over or default("slo_search", "over")
        wrong = "--start-rate" if over == "concurrency" else "--start-concurrency"
        if wrong in search_flags:
            raise LoadConfigError(f"{wrong}: not for --slo-search-over {over}")
        return Scenario("slo_search", slo=parse_slo(a.slo_search), over=over,
                        **given(max_probes=a.max_probes, start_rate=a.start_rate,
                                 start_concurrency=a.start_concurrency))
    agentic = [f for f, v in (("--max-context-tokens", a.max_context_tokens),
                              ("--tool-result-tokens", a.tool_result_tokens)) if v is not None]
    if agentic and a.scenario != "agentic":
        raise LoadConfigError(f"{agentic[0]}: needs --scenario agentic")
    # 0 is a value to refuse, not "use the default": only None is left to the kind
    if a.scenario == "multi-turn":
        return Scenario("multi_turn", **given(turns=a.turns, think_time_s=a.think_time_s))
    if a.scenario == "agentic":
        return Scenario("agentic", **given(turns=a.turns, think_time_s=a.think_time_s,
                                            max_context_tokens=a.max_context_tokens,
                                            tool_result_tokens=a.tool_result_tokens))
    if a.scenario == "batch":
        return Scenario("batch", **given(requests=a.requests or None,
                                          max_in_flight=a.max_in_flight))
    return None


DAY_CSV = Path(__file__).resolve().parents[1] / "day_load.csv"  # the shipped 24-hour curve


def schedule_from_arg(text: str):
    """`--schedule FILE|SHAPE[:KEY=VALUE,...]` → a schedule Scenario; LoadConfigError names
    the flag (and the file and key)."""
    from servingbench.resources.contract import yamltext
    from servingbench.resources.loadgen.scenarios.spec import choices, from_mapping, suggest

    SHAPES = choices("schedule", "shape")  # the kind's file names them; spec hands them on

    shape, _, rest = text.partition(":")
    if shape in SHAPES:
        keys: dict = {"shape": shape}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, sep, value = part.partition("=")
            if not sep:
                raise LoadConfigError(f"--schedule: expected KEY=VALUE after {shape}:, got {part!r}")
            try:
                keys[key.strip()] = yamltext.load(value)
            except yamltext.YamlError as exc:
                raise LoadConfigError(f"--schedule: {key.strip()}: {exc}") from None
        if shape == "day":
            keys.setdefault("day_csv", str(DAY_CSV))
        return from_mapping({"kind": "schedule", **keys}, "--schedule")[0]
    path = Path(text)
    if not path.is_file():
        raise LoadConfigError(f"--schedule: {text!r} is neither a file nor a shape "
                              f"({', '.join(SHAPES)})" + suggest(shape, SHAPES))
    try:  # no anchors or aliases: a few hundred bytes of them expand to gigabytes
        obj = yamltext.load(path.read_text())
    except (OSError, UnicodeDecodeError, yamltext.YamlError) as exc:
        raise LoadConfigError(f"--schedule: {path}: not readable YAML "
                              f"({yamltext.short(str(exc), 300)})") from None
    if isinstance(obj, list):  # a bare list of segments
        obj = {"segments": obj}
    if not isinstance(obj, dict):
        raise LoadConfigError(f"--schedule: {path}: expected a mapping of the schedule's keys "
                              "or a list of segments")
    obj = {k: v for k, v in obj.items() if k != "kind"}
    if obj.get("day_csv") is not None and not Path(obj["day_csv"]).is_absolute():
        obj["day_csv"] = str(path.parent / obj["day_csv"])  # beside the file that names it
    return from_mapping({"kind": "schedule", **obj}, f"--schedule {path}")[0]


def ladder_from_args(a: argparse.Namespace):
    """`--ladder 1:2:64[:0.05]` → a Ladder; LoadConfigError names the flag."""
    from servingbench.resources.loadgen.ladder import Ladder

    if a.ladder is None:
        return None
    parts = a.ladder.split(":")
    try:
        numbers = [float(x) for x in parts]
    except ValueError:
        numbers = []
    if len(parts) not in (3, 4) or len(numbers) != len(parts):
        raise LoadConfigError(f"--ladder: expected START:FACTOR:MAX[:MIN_GAIN], got {a.ladder!r}")
    keys = ("start", "factor", "max", "min_gain")
    try:
        return Ladder(a.ladder_over, **dict(zip(keys, numbers, strict=False)))
    except LoadConfigError as exc:
        raise LoadConfigError(f"--ladder: {exc}") from None
