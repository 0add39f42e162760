"""A spot run's injected interruptions on EKS (contract §3.8): the run's AWS FIS experiment
template (resources/cluster/fis.py `FisInterruptions`, handed in by the eks profile) lives
exactly as long as the deployment, deleted however the run ends; on a background thread the
schedule starts one experiment at each time of the candidate's `interruptions`, in seconds
from the steady phase's start (read from the manifest the load generator writes at each
phase boundary), and records each notice FIS reports (the instance it hit, when) as the
Node's `interruption_notice` (kube/events.py `RunEvents.notice`). The node's going, the
replacement node and the new replica come from the Kubernetes API, as for any run.

FIS gives the notice it gives (two minutes, `fis.NOTICE`): the candidate's `notice_s` is
the embedded default's alone."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from servingbench.resources.contract import manifest as mf
from servingbench.resources.model_server.fleet.replicated import steady_start_ns

log = logging.getLogger("servingbench.kube")


def _ns(at: Any) -> int | None:
    if isinstance(at, dt.datetime):
        at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
        return int(at.timestamp()) * 10**9 + at.microsecond * 1000
    return None


class SpotInterrupter:
    """`fis`: a FisInterruptions; `notice(instance_id, at_ns)`: records a notice (RunEvents)."""

    def __init__(self, fis: Any, run_id: str, run_dir: Path, times: list[float],
                 notice: Callable[[str, int], Any] | None = None, poll_s: float = 5.0,
                 clock: Callable[[], int] = time.time_ns,
                 steady_start: Callable[[Path], int | None] = steady_start_ns) -> None:
        self.fis, self.run_id, self.run_dir, self.times = fis, run_id, Path(run_dir), list(times)
        self.notice, self.poll_s, self.clock, self.steady_start = notice, poll_s, clock, steady_start
        self.template_id: str | None = None
        self.recorded: set[str] = set()  # experiments whose notice is recorded
        self.problems: dict[str, int] = {}  # each failure once, with how often it happened
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self) -> Iterator[SpotInterrupter]:
        with self.fis.template_for(self.run_id) as template_id:
            self.template_id = template_id
            thread = threading.Thread(target=self._loop, name="fis-schedule", daemon=True)
            thread.start()
            try:
                yield self
            finally:
                self._stop.set()
                thread.join(60)
                self.record()  # the last notices, before the template goes
                self._missed()

    def _missed(self) -> None:
        """A time inside the steady phase whose experiment never started (its start was not
        known while it ran: load pods write the manifest's phases at their end) is an error,
        never a spot run that silently went uninterrupted."""
        try:
            doc = mf.load(self.run_dir / "manifest.json")
            steady = doc["phases"]["steady"]
            length = (mf.parse_ts(steady["ended_at"]) - mf.parse_ts(steady["started_at"])) / 1e9
        except (OSError, ValueError, KeyError, TypeError, mf.ManifestError):
            return  # no steady phase: the run failed before it, and says so itself
        due = sum(1 for t in self.times if t <= length)
        if len(self.fis.experiments) < due:
            self._problem(f"{due - len(self.fis.experiments)} of {due} interruptions due "
                               "in the steady phase never started (was its start known while "
                               "it ran? load pods write it at their end)")

    def _problem(self, message: str) -> int:
        """Keep `message` once (a start that fails on every tick is one error, counted, not
        a new line every `poll_s`); how many times it has happened."""
        self.problems[message] = self.problems.get(message, 0) + 1
        return self.problems[message]

    @property
    def errors(self) -> list[str]:
        """Every failure, once, with its count when it happened more than once."""
        return [m if n == 1 else f"{m} ({n} tries)" for m, n in self.problems.items()]

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.tick()

    def tick(self) -> list[str]:
        """Start what is due (once each), record the notices; a failure is kept in `errors`
        (the run then fails: a spot run whose interruptions did not happen is not one)."""
        origin = self.steady_start(self.run_dir)
        if origin is None or self.template_id is None:
            return []
        with self._lock:
            try:
                started = self.fis.start_due(self.template_id, self.run_id, self.times,
                                             (self.clock() - origin) / 1e9)
            except Exception as exc:  # noqa: BLE001 - kept and raised at the run's end
                if self._problem(f"starting a FIS experiment: {exc}"[:300]) == 1:
                    log.error("spot interruption not started: %s", exc)
                return []
        self.record()
        return started

    def record(self) -> None:
        """Each started experiment's notice (FIS's action start time) for its instance's
        Node, once; read again until FIS reports it."""
        if self.notice is None:
            return
        with self._lock:
            pending = [e for e in self.fis.experiments if e not in self.recorded]
            if not pending:
                return
            try:
                notices = self.fis.notices()
            except Exception as exc:  # noqa: BLE001 - the node's cordon is still seen
                log.warning("FIS notices not read: %s", exc)
                return
            for experiment, instance, at in notices:
                at_ns = _ns(at)
                if experiment in self.recorded or instance is None or at_ns is None:
                    continue
                self.recorded.add(experiment)
                self.notice(instance, at_ns)
