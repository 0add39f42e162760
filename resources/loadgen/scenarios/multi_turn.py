"""Multi-turn sessions: turn k's prompt is the whole history (every earlier prompt and the
server's actual answer) plus a new user message, so a prefix cache can serve the history.

Closed loop (`c=N`): N sessions run at once, each followed by the next. Open loop
(`rate=R`): sessions *arrive* at R per second. A session's turns never overlap: turn k+1
is scheduled `think_time_s` after turn k finished, and that is its `scheduled_at`. A
failed turn ends its session (its history would be a guess). Each step runs
ceil(requests_per_step / turns) sessions, or as many as start within duration_s.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid

from servingbench.resources.loadgen.config import step_name
from servingbench.resources.loadgen.images import message_content
from servingbench.resources.loadgen.prompts import Item
from servingbench.resources.loadgen.scenarios.kind import Key, Kind, non_neg_num, pos_int
from servingbench.resources.loadgen.schedule import rate_steps
from servingbench.resources.loadgen.selfwatch import InFlight

_now = time.perf_counter_ns

KIND = Kind("multi_turn", order=1, keys={
    "turns": Key(3, pos_int),
    "think_time_s": Key(0.0, non_neg_num),
})


async def session(run, step: str, mode: str, target: float, scheduled: int,
                  inflight: InFlight | None = None) -> None:
    s, chat = run.cfg.scenario, run.cfg.api == "chat"
    sid = str(uuid.uuid4())
    messages: list[dict] = []
    text = ""
    images = 0  # images in the history so far (each turn resends them)
    for turn in range(s.turns):
        user = run.prompts.next_item()
        if chat:
            content = user.prompt
            if user.images:
                content = message_content(user.prompt, run.prompts.image_parts(user.images))
                images += len(user.images)
            messages.append({"role": "user", "content": content})
            item = Item(list(messages), user.output_tokens)
        else:
            text = f"{text} {user.prompt}".strip()
            item = Item(text, user.output_tokens)

        def tag(req, turn=turn, images=images):
            req.session_id, req.turn, req.text = sid, turn, []
            req.input_images = images or None

        if inflight is not None:
            inflight.inc()
        try:
            req = await run.send("steady", step, mode, target, scheduled, item, tag)
        finally:
            if inflight is not None:
                inflight.dec()
        if req.status != "ok":
            return
        answer = "".join(req.text)
        if chat:
            messages.append({"role": "assistant", "content": answer})
        else:
            text += answer
        scheduled = req.finished + int(s.think_time_s * 1e9)
        while (now := _now()) < scheduled:
            await asyncio.sleep((scheduled - now) / 1e9)


async def steady(run) -> None:
    await drive_sessions(run, session)


async def drive_sessions(run, session) -> None:
    """The steady phase of a session scenario (multi-turn, agentic): one closed-loop step per
    concurrency (c sessions in flight) and one open-loop step per rate (session arrivals),
    each session run by `session(run, step, mode, target, scheduled[, inflight])`."""
    cfg, s = run.cfg, run.cfg.scenario
    sessions = math.ceil(cfg.requests_per_step / s.turns) if cfg.requests_per_step else None
    for c in cfg.concurrency:
        await run.run_step(step_name("concurrency", c), "concurrency", float(c),
                           sessions and sessions * s.turns,
                           lambda c=c: _closed(run, session, c, sessions, cfg.duration_s))
    offsets = rate_steps(cfg.rates, cfg.arrival, cfg.seed, sessions, cfg.duration_s)
    for rate, offs in zip(cfg.rates, offsets, strict=True):
        await run.run_step(step_name("rate", rate), "rate", float(rate), len(offs) * s.turns,
                           lambda rate=rate, offs=offs: _open(run, session, rate, offs))


async def _closed(run, session, c: int, sessions: int | None,
                  duration_s: float | None) -> InFlight | None:
    name = step_name("concurrency", c)
    # several workers: this one's share of the slots and sessions (workers/share.py)
    slots, sessions = run.share.concurrency(c), run.share.requests(sessions, c)
    stop_at = None if duration_s is None else _now() + int(duration_s * 1e9)
    started = 0
    inflight = InFlight(slots)

    async def worker() -> None:
        nonlocal started
        while (sessions is None or started < sessions) and (stop_at is None or _now() < stop_at):
            started += 1
            await session(run, name, "concurrency", float(c), _now(), inflight)

    # each session is bounded (turns × the request timeouts), so the step waits for all
    await asyncio.gather(*[run.spawn(worker()) for _ in range(slots)])
    inflight.stop()
    # with think time fewer than c are in flight by design, not because the client lagged
    # (the analyzer's achieved-concurrency rule still reports it): no verdict from it here
    return inflight if run.cfg.scenario.think_time_s == 0 else None


async def _open(run, session, rate: float, offsets: list[float]) -> None:
    name = step_name("rate", rate)
    origin = run.origin  # the step's common start (every worker's)
    tasks = set()
    for off in run.share.deal(offsets):
        deadline = origin + int(off * 1e9)
        while (now := _now()) < deadline:
            await asyncio.sleep((deadline - now) / 1e9)
        tasks.add(run.spawn(session(run, name, "rate", rate, deadline)))
    await asyncio.gather(*tasks)


PLUGIN = KIND  # what this file adds to the scenarios package
