"""One request's raw observations, as the hot path fills them and the recorder writes them.

Times are `perf_counter_ns`; the recorder maps them to UTC (clock.py)."""

from __future__ import annotations

import time

from servingbench.resources.contract.redact import short_error

_now = time.perf_counter_ns


class Request:
    """One request's raw observations (perf_counter ns); the recorder maps them to UTC."""

    __slots__ = (
        "request_id", "phase", "step", "load_mode", "target", "scheduled", "sent", "finished",
        "input_tokens", "usage_total", "usage_cum", "no_usage_content", "chunk_at", "chunk_tokens",
        "status", "http_status", "error", "emulated",
        "session_id", "turn", "cached_tokens", "text",
        "chunk_reasoning", "reasoning_usage", "input_images", "replica", "retry_of",
        "model",
    )

    def __init__(self, request_id: str, phase: str, step: str, load_mode: str, target: float,
                 scheduled: int) -> None:
        self.request_id, self.phase, self.step = request_id, phase, step
        self.load_mode, self.target, self.scheduled = load_mode, target, scheduled
        self.sent = self.finished = None
        self.input_tokens = self.usage_total = None
        self.usage_cum = 0
        self.no_usage_content = False
        self.chunk_at: list[int] = []
        self.chunk_tokens: list[int] = []
        self.status = "cancelled"
        self.http_status = self.error = None
        self.emulated = False
        self.session_id: str | None = None
        self.turn: int | None = None
        self.cached_tokens: int | None = None
        # multi-turn sessions need the answer's text for the next turn's history; None
        # keeps the hot path free of JSON decoding for every other workload
        self.text: list[str] | None = None
        # reasoning models: one byte per chunk (1: a reasoning delta), None until the first
        # reasoning chunk; and the server's usage.completion_tokens_details.reasoning_tokens
        self.chunk_reasoning: bytearray | None = None
        self.reasoning_usage: int | None = None
        self.input_images: int | None = None  # images sent in the prompt
        # the replica that served it, as the load balancer's response header names it
        self.replica: str | None = None
        # the request this one sends again after a spot interruption cut it (contract §2.2)
        self.retry_of: str | None = None
        self.model: str | None = None  # the model it named (several models, model_mix.py)

    # --- derived at record time -------------------------------------------------------
    @property
    def output_tokens_source(self) -> str:
        return "chunks" if self.no_usage_content or self.usage_total is None else "usage"

    @property
    def output_tokens(self) -> int | None:
        if self.output_tokens_source == "usage":
            return self.usage_total
        return len(self.chunk_at) if self.chunk_at or self.status == "ok" else None

    @property
    def reasoning_tokens_total(self) -> int | None:
        """contract §2.2: the server's count, else the reasoning chunks' tokens, else null."""
        if self.reasoning_usage is not None:
            return self.reasoning_usage
        flags = self.chunk_reasoning
        if flags is None:
            return None
        return sum(t for t, r in zip(self.chunk_tokens, flags, strict=False) if r)

    @property
    def first_answer_at(self) -> int | None:
        """The first chunk carrying answer (not reasoning) tokens; without reasoning, the
        first chunk."""
        flags = self.chunk_reasoning
        if flags is None:
            return self.chunk_at[0] if self.chunk_at else None
        i = flags.find(0)
        return self.chunk_at[i] if 0 <= i < len(self.chunk_at) else None


def fail(req: Request, exc: BaseException, secrets: tuple[str, ...] = ()) -> None:
    """Record an unexpected exception as a protocol_error (the worker goes on)."""
    now = _now()
    if req.sent is None:
        req.sent = now
    req.finished = now
    req.status = "protocol_error"
    req.error = short_error(f"unexpected {type(exc).__name__}: {exc}", secrets)

