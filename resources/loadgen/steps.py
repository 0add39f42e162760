"""A run's phases and steps on top of the load loops: warm-up, the steady steps (closed,
open, or a scenario's), the self-watch verdict and the engine's counters around
each step, the periodic flush, and the event loop's signal handling. `drive` runs one on
its own event loop, the one way a run and a worker of several share."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from servingbench.resources.contract import durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import connections, gcpolicy
from servingbench.resources.loadgen.config import step_name
from servingbench.resources.loadgen.errors import DiskFullError, LeftBehind
from servingbench.resources.loadgen.loops import PUMP_BUDGET_NS, LoadLoops
from servingbench.resources.loadgen.recorder import Recorder
from servingbench.resources.loadgen.scenarios.drive import scenario_steady
from servingbench.resources.loadgen.schedule import rate_steps
from servingbench.resources.loadgen.selfwatch import InFlight, SelfWatch
from servingbench.resources.loadgen.signals import SavedSignals, event_loop_runner

FLUSH_S = 0.25


class Run(LoadLoops):
    """One load run: what `run_load` drives and the scenarios step through."""

    # (name, load_mode, target) of the steady step under way: a step a full disk cuts short
    # is still listed in steps[], flagged client_limited (its load was never fully sent)
    current: tuple[str, str, float] | None = None

    async def run_step(self, name: str, mode: str, target: float, expected: int | None,
                       drive) -> None:
        """One steady step of a scenario: `await drive()` sends its requests (and may return
        the InFlight of a closed loop); progress, self-watch, server counts and the manifest
        are handled here as for the built-in steps."""
        self.progress.step_start(name, expected)
        self.current = (name, mode, target)
        w = SelfWatch()
        before = await self._scrape()
        self.origin = await self.barrier(name)
        self._begin_watch(w)
        inflight = await drive()
        await w.stop()
        await self._scrape_end([name], before)
        self._record_step(name, mode, target, w, inflight)

    def _record_step(self, name: str, mode: str, target: float, w: SelfWatch,
                     inflight: InFlight | None) -> None:
        # a worker of several is judged on the slots it kept, not on the whole step's c
        kept = inflight.target if inflight is not None and inflight.target is not None else target
        limited, why = w.verdict(mode, kept, inflight.mean() if inflight else None)
        self.current = None
        self.steps.append({
            "step": name, "load_mode": mode, "target": float(target), "client_limited": limited,
            "client_cpu_share": None if w.cpu_share is None else round(w.cpu_share, 4),
            "loop_lag_p99_s": None if w.loop_lag_p99_s is None else round(w.loop_lag_p99_s, 6),
        })
        self.progress.step_end(name, why)
        self.save()

    def _record_cut(self) -> None:
        """The step under way stopped before its end (a full disk): listed, client-limited,
        with no self-watch figures (the watch never finished). Its rows stay in the logs;
        without an entry they would read as a valid step."""
        cut = [self.current] if self.current is not None else []
        self.current = None
        for name, mode, target in cut:
            self.steps.append({"step": name, "load_mode": mode, "target": float(target),
                               "client_limited": True, "client_cpu_share": None,
                               "loop_lag_p99_s": None})

    # --- phases ----------------------------------------------------------------------
    async def warmup(self) -> None:
        cfg = self.cfg
        if cfg.warmup_requests == 0 and cfg.warmup_duration_s is None:
            return
        await self.barrier("warmup")
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
        if cfg.scenario is not None and cfg.scenario.kind != "fixed" or cfg.ladder is not None:
            if cfg.ladder is not None:
                from servingbench.resources.loadgen.ladder_steps import steady as ladder_steady

                await ladder_steady(self)
            else:
                await scenario_steady(self)
            self.phases["steady"]["ended_at"] = mf.format_ts(self.clock.now_utc())
            return
        for c in cfg.concurrency:
            name = step_name("concurrency", c)
            self.progress.step_start(name, cfg.requests_per_step)
            self.current = (name, "concurrency", c)
            w = SelfWatch()
            before = await self._scrape()
            await self.barrier(name)
            self._begin_watch(w)
            inflight = await self.closed("steady", c, cfg.requests_per_step, cfg.duration_s)
            await w.stop()
            await self._scrape_end([name], before)
            self._record_step(name, "concurrency", c, w, inflight)
        schedules = rate_steps(cfg.rates, cfg.arrival, cfg.seed, cfg.requests_per_step, cfg.duration_s)
        for rate, offsets in zip(cfg.rates, schedules, strict=True):
            name = step_name("rate", rate)
            self.progress.step_start(name, len(offsets))
            self.current = (name, "rate", rate)
            w = SelfWatch()
            before = await self._scrape()
            origin = await self.barrier(name)
            await self.open("steady", [(name, rate, 0, offsets)], origin, [w])
            await self._scrape_end([name], before)
            self._record_step(name, "rate", rate, w, None)
        self.phases["steady"]["ended_at"] = mf.format_ts(self.clock.now_utc())

    async def _scrape(self) -> tuple[dict | None, str | None] | None:
        return None if self.server is None else await self.server.begin()

    async def _scrape_end(self, names: list[str], before) -> None:
        if self.server is not None and names:
            await self.server.end(names, before)

    async def _flush_loop(self, main: asyncio.Task) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            # rows still waiting for the pump (a closed-loop round that just ended) are
            # built here in the same slices, the loop reading its sockets between them,
            # not all at once by the flush
            while self.rec.settle(PUMP_BUDGET_NS):
                await asyncio.sleep(0)
            try:
                # the buffers are swapped here; the writer thread builds and writes them
                # (the end of the run, below, waits for it)
                self.rec.flush(wait=False)
            except DiskFullError:
                # the run stops: nothing more can be kept, and main says why once its
                # workers are cancelled (their requests go nowhere: the disk is full)
                main.cancel()
                return
            self.progress.tick()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        if threading.current_thread() is threading.main_thread():
            # Ctrl-C too: a Python-level SIGINT handler (Dagster installs one) would raise
            # inside a transport callback, where the loop logs it and runs on
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, me.cancel)
        async with connections.Connections(self.url, self.cfg.connect_timeout_s) as self.session:
            flusher = loop.create_task(self._flush_loop(me))
            try:
                await self.warmup()
                await self.steady()
                await self.barrier("end")
            except asyncio.CancelledError:
                if self.rec.full is None:
                    raise
                self._record_cut()  # the full disk stopped it mid-step
            finally:
                pending = [t for t in self.tasks if not t.done()]
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                flusher.cancel()
                if threading.current_thread() is threading.main_thread():
                    for sig in (signal.SIGTERM, signal.SIGINT):
                        loop.remove_signal_handler(sig)
                self.rec.flush()
        if self.rec.full is not None:
            raise self.rec.full


def _save_last(save: Callable[..., None], recorder: Recorder) -> None:
    """The final manifest (phases closed at the moment the run stopped). After a full disk it
    is written into the space the recorder held back; should even that fail, the manifest
    of the last boundary stays (complete and valid) and the error says so."""
    try:
        save(final=True)
    except OSError as exc:
        if recorder.full is None or not durable.is_disk_full(exc):
            raise
        recorder.full.manifest_kept = False


def drive(run: Run, recorder: Recorder, save: Callable[..., None] | None = None) -> bool:
    """Run `run.main()` on its own event loop and stop it the one way a run and a worker
    share; returns whether SIGINT/SIGTERM interrupted it.

    However it ends, the records are finalized and (a run, `save`) the final manifest is
    written. A full disk stops it: the flushed records stay as partial streams, and
    finalize raises DiskFullError with what was kept and what was not written."""
    interrupted = False
    saved = SavedSignals()
    try:
        with event_loop_runner() as runner:
            runner.run(run.main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    except OSError as exc:  # the manifest or server_metrics.json did not fit on the disk
        if not durable.is_disk_full(exc):
            raise
        recorder.stop(Path(exc.filename or recorder.run_dir), exc)
    except DiskFullError:
        pass  # the recorder knows; finalize raises it again with the counts
    except LeftBehind:
        pass  # (a pod) the others went on without this one: it stops here, its summary says why
    finally:
        saved.restore()
        gcpolicy.run_ended()
        try:
            recorder.finalize()
        finally:
            run.progress.close()
            if save is not None:
                _save_last(save, recorder)
    return interrupted
