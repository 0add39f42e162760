"""Local worker processes for one run (`--workers N`): the parent that spawns them, meets
them at a barrier before every step, scrapes the engine's /metrics around each step once,
merges their verdicts and, at the end, their shards (the package docstring says how)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path

from servingbench.resources.contract import durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import DiskFullError, LoadError
from servingbench.resources.loadgen.progress import make_progress
from servingbench.resources.loadgen.result import LoadResult
from servingbench.resources.loadgen.workers.barriers import PipeSync
from servingbench.resources.loadgen.workers.share import Share

START_MARGIN_S = 0.25  # first barrier: every worker is past its imports and probe already
STEP_MARGIN_S = 0.05   # later barriers: a message each way on one machine
STOP_GRACE_S = 60.0    # a stopped worker records its cancelled requests and writes its shards


def _child(conn: Connection, cfg: LoadConfig, run_dir: str, run_id: str, index: int, count: int,
           probed) -> None:
    """A local worker process's entry point (spawned)."""
    from servingbench.resources.loadgen.workers.worker import run_worker

    try:
        summary = run_worker(cfg, Path(run_dir), Share(index, count, f"w{index}"), run_id,
                             PipeSync(conn), probed)
    except DiskFullError as exc:  # the parent stops the run and says what was kept
        _tell(conn, ("full", str(exc.path), exc.reason, exc.unwritten))
        raise SystemExit(1) from None
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which names the worker
        if isinstance(exc, OSError) and durable.is_disk_full(exc):  # before it had a stream
            _tell(conn, ("full", str(exc.filename or run_dir), exc.strerror or str(exc), {}))
        else:
            _tell(conn, ("error", f"{type(exc).__name__}: {str(exc)[:300]}"))
        raise SystemExit(1) from None
    conn.send(("done", summary))


def _tell(conn: Connection, msg: tuple) -> None:
    with contextlib.suppress(OSError):
        conn.send(msg)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not finish"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class _Worker:
    def __init__(self, name: str, proc, conn: Connection) -> None:
        self.name, self.proc, self.conn = name, proc, conn
        self.label: str | None = None  # the barrier it waits at
        self.new_steps: list[dict] = []
        self.reported = 0  # steps it has sent so far
        self.phases: dict = {}
        self.emulated = False
        self.tally = (0, 0, 0)  # steady requests, failed, tokens so far (for the progress line)
        self.shown = (0, 0, 0)
        self.summary: dict | None = None
        self.failed: str | None = None  # why, once it died or erred

    @property
    def alive(self) -> bool:
        return self.failed is None and self.summary is None


def auto_workers(endpoint: str) -> int:
    """`--workers auto`: the cores this process may use, less one for the server when it runs
    on this machine (a loopback endpoint), at least 1."""
    from urllib.parse import urlsplit

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    host = urlsplit(endpoint).hostname or ""
    local = host in ("localhost", "::1") or host.startswith("127.")
    return max(1, cores - 1 if local else cores)


def _merge_step(entries: list[dict], died: list[str]) -> dict:
    """One step's verdict over the workers that reported it: limited if any was, or if a
    worker was lost before or while it ran (`died`: its load was not what was asked)."""
    first = entries[0]

    def worst(key: str):
        vals = [e[key] for e in entries if e.get(key) is not None]
        return max(vals) if vals else None

    return {"step": first["step"], "load_mode": first["load_mode"], "target": first["target"],
            "client_limited": any(e["client_limited"] for e in entries) or bool(died),
            "client_cpu_share": worst("client_cpu_share"), "loop_lag_p99_s": worst("loop_lag_p99_s")}


class _Parent:
    def __init__(self, cfg: LoadConfig, run_dir: Path, m: dict, clock: Clock, progress) -> None:
        self.cfg, self.run_dir, self.m, self.clock = cfg, run_dir, m, clock
        self.progress = make_progress(progress)
        self.progress_on = progress is True
        self.workers: list[_Worker] = []
        self.steps: list[dict] = []
        self.stopping = False
        self.server = None
        self.loop = asyncio.new_event_loop()
        self.dead_during: list[str] = []  # workers that died in the step under way
        self.started = False
        # a full disk stops the run, as it stops one process's (runner.py); room for the
        # final manifest comes back when the workers have ended: each held a reserve
        self.full: DiskFullError | None = None
        self.unwritten: dict[str, int] = {}

    def halt(self) -> None:
        """Stop the run: every live worker records its cancelled requests and ends."""
        self.stopping = True
        for w in self.workers:
            if w.alive and w.proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.proc.pid, signal.SIGTERM)

    def disk_full(self, path, reason: str) -> None:
        """A write of the run (a worker's, or the parent's) found the disk full."""
        if self.full is None:
            self.full = DiskFullError(path, reason)
        self.halt()

    # --- messages ------------------------------------------------------------------
    def _receive(self, timeout: float) -> None:
        live = [w for w in self.workers if w.alive]
        if not live:
            return
        by_handle = {}
        for w in live:
            by_handle[w.conn] = w
            by_handle[w.proc.sentinel] = w
        for handle in wait(list(by_handle), timeout):
            w = by_handle[handle]
            if not w.alive:
                continue
            if handle is w.conn:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    continue  # the sentinel says why
                self._on_message(w, msg)
            else:
                # the process is gone: read what it sent before it went (a pipe at EOF
                # stays readable, so "poll() is false" would never come), then say why
                with contextlib.suppress(EOFError, OSError):
                    while w.alive and w.conn.poll():
                        self._on_message(w, w.conn.recv())
                if not w.alive:
                    continue  # its last word was "done" or an error it reported itself
                w.proc.join(1)
                w.failed = ("stopped before it could record anything" if self.stopping
                            and w.proc.exitcode == -signal.SIGTERM else _exit_reason(w.proc.exitcode))
                if self.progress_on:
                    print(f"load worker {w.name} failed: {w.failed}", file=sys.stderr, flush=True)

    def _on_message(self, w: _Worker, msg: tuple) -> None:
        kind = msg[0]
        if kind == "sync":
            _, w.label, new, w.phases, w.emulated, w.tally = msg
            w.new_steps += new
            w.reported += len(new)
        elif kind == "done":
            w.summary = msg[1]
            w.phases = w.summary["phases"]
            w.new_steps += w.summary["steps"][w.reported:]  # stopped before its next barrier
        elif kind == "error":
            w.failed = msg[1]
        elif kind == "full":
            _, path, reason, unwritten = msg
            w.failed = str(DiskFullError(path, reason))
            for name, n in unwritten.items():
                self.unwritten[name] = self.unwritten.get(name, 0) + n
            self.disk_full(path, reason)

    def _all_at_barrier(self) -> bool:
        live = [w for w in self.workers if w.alive]
        return bool(live) and all(w.label is not None for w in live)

    # --- the run -------------------------------------------------------------------
    def _scrape_begin(self):
        return None if self.server is None else self.loop.run_until_complete(self.server.begin())

    def _scrape_end(self, names: list[str], before) -> None:
        if self.server is not None and names:
            self.loop.run_until_complete(self.server.end(names, before))

    def _close_step(self, before, dead_during: list[str]) -> None:
        """Fold what the workers recorded since the last barrier into the run's steps."""
        order: list[str] = []
        by_name: dict[str, list[dict]] = {}
        for w in self.workers:
            for e in w.new_steps:
                if e["step"] not in by_name:
                    order.append(e["step"])
                by_name.setdefault(e["step"], []).append(e)
            w.new_steps = []
        self._scrape_end(order, before)
        p = self.progress
        if hasattr(p, "done"):  # the workers' counts since the step started
            for w in self.workers:
                p.done += w.tally[0] - w.shown[0]
                p.errors += w.tally[1] - w.shown[1]
                p.tokens += w.tally[2] - w.shown[2]
                w.shown = w.tally
        # A worker lost in an earlier step sent none of its share of this one: it ran below
        # the asked load (open loop: nothing else would show it), so it is limited too.
        earlier = [w.name for w in self.workers if w.failed and w.name not in dead_during]
        for name in order:
            step = _merge_step(by_name[name], dead_during + earlier)
            self.steps.append(step)
            why = [f"worker {d} failed during the step" for d in dead_during] + [
                f"worker {d} failed before the step: its share was not sent" for d in earlier]
            self.progress.step_end(name, why + (["a worker was client-limited"]
                                                if step["client_limited"] and not why else []))

    def coordinate(self) -> None:
        before = None
        in_step = False
        step_label = ""
        deadline_stop: float | None = None
        while True:
            failed_before = {w.name for w in self.workers if w.failed}
            self._receive(0.2)
            dead_now = [w.name for w in self.workers if w.failed and w.name not in failed_before]
            if in_step and dead_now:
                self.dead_during += dead_now
            if self.stopping and deadline_stop is None:
                deadline_stop = time.monotonic() + STOP_GRACE_S
            if deadline_stop is not None and time.monotonic() > deadline_stop:
                for w in self.workers:
                    if w.alive:
                        w.proc.kill()
                deadline_stop = time.monotonic() + 5
            if not any(w.alive for w in self.workers):
                break
            if self.stopping or not self._all_at_barrier():
                continue  # stopping: no one is let into another step
            label = next(w.label for w in self.workers if w.alive)
            if in_step:
                in_step = False
                if not (self.written(self._close_step, before, self.dead_during)
                        and self.written(self.save)):
                    continue  # the disk is full: the run stops here
            self.dead_during = []
            if label == "end":
                go = self.clock.now_utc()
                in_step = False
            else:
                before = self._scrape_begin()
                margin = STEP_MARGIN_S if self.started else START_MARGIN_S
                self.started = True
                go = self.clock.now_utc() + int(margin * 1e9)
                in_step = label != "warmup"
                if label != "warmup":
                    self.progress.step_start(label, None)
                    step_label = label
            for w in self.workers:
                if w.alive:
                    w.label = None
                    with contextlib.suppress(OSError):
                        w.conn.send(("go", go))
        if in_step:  # the last workers died mid-step: keep what the others reported
            self.written(self._close_step, before, self.dead_during)
            if self.full is not None:
                self._list_cut(step_label)

    def _list_cut(self, label: str) -> None:
        """A step the full disk cut short before any worker reported it: listed anyway,
        client-limited (its load was never fully sent), so its rows never read as valid."""
        mode, _, target = label.partition("=")
        if any(s["step"] == label for s in self.steps) or mode not in ("c", "rate"):
            return
        try:
            value = float(target)
        except ValueError:
            return
        self.steps.append({"step": label, "load_mode": "concurrency" if mode == "c" else "rate",
                           "target": value, "client_limited": True, "client_cpu_share": None,
                           "loop_lag_p99_s": None})

    def written(self, write, *args) -> bool:
        """`write(*args)`; False when it found the disk full (the run is then stopped)."""
        try:
            write(*args)
        except OSError as exc:
            if not durable.is_disk_full(exc):
                raise
            self.disk_full(exc.filename or self.run_dir, exc.strerror or str(exc))
            return False
        return True

    def save(self, final: bool = False) -> None:
        m = self.m
        phases = dict(m["phases"])
        for phase in ("warmup", "steady"):
            spans = [w.phases[phase] for w in self.workers if phase in w.phases]
            if not spans:
                continue
            ends = [s["ended_at"] for s in spans if s["ended_at"]]
            end = max(ends) if ends else None
            if end is None and final:
                end = mf.format_ts(self.clock.now_utc())
            phases[phase] = {"started_at": min(s["started_at"] for s in spans), "ended_at": end}
        m["phases"] = phases
        m["steps"] = list(self.steps)
        if any(w.emulated or (w.summary or {}).get("emulated") for w in self.workers) or (
                self.server is not None and self.server.emulated):
            m["source"] = "emulated"
        m["workers"] = [{"name": w.name, "status": "failed" if w.failed else "ok",
                         "reason": w.failed} for w in self.workers]
        mf.dump(m, self.run_dir / "manifest.json")


def run_workers(cfg: LoadConfig, run_dir: Path, manifest_base: dict | None, progress):
    """`run_load` with `cfg.workers` local worker processes; see the module docstring."""
    from servingbench.resources.loadgen.prepare import prepare
    from servingbench.resources.loadgen.server_metrics import Scraper, ServerMetrics

    run_dir = Path(run_dir)
    # the workers size their own prompts: the parent sends no request
    p = prepare(cfg, run_dir, manifest_base=manifest_base, size=False)
    clock, m, prompts, headers, secrets = p.clock, p.manifest, p.prompts, p.headers, p.secrets
    probed = (p.stream_options, p.emulated)
    m["model"] = m.get("model") or cfg.model
    m["scenario"] = prompts.scenario(probed[0])
    m["scenario"]["workers"] = cfg.workers
    if probed[1]:
        m["source"] = "emulated"
    run_dir.mkdir(parents=True, exist_ok=True)
    parent = _Parent(cfg, run_dir, m, clock, progress)
    parent.server = ServerMetrics(run_dir, Scraper(cfg.base_url, headers, secrets))
    parent.save()

    main = threading.current_thread() is threading.main_thread()
    old = {}
    if main:
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, lambda signum, frame: parent.halt())
    ctx = multiprocessing.get_context("spawn")
    try:
        for i in range(cfg.workers):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_child, name=f"servingbench-load-w{i}",
                               args=(theirs, cfg, str(run_dir), m["run_id"], i, cfg.workers, probed))
            proc.start()
            theirs.close()
            parent.workers.append(_Worker(f"w{i}", proc, mine))
        parent.coordinate()
    finally:
        for w in parent.workers:
            if w.proc.is_alive():
                w.proc.kill()
            w.proc.join()
            w.conn.close()
        if main:
            for sig, handler in old.items():
                if handler is not None:
                    signal.signal(sig, handler)
        if parent.full is None:  # on a full disk the streams stay: readers read them as shards
            parent.written(_seal_and_merge, run_dir, parent.workers)
        parent.progress.close()
        parent.loop.close()
        if not parent.written(parent.save, True):
            parent.full.manifest_kept = False
    if parent.full is not None:
        from servingbench.resources.loadgen.recorder import NAMES
        from servingbench.resources.loadgen.workers.shards import rows_on_disk

        parent.full.unwritten = parent.unwritten
        parent.full.kept = {name: rows_on_disk(run_dir, name) for name in NAMES}
        raise parent.full
    statuses, n, n_warmup = _counts(run_dir)
    interrupted = parent.stopping or any((w.summary or {}).get("interrupted") for w in parent.workers)
    result = LoadResult(
        run_id=m["run_id"], run_dir=run_dir, source=m["source"], n_requests=n, n_warmup=n_warmup,
        steps=parent.steps, statuses=statuses,
        prompt_token_mismatches=sum((w.summary or {}).get("mismatch", 0) for w in parent.workers),
        interrupted=interrupted, workers=m["workers"])
    if interrupted:
        raise KeyboardInterrupt
    if all(w.failed for w in parent.workers):
        raise LoadError("every load worker failed: " + "; ".join(
            f"{w.name}: {w.failed}" for w in parent.workers))
    return result


def _seal_and_merge(run_dir: Path, workers: list[_Worker]) -> None:
    from servingbench.resources.loadgen.workers.shards import merge_shards, seal

    for w in workers:
        seal(run_dir, w.name)  # a killed worker's streams become its shards
    merge_shards(run_dir)


def _counts(run_dir: Path) -> tuple[dict[str, int], int, int]:
    from servingbench.resources.contract.schemas import read_records

    steady = read_records(run_dir, "steady_state_request_log")
    warm = read_records(run_dir, "warmup_log")
    statuses: dict[str, int] = {}
    if steady is not None:
        for row in steady.column("status").value_counts().to_pylist():
            statuses[row["values"]] = row["counts"]
    return (statuses, 0 if steady is None else steady.num_rows, 0 if warm is None else warm.num_rows)
