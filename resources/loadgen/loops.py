"""The load loops: one request sent and recorded whatever happens, closed loop (N always in
flight) and open loop (one absolute arrival schedule), spawn and bounded drain."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable

from servingbench.resources.loadgen import connections, gcpolicy
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.config import LoadConfig, step_name
from servingbench.resources.loadgen.interrupted import CUT, MAX_RESENDS, Notices, may_be_cut
from servingbench.resources.loadgen.model_mix import ModelMix
from servingbench.resources.loadgen.probe import api_url
from servingbench.resources.loadgen.prompts import Item, Prompts
from servingbench.resources.loadgen.recorder import Recorder
from servingbench.resources.loadgen.records import Request, fail
from servingbench.resources.loadgen.selfwatch import InFlight, SelfWatch
from servingbench.resources.loadgen.server_metrics import ServerMetrics
from servingbench.resources.loadgen.workers.share import Share

_now = time.perf_counter_ns
CANCEL_GRACE_S = 5.0
# deferred rows built per pump tick (~15 requests' rows on this machine): short enough that a
# chunk arriving meanwhile is stamped within half a millisecond
PUMP_BUDGET_NS = 500_000
PUMP_TICK_NS = 1_000_000  # the pump's period
PUMP_BUSY_NS = 1_000_000  # a tick this late: the loop is busy, the pump waits a tick
READY_MAX_BYTES = 16 << 20  # request bodies built ahead, at most


class LoadLoops:
    """Sending and recording requests, and the closed- and open-loop drivers: the part of a
    run that talks to the server. Steps, phases and the manifest build on it (steps.py)."""

    def __init__(self, cfg: LoadConfig, recorder: Recorder, prompts: Prompts, clock: Clock,
                 stream_options: dict | None, headers: dict[str, str], secrets: tuple[str, ...],
                 progress) -> None:
        self.cfg, self.rec, self.prompts, self.clock = cfg, recorder, prompts, clock
        self.stream_options, self.headers, self.secrets = stream_options, headers, secrets
        self.progress = progress
        self.url = api_url(cfg)
        # which model each request names when several share the endpoint (model_mix.py)
        self.mix = (ModelMix(cfg.model_mix, cfg.model_bursts, cfg.seed)
                    if cfg.model_mix else None)
        self.tasks: set[asyncio.Task] = set()
        self._pumping = False  # a `_pump` is queued on the loop
        self._pump_at = 0  # when the queued `_pump` is due
        self._ready: deque[tuple[bytes, int | None]] = deque()  # bodies built ahead (`_prepare`)
        self._ready_bytes = 0
        self._ready_target = 0  # how many a closed step keeps ready; 0: none built
        self.emulated = False
        self.steps: list[dict] = []
        self.phases: dict[str, dict] = {}
        self.statuses: Counter = Counter()
        self.mismatch = 0
        self.tokens = 0  # steady output tokens received (a parent's progress line)
        self.watch: SelfWatch | None = None
        self.session: connections.Connections | None = None  # the keep-alive connections
        self.save: Callable[[], None] = lambda: None  # writes the manifest so far
        self.server: ServerMetrics | None = None  # the engine's /metrics around each step
        # the analysis' verdict on a step just run: an SLO search's (valid, met), a ladder's
        # (valid, output tok/s)
        self.judge = None
        self.ladder_stop: str | None = None  # why a ladder stopped where it did
        self.share = Share()  # this process's part of the load (several workers)
        # Several workers: `await sync(run, label)` meets the others before each step and
        # returns the step's common start (perf_counter ns); None: one process, no wait.
        self.sync = None
        self.origin = 0  # the current scenario step's start (perf_counter ns)
        # the run's spot interruption notices (interrupted.py), read when a request is cut
        self.notices = Notices(getattr(recorder, "run_dir", None))

    async def barrier(self, label: str) -> int:
        """Before a step (or the end, `label` "end"): freeze what is alive for the garbage
        collector (gcpolicy), wait for the other workers, if any, and return the instant
        the step starts at, on this process's perf_counter clock."""
        gcpolicy.between_steps()
        return _now() if self.sync is None else await self.sync(self, label)

    # --- one request -----------------------------------------------------------------
    async def _one(self, phase: str, step: str, mode: str, target: float, scheduled: int,
                   expect_in: int | None) -> None:
        body = images = None
        if self._ready:  # built ahead, in the prompts' order, while the loop was idle
            body, images = self._ready.popleft()
            self._ready_bytes -= len(body)
        req = await self.send(phase, step, mode, target, scheduled, None, body=body,
                              images=images, later=True)
        if (req.phase == "steady" and expect_in is not None and req.input_tokens is not None
                and req.input_tokens != expect_in):
            self.mismatch += 1

    async def send(self, phase: str, step: str, mode: str, target: float, scheduled: int,
                   item: Item | None, tag=None, body: bytes | None = None,
                   later: bool = False, images: int | None = None,
                   retry_of: str | None = None, resends: int = 0) -> Request:
        """Send and record one request: `item`, or the next prompt's when None;
        `tag(req)` may mark it first (session, turn, text); `body`, when given, is the request
        body built ahead of its send time (and `item` is not used; `images`: how many images
        it holds). Whatever happens, it is recorded.

        `later`: the recorder builds this request's row later (`Recorder.add_later`, drained
        by `_pump` a slice a millisecond while the loop is not busy, and by every flush), not
        before this call returns. When a closed-loop round ends together, 256 answers finish
        in one round of callbacks and each sends its successor at once; building their rows
        in that same round too (~30 µs each on this machine) made it longer than the 20 ms
        TTFT of the first new requests, whose first chunks then waited for it to end before
        they were stamped. The counts, the progress line and the self-watch see it at once.

        A request a spot interruption cut (its connection died after a notice for its
        replica's node) is recorded `disconnect` with error `spot_interruption`; with
        `retry_interrupted` the same body goes again as a new request (`retry_of` its id),
        and that one is returned. Each is recorded once, under its own id."""
        rid = str(uuid.uuid4())
        req = Request(rid, phase, step, mode, target, scheduled)
        req.retry_of = retry_of
        try:
            if body is None and item is None:
                item = self.prompts.next_item()
            if item is not None and item.images:
                req.input_images = len(item.images)
            elif images:
                req.input_images = images
            if tag is not None:
                tag(req)
            if body is None:
                body = self.prompts.body(item, self.stream_options)
            if self.mix is not None and retry_of is None:  # several models: name the next
                body, req.model = self.mix.apply(body)
            elif self.mix is not None:  # a resend names the model the first attempt named
                req.model = self.mix.model_of(body)
            headers = dict(self.headers)
            headers["X-Request-ID"] = rid
            await connections.send(self.session, self.url, body,
                              headers, req, self.cfg.first_token_timeout_s,
                              self.cfg.total_timeout_s, self.secrets)
        except Exception as exc:  # noqa: BLE001 - a worker never dies silently
            fail(req, exc, self.secrets)
        finally:
            if (may_be_cut(req.status, req.http_status) and req.finished is not None
                    and self.notices.cut(req.replica, self.clock.utc(req.finished))):
                req.error = CUT
            # Also on cancellation: the request is recorded, then the CancelledError
            # goes on and stops its worker.
            self._record(req, later)
        if req.error == CUT and self.cfg.retry_interrupted and resends < MAX_RESENDS:
            return await self.send(phase, step, mode, target, _now(), None, tag=tag, body=body,
                                   later=later, images=req.input_images, retry_of=rid,
                                   resends=resends + 1)
        return req

    def _record(self, req: Request, later: bool = False) -> None:
        if req.emulated:
            self.emulated = True
        if self.watch is not None and req.sent is not None:
            self.watch.sched_lags.append((req.sent - req.scheduled) / 1e9)
        if later:
            self.rec.add_later(req)
            self._wake_pump()
        else:
            self.rec.add(req)
        if req.phase == "steady":
            self.statuses[req.status] += 1
            self.tokens += sum(req.chunk_tokens)
        self.progress.request_done(req)

    def _wake_pump(self) -> None:
        if not self._pumping:
            self._pumping = True
            self._pump_at = _now() + PUMP_TICK_NS
            asyncio.get_running_loop().call_later(PUMP_TICK_NS / 1e9, self._pump)

    def _pump(self) -> None:
        """Build deferred rows for at most PUMP_BUDGET_NS a tick, and only when the loop is
        not busy: a tick that fires late (the loop ran a long round of callbacks, as when a
        closed-loop round ends together and its successors are sent) builds none, so the
        rows never lengthen that stretch. The periodic flush builds whatever is left."""
        now = _now()
        late = now - self._pump_at
        more = True
        if late < PUMP_BUSY_NS:
            more = self.rec.settle(PUMP_BUDGET_NS)
            if not more:
                self._prepare(now + PUMP_BUDGET_NS)
        self._pumping = False
        if more or len(self._ready) < self._ready_target:
            self._wake_pump()

    def _prepare(self, until: int) -> None:
        """Build the next requests' bodies ahead (the pump's idle time, until `until`): a
        closed loop's slots each find theirs ready when a round ends together, ~10 µs of
        the ~60 a send takes. Only for the fixed workload's generated prompts (a dataset or a
        scenario draws its items itself), within READY_MAX_BYTES; taken in the order built,
        so the requests carry the prompts they would have carried."""
        ready, wl = self._ready, self.prompts
        while (len(ready) < self._ready_target and self._ready_bytes < READY_MAX_BYTES
               and _now() < until):
            item = wl.next_item()
            body = wl.body(item, self.stream_options)
            ready.append((body, len(item.images) if item.images else None))
            self._ready_bytes += len(body)

    def spawn(self, coro) -> asyncio.Task:
        return self._spawn(coro)

    async def drain(self, tasks: set[asyncio.Task]) -> None:
        await self._drain(tasks)

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)
        return t

    async def _drain(self, tasks: set[asyncio.Task]) -> None:
        pending = {t for t in tasks if not t.done()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.cfg.drain_timeout_s)
        for t in pending:
            t.cancel()
        if pending:
            # A cancelled request records itself and ends at its next await; the bound
            # only guards against code that never awaits again.
            await asyncio.wait(pending, timeout=CANCEL_GRACE_S)

    def _begin_watch(self, w: SelfWatch) -> None:
        self.watch = w
        w.start()

    def _expect_in(self) -> int | None:
        return None if self.cfg.dataset else self.cfg.input_tokens

    # --- load modes ------------------------------------------------------------------
    async def closed(self, phase: str, c: int, count: int | None, duration_s: float | None) -> InFlight:
        """Step `c=<c>`: this worker's share of the c slots and of the count."""
        name = step_name("concurrency", c)
        slots, count = self.share.concurrency(c), self.share.requests(count, c)
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        issued = 0
        inflight = InFlight(slots)
        if slots == 0 or count == 0:  # fewer slots or requests than workers: none here
            inflight.stop()
            return inflight
        stop_at = None if duration_s is None else _now() + int(duration_s * 1e9)
        timer = loop.call_later(duration_s, done.set) if duration_s is not None else None
        expect = self._expect_in()

        n_workers = slots if count is None else min(slots, count)
        alive = n_workers
        if self.cfg.dataset is None and (self.cfg.scenario is None or self.cfg.scenario.kind == "fixed"):
            self._ready_target = n_workers
            self._wake_pump()

        async def worker() -> None:
            nonlocal issued, alive
            try:
                while not done.is_set():
                    if stop_at is not None and _now() >= stop_at:
                        done.set()
                        break
                    issued += 1
                    if count is not None and issued >= count:
                        done.set()
                    inflight.inc()
                    try:
                        await self._one(phase, name, "concurrency", float(c), _now(), expect)
                    finally:
                        inflight.dec()
                    if asyncio.current_task().cancelling():  # the request recorded it: stop
                        break
            finally:
                # Should the last worker end for any reason, the step ends with it
                # instead of waiting for a count no one is left to reach.
                alive -= 1
                if alive == 0:
                    done.set()

        workers = {self._spawn(worker()) for _ in range(n_workers)}
        await done.wait()
        self._ready_target = 0
        inflight.stop()
        if timer is not None:
            timer.cancel()
        await self._drain(workers)
        return inflight

    async def open(self, phase: str, steps: list[tuple[str, float, int, Iterable[float]]],
                   origin: int, watches: list[SelfWatch] | None = None) -> None:
        """Open loop on one absolute schedule: `origin + offset` for every arrival (this
        worker's arrivals of it). The offsets may be drawn lazily (schedule.py `Drawn`):
        each step's are read once, in order, one at a time."""
        tasks: set[asyncio.Task] = set()
        expect = self._expect_in()
        for k, (name, target, _, offsets) in enumerate(steps):
            if watches is not None:
                self._begin_watch(watches[k])
            for off in self.share.deal_lazily(offsets):
                deadline = origin + int(off * 1e9)
                while (now := _now()) < deadline:
                    await asyncio.sleep((deadline - now) / 1e9)
                t = self._spawn(self._one(phase, name, "rate", target, deadline, expect))
                tasks.add(t)
            if watches is not None:
                await watches[k].stop()
        await self._drain(tasks)
