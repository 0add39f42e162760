"""`run_load`: warm-up, then the steady steps, recorded incrementally into a run folder."""

from __future__ import annotations

import asyncio
import os
import secrets as _secrets
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from resources.contract import manifest as mf
from resources.loadgen import client
from resources.loadgen.clock import Clock
from resources.loadgen.config import ConfigError, LoadConfig, step_name
from resources.loadgen.errors import LoadError, RunExistsError
from resources.loadgen.probe import api_url, probe
from resources.loadgen.progress import make_progress
from resources.loadgen.recorder import Recorder, refuse_existing
from resources.loadgen.scenarios.drive import scenario_steady
from resources.loadgen.schedule import profile_schedule, rate_steps
from resources.loadgen.selfwatch import InFlight, SelfWatch
from resources.loadgen.server_metrics import Scraper, ServerMetrics
from resources.loadgen.workload import Item, Tokenizer, Workload

_now = time.perf_counter_ns
FLUSH_S = 0.25
CANCEL_GRACE_S = 5.0


@dataclass
class LoadResult:
    run_id: str
    run_dir: Path
    source: str
    n_requests: int  # steady requests recorded
    n_warmup: int
    steps: list[dict]  # the manifest's steps[]
    statuses: dict[str, int] = field(default_factory=dict)  # steady requests per status
    prompt_token_mismatches: int = 0  # steady requests whose usage.prompt_tokens != the target
    interrupted: bool = False


def _run_id(clock: Clock) -> str:
    stamp = mf.format_ts(clock.now_utc())[:19].replace("-", "").replace(":", "")
    return f"{stamp}Z-load-{_secrets.token_hex(2)}"


class _Run:
    def __init__(self, cfg: LoadConfig, recorder: Recorder, workload: Workload, clock: Clock,
                 stream_options: dict | None, headers: dict[str, str], secrets: tuple[str, ...],
                 progress) -> None:
        self.cfg, self.rec, self.wl, self.clock = cfg, recorder, workload, clock
        self.stream_options, self.headers, self.secrets = stream_options, headers, secrets
        self.progress = progress
        self.url = api_url(cfg)
        self.tasks: set[asyncio.Task] = set()
        self.emulated = False
        self.steps: list[dict] = []
        self.phases: dict[str, dict] = {}
        self.statuses: Counter = Counter()
        self.mismatch = 0
        self.watch: SelfWatch | None = None
        self.session: aiohttp.ClientSession | None = None
        self.save: Callable[[], None] = lambda: None  # writes the manifest so far
        self.server: ServerMetrics | None = None  # the engine's /metrics around each step
        self.judge = None  # SLO search: (run_dir, step) -> (valid, met), from the analysis

    # --- one request -----------------------------------------------------------------
    async def _one(self, phase: str, step: str, mode: str, target: float, scheduled: int,
                   expect_in: int | None) -> None:
        req = await self.send(phase, step, mode, target, scheduled, None)
        if (req.phase == "steady" and expect_in is not None and req.input_tokens is not None
                and req.input_tokens != expect_in):
            self.mismatch += 1

    async def send(self, phase: str, step: str, mode: str, target: float, scheduled: int,
                   item: Item | None, tag=None) -> client.Request:
        """Send and record one request: `item`, or the workload's next one when None;
        `tag(req)` may mark it first (session, turn, text). Whatever happens, it is recorded."""
        rid = str(uuid.uuid4())
        req = client.Request(rid, phase, step, mode, target, scheduled)
        try:
            if tag is not None:
                tag(req)
            if item is None:
                item = self.wl.next_item()
            headers = dict(self.headers)
            headers["X-Request-ID"] = rid
            await client.send(self.session, self.url, self.wl.body(item, self.stream_options),
                              headers, req, self.cfg.first_token_timeout_s,
                              self.cfg.total_timeout_s, self.secrets)
        except Exception as exc:  # noqa: BLE001 - a worker never dies silently
            client.fail(req, exc, self.secrets)
        finally:
            # Also on cancellation: the request is recorded, then the CancelledError
            # goes on and stops its worker.
            self._record(req)
        return req

    def _record(self, req: client.Request) -> None:
        if req.emulated:
            self.emulated = True
        if self.watch is not None and req.sent is not None:
            self.watch.sched_lags.append((req.sent - req.scheduled) / 1e9)
        self.rec.add(req)
        if req.phase == "steady":
            self.statuses[req.status] += 1
        self.progress.request_done(req)

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

    def _expect_in(self) -> int | None:
        return None if self.cfg.dataset else self.cfg.input_tokens

    # --- load modes ------------------------------------------------------------------
    async def closed(self, phase: str, c: int, count: int | None, duration_s: float | None) -> InFlight:
        name = step_name("concurrency", c)
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        issued = 0
        inflight = InFlight()
        stop_at = None if duration_s is None else _now() + int(duration_s * 1e9)
        timer = loop.call_later(duration_s, done.set) if duration_s is not None else None
        expect = self._expect_in()

        n_workers = c if count is None else min(c, count)
        alive = n_workers

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
        inflight.stop()
        if timer is not None:
            timer.cancel()
        await self._drain(workers)
        return inflight

    async def open(self, phase: str, steps: list[tuple[str, float, int, list[float]]],
                   origin: int, watches: list[SelfWatch] | None = None) -> None:
        """Open loop on one absolute schedule: `origin + offset` for every arrival."""
        tasks: set[asyncio.Task] = set()
        expect = self._expect_in()
        for k, (name, target, _, offsets) in enumerate(steps):
            if watches is not None:
                self._begin_watch(watches[k])
            for off in offsets:
                deadline = origin + int(off * 1e9)
                while (now := _now()) < deadline:
                    await asyncio.sleep((deadline - now) / 1e9)
                t = self._spawn(self._one(phase, name, "rate", target, deadline, expect))
                tasks.add(t)
            if watches is not None:
                await watches[k].stop()
        await self._drain(tasks)

    async def run_step(self, name: str, mode: str, target: float, expected: int | None,
                       drive) -> None:
        """One steady step of a scenario: `await drive()` sends its requests (and may return
        the InFlight of a closed loop); progress, self-watch, server counts and the manifest
        are handled here as for the built-in steps."""
        self.progress.step_start(name, expected)
        w = SelfWatch()
        before = await self._scrape()
        self._begin_watch(w)
        inflight = await drive()
        await w.stop()
        await self._scrape_end([name], before)
        self._record_step(name, mode, target, w, inflight)

    def _begin_watch(self, w: SelfWatch) -> None:
        self.watch = w
        w.start()

    def _record_step(self, name: str, mode: str, target: float, w: SelfWatch,
                     inflight: InFlight | None) -> None:
        limited, why = w.verdict(mode, target, inflight.mean() if inflight else None)
        self.steps.append({
            "step": name, "load_mode": mode, "target": float(target), "client_limited": limited,
            "client_cpu_share": None if w.cpu_share is None else round(w.cpu_share, 4),
            "loop_lag_p99_s": None if w.loop_lag_p99_s is None else round(w.loop_lag_p99_s, 6),
        })
        self.progress.step_end(name, why)
        self.save()

    # --- phases ----------------------------------------------------------------------
    async def warmup(self) -> None:
        cfg = self.cfg
        if cfg.warmup_requests == 0 and cfg.warmup_duration_s is None:
            return
        start = self.clock.now_utc()
        count = cfg.warmup_requests if cfg.warmup_requests > 0 else None
        self.progress.step_start(f"warm-up c={cfg.warmup_concurrency}", count)
        await self.closed("warmup", cfg.warmup_concurrency, count, cfg.warmup_duration_s)
        self.progress.step_end(f"warm-up c={cfg.warmup_concurrency}", [])
        self.phases["warmup"] = {"started_at": mf.format_ts(start),
                                 "ended_at": mf.format_ts(self.clock.now_utc())}
        self.save()

    async def steady(self) -> None:
        cfg = self.cfg
        start = self.clock.now_utc()
        self.phases["steady"] = {"started_at": mf.format_ts(start), "ended_at": None}
        self.save()
        if cfg.scenario is not None and cfg.scenario.kind != "fixed":
            await scenario_steady(self)
            self.phases["steady"]["ended_at"] = mf.format_ts(self.clock.now_utc())
            return
        for c in cfg.concurrency:
            name = step_name("concurrency", c)
            self.progress.step_start(name, cfg.requests_per_step)
            w = SelfWatch()
            before = await self._scrape()
            self._begin_watch(w)
            inflight = await self.closed("steady", c, cfg.requests_per_step, cfg.duration_s)
            await w.stop()
            await self._scrape_end([name], before)
            self._record_step(name, "concurrency", c, w, inflight)
        schedules = rate_steps(cfg.rates, cfg.arrival, cfg.seed, cfg.requests_per_step, cfg.duration_s)
        for rate, offsets in zip(cfg.rates, schedules, strict=True):
            name = step_name("rate", rate)
            self.progress.step_start(name, len(offsets))
            w = SelfWatch()
            before = await self._scrape()
            await self.open("steady", [(name, rate, 0, offsets)], _now(), [w])
            await self._scrape_end([name], before)
            self._record_step(name, "rate", rate, w, None)
        if cfg.profile:
            segs = [(step_name("rate", r), r, 0, offs)
                    for _, r, offs in profile_schedule(cfg.profile, cfg.arrival, cfg.seed)]
            watches = [SelfWatch() for _ in segs]
            self.progress.step_start("profile " + " → ".join(n for n, *_ in segs),
                                     sum(len(s[3]) for s in segs))
            # one arrival schedule across segments: the server's counts cover the whole
            # profile (requests overlap segment boundaries), compared with their sum
            before = await self._scrape()
            await self.open("steady", segs, _now(), watches)
            await self._scrape_end([name for name, _, _, offs in segs if offs], before)
            for (name, rate, _, offs), w in zip(segs, watches, strict=True):
                if offs:
                    self._record_step(name, "rate", rate, w, None)
        self.phases["steady"]["ended_at"] = mf.format_ts(self.clock.now_utc())

    async def _scrape(self) -> tuple[dict | None, str | None] | None:
        return None if self.server is None else await self.server.begin()

    async def _scrape_end(self, names: list[str], before) -> None:
        if self.server is not None and names:
            await self.server.end(names, before)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self.rec.flush()
            self.progress.tick()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C too: a Python-level SIGINT handler (Dagster installs one) would raise
            # inside a transport callback, where the loop logs it and runs on
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, me.cancel)
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=120, ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.cfg.connect_timeout_s)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout, read_bufsize=1 << 20,
                                         auto_decompress=False,
                                         trace_configs=[client.trace_config()]) as self.session:
            flusher = loop.create_task(self._flush_loop())
            try:
                await self.warmup()
                await self.steady()
            finally:
                pending = [t for t in self.tasks if not t.done()]
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                flusher.cancel()
                self.rec.flush()
                if threading.current_thread() is threading.main_thread():
                    for sig in (signal.SIGTERM, signal.SIGINT):
                        loop.remove_signal_handler(sig)


def _presize(workload: Workload) -> None:
    """Size every prompt length the run will ask for now, before any step: a `/tokenize`
    call is blocking, and one in the middle of a step would stall every request in flight."""
    if workload.dataset is None:
        workload.filler(workload.cfg.input_tokens)
        return
    for target in sorted({r["input_tokens"] for r in workload.dataset if "prompt" not in r}):
        workload.filler(target)


def _check_profile(cfg: LoadConfig) -> None:
    seen = [r for _, r in cfg.profile if r > 0] + list(cfg.rates)
    if len(set(seen)) != len(seen):
        raise ConfigError("rates/profile: each non-zero rate may appear once (step names must be unique)")


def _manifest(run_dir: Path, base: dict | None, run_id: str | None, clock: Clock) -> dict:
    path = run_dir / "manifest.json"
    if path.exists():
        return mf.load(path)
    if base is not None:
        m = mf.empty(base.get("run_id") or run_id or _run_id(clock), base.get("source") or "measured",
                     clock.now_utc())
        m.update({k: v for k, v in base.items() if v is not None})
        return mf.validate(m)
    return mf.empty(run_id or _run_id(clock), "measured", clock.now_utc())


class _SavedSignals:
    """The process's SIGTERM/SIGINT handlers and wakeup fd, put back when a run ends.

    The event loop installs its own for the run, and on closing resets them to the
    defaults, not to what was there: without this, a caller's handler (Dagster's, a
    CLI's teardown) would be gone for the rest of the process.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.main = threading.current_thread() is threading.main_thread()
        self.handlers = {s: signal.getsignal(s) for s in self.SIGNALS} if self.main else {}
        self.wakeup_fd = -1
        if self.main:
            self.wakeup_fd = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(self.wakeup_fd)

    def restore(self) -> None:
        if not self.main:
            return
        for sig, handler in self.handlers.items():
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(sig, handler)
        signal.set_wakeup_fd(self.wakeup_fd)


def _runner():
    try:
        import uvloop
        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return asyncio.Runner()


def run_load(cfg: LoadConfig, run_dir: Path, manifest_base: dict | None = None,
             progress: bool | Callable[[dict], None] = True, judge=None) -> LoadResult:
    """Drive `cfg.endpoint` and write a contract §6 run folder (no bill) into `run_dir`.

    Raises RunExistsError when `run_dir` already holds request logs, LoadError when the
    endpoint cannot be used, ConfigError / ManifestError for bad input. An interrupted
    run (SIGINT/SIGTERM) still finalizes its records and manifest, then re-raises.
    """
    run_dir = Path(run_dir)
    refuse_existing(run_dir)
    _check_profile(cfg)
    if cfg.scenario is not None and cfg.scenario.kind == "slo_search" and judge is None:
        raise ConfigError("scenario slo_search: needs a judge (the analysis decides what met the SLO)")
    clock = Clock.start()
    m = _manifest(run_dir, manifest_base, cfg.run_id, clock)
    secrets: tuple[str, ...] = ()
    headers = {"Content-Type": "application/json"}
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise ConfigError(f"api_key_env: environment variable {cfg.api_key_env} is not set or empty")
        headers["Authorization"] = f"Bearer {key}"
        secrets = (key,)
    stream_options, emulated = probe(cfg, headers, secrets)
    workload = Workload(cfg, Tokenizer(cfg.base_url, cfg.model, dict(headers), cfg.use_tokenize))
    _presize(workload)
    recorder = Recorder(run_dir, m["run_id"], clock)
    run = _Run(cfg, recorder, workload, clock, stream_options, {**headers, **cfg.headers},
               secrets, make_progress(progress))
    base_phases = dict(m["phases"])

    def save(final: bool = False) -> None:
        # Written at every phase and step boundary, so a run killed mid-way still has a
        # valid manifest beside its partial records; `ended_at` stays null until known.
        if emulated or run.emulated:
            m["source"] = "emulated"
        if m.get("model") is None:
            m["model"] = cfg.model
        m["scenario"] = workload.scenario(stream_options)
        phases = dict(base_phases)
        for name, span in run.phases.items():
            end = span["ended_at"] or (mf.format_ts(clock.now_utc()) if final else None)
            phases[name] = {"started_at": span["started_at"], "ended_at": end}
        m["phases"] = phases
        m["steps"] = list(run.steps)
        mf.dump(m, run_dir / "manifest.json")

    run.save = save
    run.judge = judge
    run.server = ServerMetrics(run_dir, Scraper(cfg.base_url, headers, secrets))
    save()
    interrupted = False
    saved = _SavedSignals()
    try:
        with _runner() as runner:
            runner.run(run.main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    finally:
        saved.restore()
        recorder.finalize()
        run.progress.close()
        save(final=True)
    result = LoadResult(
        run_id=m["run_id"], run_dir=run_dir, source=m["source"],
        n_requests=recorder.counts["steady_state_request_log"], n_warmup=recorder.counts["warmup_log"],
        steps=run.steps, statuses=dict(run.statuses), prompt_token_mismatches=run.mismatch,
        interrupted=interrupted,
    )
    if interrupted:
        raise KeyboardInterrupt
    return result


__all__ = ["LoadError", "LoadResult", "RunExistsError", "run_load"]
