"""Agentic sessions: an agent's loop of short model calls over a context that only grows.

Turn 0 sends the task (`input_tokens`); every later turn appends the model's answer (a tool
call, `output_tokens`, short) and a tool result of `tool_result_tokens`, and asks again. A
session ends after `turns` turns or before its context would pass `max_context_tokens`,
whichever comes first. The history is resent every turn, so a prefix cache can serve all
but the newest tool result, until the sessions' contexts together no longer fit the
server's KV cache: then the cache evicts, hits turn into misses, and TTFT jumps (the
analyzer's TTFT by context length, `ttft_by_context.parquet`, shows where).

Tool results go as user messages wrapped in `<tool_result>`: a `tool` role needs tool-call
ids the load generator cannot invent and some servers (llama.cpp's) refuse it. Loops and
failures are multi-turn's (multi_turn.py): closed loop keeps N sessions going, open loop
starts sessions at the rate, a failed turn ends its session.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from servingbench.resources.loadgen.images import message_content
from servingbench.resources.loadgen.prompts import Item
from servingbench.resources.loadgen.scenarios.kind import Key, Kind, non_neg_num, pos_int
from servingbench.resources.loadgen.scenarios.multi_turn import drive_sessions
from servingbench.resources.loadgen.selfwatch import InFlight

_now = time.perf_counter_ns

# an agent: a task prompt, short answers (tool calls), a tool result appended every turn,
# until the context reaches Llama 4's usual serving limit
KIND = Kind("agentic", order=2, keys={
    "turns": Key(64, pos_int),
    "think_time_s": Key(0.0, non_neg_num),
    "max_context_tokens": Key(131072, pos_int),
    "tool_result_tokens": Key(2048, pos_int),
}, default_targets={"input_tokens": 2048, "output_tokens": 64})


def _fits(s, context: int | None, out: int) -> bool:
    """Whether one more turn fits: its context (the last prompt, the answer and a new tool
    result) plus its answer stays within max_context_tokens."""
    if context is None:
        return True
    return context + out + s.tool_result_tokens + out <= s.max_context_tokens


async def session(run, step: str, mode: str, target: float, scheduled: int,
                  inflight: InFlight | None = None) -> None:
    s, chat = run.cfg.scenario, run.cfg.api == "chat"
    sid = str(uuid.uuid4())
    task = run.prompts.next_item()
    out = task.output_tokens
    tool = run.prompts.filler(s.tool_result_tokens)
    # the task's images (chat only) stay in the history: every turn resends them
    parts = run.prompts.image_parts(task.images) if chat and task.images else []
    messages: list[dict] = [{"role": "user", "content": (
        message_content(task.prompt, parts) if parts else task.prompt)}]
    text = task.prompt if isinstance(task.prompt, str) else ""
    context: int | None = None
    for turn in range(s.turns):
        if turn and not _fits(s, context, out):
            return
        item = Item(list(messages) if chat else text, out)

        def tag(req, turn=turn):
            req.session_id, req.turn, req.text = sid, turn, []
            req.input_images = len(parts) or None

        if inflight is not None:
            inflight.inc()
        try:
            req = await run.send("steady", step, mode, target, scheduled, item, tag)
        finally:
            if inflight is not None:
                inflight.dec()
        if req.status != "ok":
            return
        context = req.input_tokens
        answer = "".join(req.text)
        result = f"<tool_result turn={turn}> {tool} </tool_result>"
        if chat:
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": result}]
        else:
            text = f"{text}{answer}\n{result}\n"
        scheduled = req.finished + int(s.think_time_s * 1e9)
        while (now := _now()) < scheduled:
            await asyncio.sleep((scheduled - now) / 1e9)


async def steady(run) -> None:
    await drive_sessions(run, session)


PLUGIN = KIND  # what this file adds to the scenarios package
