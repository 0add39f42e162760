"""The swap driver (driver.py) as a process of its own, so relaying every streamed chunk never
competes with the load generator's event loop for the interpreter:

    python -m servingbench.resources.model_server.swap.process --models FILE.json \
        --upstream HOST:PORT --run-dir DIR --run-id ID --port-file PATH

It writes the models' start-up loads (model_load, from the emulator's status) and every
swap into DIR/events.parquet, its port into PATH once it listens, and stops on SIGTERM.

With `--upstreams FILE.json` ({name: "HOST:PORT"}, one engine per model: the eks profile's
per-model Services, kube/models_deploy.py) instead of `--upstream`, the sleep-mode calls
carry no `model=` query and no status is read: `--events FILE.json` (rows of
events.parquet, `at` in ns) holds the start-up events the deploying side recorded, written
first, since this process then owns events.parquet (it rewrites the whole file)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from servingbench.resources.model_server.child import ChildProcess, watch_parent
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.swap.driver import SwapDriver, SwapError, load_events


def main(argv: list[str] | None = None) -> int:
    watch_parent()  # started by SwapProcess: stop when the run that started it is gone
    p = argparse.ArgumentParser(prog="swap_process")
    p.add_argument("--models", type=Path, required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--upstream")
    where.add_argument("--upstreams", type=Path)
    p.add_argument("--events", type=Path)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--port-file", type=Path, required=True)
    a = p.parse_args(argv)
    models = json.loads(a.models.read_text())
    events = Events(a.run_dir, a.run_id)
    if a.upstreams is not None:  # one engine per model
        for row in json.loads(a.events.read_text()) if a.events else []:
            events.add(row["kind"], row["subject"], at_ns=row["at"], value=row["value"],
                       detail=row["detail"])
        upstreams = {}
        for name, hp in json.loads(a.upstreams.read_text()).items():
            host, _, port = hp.rpartition(":")
            upstreams[name] = (host, int(port))
        driver = SwapDriver(models, upstreams, events, model_query=False)
    else:  # the emulator: one process serving every model
        host, _, port = a.upstream.rpartition(":")
        with urllib.request.urlopen(f"http://{host}:{port}/servingbench/status", timeout=10) as r:
            load_events(events, json.loads(r.read()))
        driver = SwapDriver(models, {m["name"]: (host, int(port)) for m in models}, events)
    ready = threading.Event()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(driver._serve(ready))
        while not ready.is_set():
            await asyncio.sleep(0.01)
        tmp = a.port_file.with_suffix(".tmp")
        tmp.write_text(str(driver.port))
        os.replace(tmp, a.port_file)
        loop.add_signal_handler(signal.SIGTERM, driver._stop.set)
        await task

    asyncio.run(serve())
    return 0


# The driver's environment: what a Python process needs to start and find servingbench, and
# nothing else. It reads no setting and calls no cloud API, and the API key travels in the
# requests it relays: no AWS credentials, no engine key, no token of any kind reach it.
DRIVER_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
              "VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
              "PYTHONHASHSEED", "LC_")


def driver_env(environ) -> dict[str, str]:
    """The allow-listed part of `environ` (names, and `LC_*`)."""
    return {k: v for k, v in environ.items()
            if k in DRIVER_ENV or k.startswith(tuple(n for n in DRIVER_ENV if n.endswith("_")))}


class SwapProcess:
    """Starts and stops swap_process from the run's side."""

    def __init__(self, models: list[dict], upstream: tuple[str, int] | None, run_dir: Path,
                 run_id: str, timeout_s: float = 30, *,
                 upstreams: dict[str, tuple[str, int]] | None = None,
                 prior_events: list[dict] = ()) -> None:
        """`upstream`: the emulator serving every model; or `upstreams`, one engine per
        model, with `prior_events` (Events rows) already recorded for the run."""
        self.args = (models, upstream, Path(run_dir), run_id)
        self.upstreams, self.prior_events = upstreams, list(prior_events)
        self.timeout_s = timeout_s
        self.child: ChildProcess | None = None
        self.port: int | None = None

    def start(self) -> int:
        models, upstream, run_dir, run_id = self.args
        spec = run_dir / "swap_models.json"
        spec.write_text(json.dumps(list(models)))
        port_file = run_dir / "swap_driver.port"
        port_file.unlink(missing_ok=True)
        if self.upstreams is None:
            where = ["--upstream", f"{upstream[0]}:{upstream[1]}"]
        else:
            ups, prior = run_dir / "swap_upstreams.json", run_dir / "swap_events.json"
            ups.write_text(json.dumps({n: f"{h}:{p}" for n, (h, p) in self.upstreams.items()}))
            prior.write_text(json.dumps(self.prior_events))
            where = ["--upstreams", str(ups), "--events", str(prior)]
        log = run_dir / "swap_driver.log"
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop
        self.child = ChildProcess(
            [sys.executable, "-m", "servingbench.resources.model_server.swap.process",
             "--models", str(spec), *where, "--run-dir", str(run_dir),
             "--run-id", run_id, "--port-file", str(port_file)],
            name="swap driver", env=driver_env(os.environ), stderr=self._log,
            port_file=port_file,
            ready_timeout_s=self.timeout_s, error=SwapError,
            tail=lambda: log.read_text()[-1500:])
        self.port = self.child.start()
        return self.port

    @property
    def proc(self) -> subprocess.Popen | None:
        return None if self.child is None else self.child.proc

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(grace_s=10)
            self._log.close()
            self.child = None


if __name__ == "__main__":
    sys.exit(main())
