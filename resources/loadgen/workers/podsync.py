"""Pods meet before every step, through a shared board (the run's S3 prefix).

A pod (`--worker-index I --worker-count N --start-at T`) has no parent to meet. Its first
step (or warm-up) starts at `--start-at`, as the Job renders it. Before every later step
each pod writes an arrival object to `barrier/<seq>-<label>/` and lists that folder until
every other pod still in the run is there; all of them then take the same start instant,
computed from the same objects (the last arrival plus MARGIN_S), and each maps it onto its
own clock once. So no pod starts step k+1 while another still runs step k: the engine
never serves two steps' load at once, and no step's figures mix scopes.

Never hang. A meeting has a deadline, common to every pod: the previous step's start plus
the bound (`--barrier-timeout`, derived from the plan by default). A pod that has not
written its arrival by then is left behind: the others list once more WINDOW_S after the
deadline (the time any write that finished by the deadline needs to be listed, and room for
the pods' clocks to differ), go on without it for the rest of the run and name it; the
step it was in is marked client-limited (its load was not what was asked). A pod that
arrives past the deadline, or whose arrival was written only after it, does not run the
step late (that would overlap the next one): it stops, its records kept, and says so.
A pod that stops for any reason writes `barrier/gone/<key>`, so the others stop waiting
for it at once. Each pod also writes `barrier/start/<key>` as it starts: a pod that never
started (never scheduled) is given up LATE_START_S after the Job's instant, not at the
first meeting's deadline, and a pod later than that runs nothing. A plan of one step has
no meeting and runs as before (StartAt).

Why this is consistent without a lock: a pod runs a step only if its arrival was written
before the deadline, and every pod decides without an absent one only from a listing made
WINDOW_S after the deadline, which shows every write finished by then. So every pod that
runs a step is among the members every other pod waits for at the next meeting; the pods
agree on the start instant whenever they see the same arrivals (the usual case; two pods
that disagree still run the same step, a little apart, never two different steps).

Arrivals carry everything in their names (`<index>.<name>.<arrival ns>`): one listing per
poll, no read per object, so N pods cost N listings every POLL_S, not N² reads. The board's
calls run in a thread (`asyncio.to_thread`): no request is in flight at a meeting and the
self-watch starts after it, but the flush loop and signal handling go on meanwhile.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass

from servingbench.resources.contract import settings
from servingbench.resources.contract.digits import is_digits
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.loadgen.errors import LeftBehind
from servingbench.resources.loadgen.loops import CANCEL_GRACE_S
from servingbench.resources.loadgen.workers.barriers import StartAt, sleep_until

_now = time.perf_counter_ns
POLL_S = 0.3      # between two listings of a meeting's folder
MARGIN_S = 1.0    # last arrival → start: every pod's next listing (POLL_S + a request) sees it
WINDOW_S = 2.0    # deadline → deciding without the absent: listing lag and clock difference
LIST_RETRY_S = 30.0  # past the decision time, a pod that still cannot list gives up
LATE_START_S = 60.0  # past the Job's instant: later than this, a pod runs nothing at all
COUNT_BOUND_S = 1800.0  # a step bounded by a request count has no length known in advance
SLACK_S = 60.0    # a --duration step: its duration, the drain timeout, the cancel grace, this
# Scales POLL_S, MARGIN_S and WINDOW_S (default 1): for pods on one machine, which share one
# clock and a board that lists every write at once, so their tests need not wait out room
# made for a cluster. The deadlines themselves (`--barrier-timeout`, LATE_START_S) are kept.
SCALE_ENV = "SERVINGBENCH_MEETING_SCALE"
GONE = "gone"
START = "start"
_LABEL = re.compile(r"[^A-Za-z0-9=._-]")


@dataclass(frozen=True)
class Arrival:
    index: int
    name: str
    at_ns: int  # UTC epoch ns, by the arriving pod's clock

    @property
    def key(self) -> str:
        return f"{self.index}.{self.name}.{self.at_ns}"

    @classmethod
    def parse(cls, key: str) -> Arrival | None:
        """An arrival from its object name; None for anything else."""
        parts = key.split(".")
        if len(parts) != 3 or not is_digits(parts[0]) or not is_digits(parts[2]):
            return None
        return cls(int(parts[0]), parts[1], int(parts[2]))


@dataclass(frozen=True)
class Waits:
    """A meeting's fixed waits, in seconds (POLL_S, MARGIN_S, WINDOW_S unless scaled)."""
    poll_s: float = POLL_S
    margin_s: float = MARGIN_S
    window_s: float = WINDOW_S

    @classmethod
    def from_env(cls, environ) -> Waits:
        """The waits scaled by SCALE_ENV; ValueError names the variable."""
        raw = settings.get(SCALE_ENV, environ).strip() or settings.default(SCALE_ENV)
        try:
            k = float(raw)
        except ValueError:
            k = math.nan
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"{SCALE_ENV}={raw[:40]!r}: expected a positive number (default 1)")
        return cls(POLL_S * k, MARGIN_S * k, WINDOW_S * k)


@dataclass(frozen=True)
class Meeting:
    start_ns: int              # UTC epoch ns the next step starts at
    present: frozenset[int]    # the workers that go on
    missing: frozenset[int]    # members left behind here


def meet(members: frozenset[int], arrivals: list[Arrival], gone: set[int], deadline_ns: int,
         now_ns: int, waits: Waits = Waits()) -> Meeting | None:
    """The meeting every pod computes from the same objects, or None while it must wait.

    Everyone expected is there (or gone for good): the start is the last arrival plus
    the margin (MARGIN_S). Not everyone, the window (WINDOW_S) past the deadline: the start
    is the deadline plus the window plus the margin, without the absent. Arrivals of
    non-members, or stamped past the deadline, do not count."""
    came = {a.index: a.at_ns for a in arrivals if a.index in members and a.at_ns <= deadline_ns}
    window, margin = int(waits.window_s * 1e9), int(waits.margin_s * 1e9)
    if not members - came.keys() - gone:
        start = max(came.values(), default=now_ns) + margin
    elif now_ns >= deadline_ns + window:
        start = deadline_ns + window + margin
    else:
        return None
    present = frozenset(came) - gone
    return Meeting(start, present, members - present)


def has_meetings(cfg) -> bool:
    """Whether the plan has a step after the first (the warm-up counts as one): a plan of
    one step has nothing to meet before, and runs as it did without meetings."""
    if cfg.scenario is not None and cfg.scenario.kind != "fixed":
        return True
    warmup = cfg.warmup_requests > 0 or cfg.warmup_duration_s is not None
    return warmup + len(cfg.concurrency) + len(cfg.rates) > 1


def bounds(cfg, barrier_timeout_s: float | None) -> tuple[float, float]:
    """(warm-up, step): how long after a phase or step started the next meeting closes.
    A `--duration` phase cannot outlast its duration, the drain timeout and the cancel
    grace (loops.CANCEL_GRACE_S); one bounded by a request count has no length known in advance."""
    if barrier_timeout_s is not None:
        return barrier_timeout_s, barrier_timeout_s

    def bound(duration_s: float | None) -> float:
        return COUNT_BOUND_S if duration_s is None else \
            duration_s + cfg.drain_timeout_s + CANCEL_GRACE_S + SLACK_S

    return bound(cfg.warmup_duration_s), bound(cfg.duration_s)


class PodSync:
    """A pod's barrier (`LoadLoops.sync`): `--start-at` first, then a meeting before every
    later step over `board` (put(name, bytes), names(folder) -> [name]; OSError on failure)."""

    def __init__(self, board, index: int, count: int, name: str, start_at_ns: int,
                 bound_s: tuple[float, float], waits: Waits = Waits()) -> None:
        self.board, self.index, self.name = board, index, name
        self.waits = waits
        self.start_at_ns = start_at_ns
        self.warmup_bound_s, self.step_bound_s = bound_s
        self.members = frozenset(range(count))
        self.names: dict[int, str] = {index: name}
        self.seq = 0
        self.prev_label: str | None = None
        self.prev_start_ns = start_at_ns
        self.first = StartAt(start_at_ns)  # .late_s: how late the first step started
        self.meetings: list[dict] = []      # what this pod saw at each meeting
        self.left_behind: dict | None = None
        self.started: set[int] | None = None  # the pods that said they started, once final
        self.lost = False  # a pod went missing: every step from then on lacks its share

    @property
    def late_s(self) -> float | None:
        """How late the first step started (the Job's instant had passed)."""
        return self.first.late_s

    def worker(self, i: int) -> str:
        if i in self.names:
            return self.names[i]
        own = str(self.index)
        if self.name.endswith(own):  # pod-<I> / w<I>: the others are named alike
            return self.name[:-len(own)] + str(i)
        return f"worker {i}"

    async def __call__(self, run, label: str) -> int:
        offset = run.clock.offset_ns
        if self.prev_label is None:  # the first step: the Job's instant, late or not
            self.prev_label = label
            await self._announce(run, label)
            return await self.first(run, label)
        if self.lost:  # the step that just ended ran without the lost pods' share too
            _limit(run, self.prev_label)
        if label == "end":  # nothing follows: no step can overlap another
            return _now()
        self.seq += 1
        folder = f"{self.seq:03d}-{_LABEL.sub('_', label)}"
        bound = self.warmup_bound_s if self.prev_label == "warmup" else self.step_bound_s
        deadline = self.prev_start_ns + int(bound * 1e9)
        me = Arrival(self.index, self.name, run.clock.now_utc())
        if me.at_ns > deadline:
            await self._leave(label, f"arrived {(me.at_ns - deadline) / 1e9:.1f} s after the "
                              f"meeting closed ({bound:g} s after the previous step started)")
        error = await self._retry(lambda: self.board.put(f"{folder}/{me.key}", b""), deadline,
                                  run.clock)
        if error is not None or run.clock.now_utc() > deadline:
            why = f"could not write its arrival ({error})" if error else \
                "its arrival was written only after the meeting closed"
            await self._leave(label, why)
        meeting = await self._wait(folder, deadline, run.clock)
        if meeting is None:
            await self._leave(label, f"could not list the meeting ({self._last_error})")
        self._note(run, label, meeting, deadline)
        self.prev_label, self.prev_start_ns = label, meeting.start_ns
        return await sleep_until(meeting.start_ns - offset)

    async def _announce(self, run, label: str) -> None:
        """Say this pod started (`start/`): the others then stop waiting, at the first
        meeting, for a pod that never started, LATE_START_S after the Job's instant rather
        than at the meeting's deadline. A pod later than that runs nothing: the others may
        have gone on without it."""
        closes = self.start_at_ns + int(LATE_START_S * 1e9)
        me = Arrival(self.index, self.name, run.clock.now_utc())
        if me.at_ns > closes:
            await self._leave(label, f"started {(me.at_ns - self.start_at_ns) / 1e9:.1f} s after "
                              f"the Job's instant (more than {LATE_START_S:g} s late)")
        error = await self._retry(lambda: self.board.put(f"{START}/{me.key}", b""), closes,
                                  run.clock)
        if error is not None or run.clock.now_utc() > closes:
            await self._leave(label, f"could not say it started ({error})" if error else
                              "its start was written only after the others stopped waiting")

    async def _retry(self, call, until_ns: int, clock) -> str | None:
        """`call` in a thread until it works (None) or the pod's clock passes `until_ns`."""
        while True:
            try:
                await asyncio.to_thread(call)
                return None
            except OSError as exc:
                error = _say(exc)
            if clock.now_utc() > until_ns:
                return error
            await asyncio.sleep(self.waits.poll_s)

    async def _wait(self, folder: str, deadline: int, clock) -> Meeting | None:
        w = self.waits
        give_up = deadline + int((w.window_s + w.margin_s + LIST_RETRY_S) * 1e9)
        self._last_error = None
        while True:
            try:
                keys = await asyncio.to_thread(self.board.names, folder)
                gone_keys = await asyncio.to_thread(self.board.names, GONE)
            except OSError as exc:
                self._last_error = _say(exc)
                if clock.now_utc() > give_up:
                    return None
                await asyncio.sleep(w.poll_s)
                continue
            arrivals = [a for a in map(Arrival.parse, keys) if a is not None]
            gone = {int(k.split(".")[0]) for k in gone_keys if is_digits(k.split(".")[0])}
            if self.started is None and clock.now_utc() >= self.start_at_ns + int(
                    (LATE_START_S + w.window_s) * 1e9):
                # every start written in time is listed by now; no later one runs anything
                try:
                    self.started = {a.index for a in map(Arrival.parse, await asyncio.to_thread(
                        self.board.names, START)) if a is not None}
                except OSError as exc:
                    self._last_error = _say(exc)
            if self.started is not None:
                gone |= self.members - self.started
            for a in arrivals:
                self.names.setdefault(a.index, a.name)
            meeting = meet(self.members, arrivals, gone, deadline, clock.now_utc(), w)
            if meeting is not None:
                return meeting
            await asyncio.sleep(w.poll_s)

    def _note(self, run, label: str, meeting: Meeting, deadline: int) -> None:
        late = max(0.0, (run.clock.now_utc() - meeting.start_ns) / 1e9)
        self.meetings.append({
            "label": label, "start_at": format_ts(meeting.start_ns),
            "deadline": format_ts(deadline),
            "present": [self.worker(i) for i in sorted(meeting.present)],
            "missing": [self.worker(i) for i in sorted(meeting.missing)], "late_s": round(late, 3)})
        if meeting.missing:
            # the step those pods were in ran without their share: not the load asked for
            self.lost = True
            _limit(run, self.prev_label)
        self.members = meeting.present

    async def _leave(self, label: str, why: str):
        self.left_behind = {"label": label, "reason": why}
        await asyncio.to_thread(self.leave)
        raise LeftBehind(f"worker {self.name} left behind at the meeting before {label}: {why}")

    def leave(self) -> None:
        """Tell the others this pod runs no further step (best effort: they also stop
        waiting at the deadline)."""
        try:
            self.board.put(f"{GONE}/{self.index}.{self.name}", b"")
        except OSError:
            pass


def _say(exc: OSError) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _limit(run, step_name: str | None) -> None:
    """Mark this pod's record of a step client-limited: it ran below the asked load."""
    for step in run.steps:
        if step["step"] == step_name:
            step["client_limited"] = True
