"""What a scenario asks for: one strict object, from the CLI flags or a candidate's YAML.

kinds: `fixed` (the single-request steps of the load config), `multi_turn`, `agentic`,
`trace`, `batch`, `slo_search`. Images (`images`, `image_size`) go with the token targets:
any kind built from them may carry them. Unknown keys and kinds are errors that name the key and suggest
the nearest valid one.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from resources.loadgen.errors import LoadConfigError

KINDS = ("fixed", "multi_turn", "agentic", "trace", "batch", "slo_search")
TRACE_FORMATS = ("mooncake", "azure")
SLO_KEYS = ("ttft_p99_s", "tpot_p99_s")
SEARCH_OVER = ("rate", "concurrency")  # open-loop arrivals per second, or requests in flight
# keys a kind accepts besides `kind` (the token targets and dataset belong to every kind)
COMMON = ("input_tokens", "output_tokens", "dataset", "images", "image_size")
KEYS = {
    "fixed": COMMON,
    "multi_turn": (*COMMON, "turns", "think_time_s"),
    "agentic": (*COMMON, "turns", "think_time_s", "max_context_tokens", "tool_result_tokens"),
    "trace": ("trace", "trace_format", "speedup", "max_requests"),
    "batch": (*COMMON, "requests", "max_in_flight"),
    "slo_search": (*COMMON, "slo", "max_probes", "over", "start_rate", "start_concurrency"),
}
BATCH_INPUT_TOKENS, BATCH_OUTPUT_TOKENS = 4096, 64  # the throughput job: long in, short out
# an agent: a task prompt, short answers (tool calls), a tool result appended every turn,
# until the context reaches Llama 4's usual serving limit
AGENTIC_INPUT_TOKENS, AGENTIC_OUTPUT_TOKENS = 2048, 64
AGENTIC_TURNS, AGENTIC_MAX_CONTEXT, AGENTIC_TOOL_RESULT = 64, 131072, 2048


@dataclass(frozen=True)
class Scenario:
    kind: str = "fixed"
    turns: int = 3
    think_time_s: float = 0.0
    trace: Path | None = None
    trace_format: str | None = None
    speedup: float = 1.0
    max_requests: int | None = None
    requests: int = 64
    max_in_flight: int = 16
    slo: dict[str, float] = field(default_factory=dict)
    max_probes: int = 8
    over: str = "rate"
    start_rate: float = 1.0
    start_concurrency: int = 1
    max_context_tokens: int = AGENTIC_MAX_CONTEXT
    tool_result_tokens: int = AGENTIC_TOOL_RESULT

    def __post_init__(self) -> None:
        check(self)

    def describe(self) -> dict:
        """The manifest's view: only the keys this kind uses."""
        d = asdict(self)
        keep = {k for k in KEYS[self.kind] if k not in COMMON}
        out = {"kind": self.kind, **{k: d[k] for k in sorted(keep)}}
        if out.get("trace") is not None:
            out["trace"] = str(out["trace"])
        return out


def suggest(word: str, choices) -> str:
    near = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _pos_int(where: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise LoadConfigError(f"{where}: must be a positive integer, got {v!r}")


def _pos_num(where: str, v, zero_ok: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or (v == 0 and not zero_ok):
        raise LoadConfigError(f"{where}: must be a {'non-negative' if zero_ok else 'positive'} "
                          f"number, got {v!r}")


def check(s: Scenario, where: str = "scenario") -> None:
    if s.kind not in KINDS:
        raise LoadConfigError(f"{where}.kind: {s.kind!r} is not one of {', '.join(KINDS)}"
                          + suggest(s.kind, KINDS))
    _pos_int(f"{where}.turns", s.turns)
    _pos_num(f"{where}.think_time_s", s.think_time_s, zero_ok=True)
    _pos_num(f"{where}.speedup", s.speedup)
    _pos_int(f"{where}.requests", s.requests)
    _pos_int(f"{where}.max_in_flight", s.max_in_flight)
    _pos_int(f"{where}.max_probes", s.max_probes)
    _pos_num(f"{where}.start_rate", s.start_rate)
    _pos_int(f"{where}.start_concurrency", s.start_concurrency)
    _pos_int(f"{where}.max_context_tokens", s.max_context_tokens)
    _pos_int(f"{where}.tool_result_tokens", s.tool_result_tokens)
    if s.over not in SEARCH_OVER:
        raise LoadConfigError(f"{where}.over: {s.over!r} is not one of {', '.join(SEARCH_OVER)}"
                              + suggest(s.over, SEARCH_OVER))
    if s.max_requests is not None:
        _pos_int(f"{where}.max_requests", s.max_requests)
    if s.kind == "trace":
        if s.trace is None:
            raise LoadConfigError(f"{where}.trace: required for a trace replay (a JSONL or CSV file)")
        if s.trace_format not in TRACE_FORMATS:
            raise LoadConfigError(f"{where}.trace_format: {s.trace_format!r} is not one of "
                              f"{', '.join(TRACE_FORMATS)}" + suggest(s.trace_format, TRACE_FORMATS))
        if not Path(s.trace).is_file():
            raise LoadConfigError(f"{where}.trace: {s.trace} is not a file")
    if s.kind == "slo_search":
        if not s.slo:
            raise LoadConfigError(f"{where}.slo: required, e.g. ttft_p99_s=2,tpot_p99_s=0.1")
        for k, v in s.slo.items():
            if k not in SLO_KEYS:
                raise LoadConfigError(f"{where}.slo: unknown key {k!r}" + suggest(k, SLO_KEYS))
            _pos_num(f"{where}.slo.{k}", v)
        if s.max_probes < 2:
            raise LoadConfigError(f"{where}.max_probes: a search needs at least 2 probes")


def from_mapping(obj: dict, where: str = "scenario") -> tuple[Scenario, dict]:
    """A YAML scenario mapping → (Scenario, the token targets {input_tokens, output_tokens,
    dataset} it sets). Every key is checked against its kind."""
    if not isinstance(obj, dict):
        raise LoadConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    kind = obj.get("kind", "fixed")
    if kind not in KINDS:
        raise LoadConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}"
                          + suggest(kind, KINDS))
    allowed = ("kind", *KEYS[kind])
    for key in obj:
        if key not in allowed:
            other = [k for k, ks in KEYS.items() if key in ks]
            hint = suggest(key, allowed) or (f" (a key of kind {other[0]!r})" if other else "")
            raise LoadConfigError(f"{where}.{key}: unknown key for kind {kind!r}{hint}")
    if "images" in obj and (isinstance(obj["images"], bool) or not isinstance(obj["images"], int)
                            or not 0 <= obj["images"] <= 64):
        raise LoadConfigError(f"{where}.images: expected an integer 0..64, got {obj['images']!r}")
    if obj.get("image_size") is not None:
        from resources.loadgen.images import parse_size

        parse_size(obj["image_size"], f"{where}.image_size")
    fields = {k: v for k, v in obj.items() if k not in COMMON}
    if kind == "agentic":
        fields.setdefault("turns", AGENTIC_TURNS)
    if "trace" in fields and fields["trace"] is not None:
        fields["trace"] = Path(fields["trace"])
    if "slo" in fields and not isinstance(fields["slo"], dict):
        raise LoadConfigError(f"{where}.slo: expected a mapping like {{ttft_p99_s: 2, tpot_p99_s: 0.1}}")
    try:
        scenario = Scenario(**fields)
    except LoadConfigError as exc:
        raise LoadConfigError(str(exc).replace("scenario", where, 1)) from None
    return scenario, {k: obj[k] for k in COMMON if k in obj}


def parse_slo(text: str) -> dict[str, float]:
    """`ttft_p99_s=2,tpot_p99_s=0.1` → {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise LoadConfigError(f"--slo-search: expected KEY=SECONDS, got {part!r}")
        if key not in SLO_KEYS:
            raise LoadConfigError(f"--slo-search: unknown key {key!r}" + suggest(key, SLO_KEYS))
        try:
            out[key] = float(value)
        except ValueError:
            raise LoadConfigError(f"--slo-search: {key}: {value!r} is not a number") from None
    return out
