"""Cold-start sub-phases of an engine pod, from what Kubernetes and the engine record.

    scheduling    pod created              → PodScheduled condition
    image_pull    event Pulling            → event Pulled
    weights_load  container started        → engine log "weights loaded" marker
    compile       weights loaded           → engine log "compiled / graphs captured" marker
    ready         last engine marker seen  → Ready condition

Resolution: conditions and core/v1 event timestamps are whole seconds; kubelet log
timestamps are nanoseconds. A phase whose boundary is missing is None (unknown), never
guessed. Engine log markers differ per engine and version; each engine's file lists its
own (model_server/engines/<engine>.py `markers`).
"""

from __future__ import annotations

from servingbench.resources.contract.timestamps import format_ts, parse_ts
from servingbench.resources.model_server import engines

Span = tuple[int, int] | None

MANIFEST_PHASES = ("image_pull", "weights_load", "compile", "ready")


def _ts(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return parse_ts(text)
    except ValueError:
        return None


def _condition(pod: dict, kind: str) -> int | None:
    for c in pod.get("status", {}).get("conditions", []):
        if c.get("type") == kind and c.get("status") == "True":
            return _ts(c.get("lastTransitionTime"))
    return None


def _event(events: list[dict], reason: str, last: bool = False) -> int | None:
    times = sorted(t for e in events if e.get("reason") == reason
                   for t in [_ts(e.get("eventTime") or e.get("firstTimestamp")
                                 or e.get("lastTimestamp"))] if t is not None)
    if not times:
        return None
    return times[-1] if last else times[0]


def _log_marker(lines: list[str], markers: tuple[str, ...]) -> int | None:
    """Time of the first log line containing a marker (`<RFC 3339 ns> <text>` lines)."""
    for line in lines:
        stamp, _, text = line.partition(" ")
        if any(m in text for m in markers):
            return _ts(stamp)
    return None


def _span(start: int | None, end: int | None) -> Span:
    return (start, end) if start is not None and end is not None and start <= end else None


def cold_start_phases(pod: dict, events: list[dict], log_lines: list[str],
                      engine: str) -> dict[str, Span]:
    """Sub-phases of one pod's cold start; unknown spans are None."""
    markers = engines.get(engine).markers
    created = _ts(pod.get("metadata", {}).get("creationTimestamp"))
    started = None
    for cs in pod.get("status", {}).get("containerStatuses", []):
        started = _ts((cs.get("state", {}).get("running") or {}).get("startedAt")) or started
    started = started or _event(events, "Started")
    weights = _log_marker(log_lines, markers["weights_loaded"])
    compiled = _log_marker(log_lines, markers["compiled"])
    ready = _condition(pod, "Ready")
    return {
        "scheduling": _span(created, _condition(pod, "PodScheduled")),
        "image_pull": _span(_event(events, "Pulling"), _event(events, "Pulled", last=True)),
        "weights_load": _span(started, weights),
        "compile": _span(weights, compiled),
        "ready": _span(compiled or weights, ready),
    }


def manifest_phases(phases: dict[str, Span]) -> dict[str, dict[str, str]]:
    """The known sub-phases in the run manifest's `phases` shape (contract §2.1)."""
    return {name: {"started_at": format_ts(span[0]), "ended_at": format_ts(span[1])}
            for name in MANIFEST_PHASES if (span := phases.get(name)) is not None}
