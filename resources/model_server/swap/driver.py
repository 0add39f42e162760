"""The swap driver: one endpoint on 127.0.0.1 in front of the engines of several models on one
node, routing each request by its body's `model` and, for swapped models (vLLM's sleep mode,
one awake at a time), putting the awake one to sleep and waking the requested one before the
request goes on, each step timed as a `model_sleep` / `model_wake` event (contract §2.6:
`value` the seconds, `at` when it ended) in events.parquet.

A request for a sleeping model waits: first for the awake model's requests in flight to
finish (requests for the awake model that arrive meanwhile queue behind the swap, in
arrival order), then `POST /sleep?level=N` to the awake engine (N its `sleep_level`), then
`POST /wake_up` to the requested one, each answered 200 when done (vLLM answers when the
engine has finished). The upstream of a model is `(host, port)`; `model_query` adds
`model=NAME` to the sleep-mode calls (the emulator's one process serving every model,
emulator/modelset.py); a vLLM Deployment per model takes none. Requests pass through as
bytes, streamed chunk by chunk (chunked or Content-Length bodies) on keep-alive connections
(relay.py).

Every wait has a deadline (`Bounds`): each sleep-mode call goes through the bounded control
client (resources/http/control.py: one deadline over connect, head and body, so a `100
Continue` trickle ends too), the wait for the awake model's requests to drain, the connect to
an engine and each read of its answer. A swap that misses one answers its waiting request
504 (502 for any other failure) and leaves no model marked awake, so the next request, for
whichever model, swaps it in afresh: a hung `/wake_up` costs its own request the wake bound,
and the model that was awake serves again. A client that leaves while its request waits is
dropped before anything is sent for it (no swap that no recorded request owns); one that
leaves while its answer streams has the engine's connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass

import httpx
from servingbench.resources.http import control
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.swap.relay import (
    UpstreamTimeout,
    error_answer,
    headers_of,
    model_of,
    relay,
)

CONTROL_MAX_BYTES = 64 << 10  # an answer of /sleep, /wake_up, /is_sleeping is a few bytes


@dataclass(frozen=True)
class Bounds:
    """How long the driver waits for each thing, in seconds. vLLM's wake-up reloads the
    weights (level 1 from host memory, level 2 from disk: minutes for a large model); the
    load generator's own first-token timeout (60 s by default) usually gives up first, and
    its request is then dropped here before it swaps anything."""

    sleep_s: float = 300.0
    wake_s: float = 600.0
    drain_s: float = 600.0    # the awake model's requests in flight, before it sleeps
    status_s: float = 15.0    # `/is_sleeping` at start
    connect_s: float = 10.0   # a connection to an engine, to forward a request
    read_s: float = 600.0     # each read of an engine's answer (a stream may pause between chunks)


class SwapError(RuntimeError):
    """A swap that did not happen; `status` is what the waiting client is answered."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


class _ClientGone(Exception):
    """The client closed its connection while its request waited or streamed."""


REASONS = {502: "Bad Gateway", 504: "Gateway Timeout"}


class SwapDriver:
    def __init__(self, models: list[dict], upstreams: dict[str, tuple[str, int]],
                 events: Events | None = None, model_query: bool = True,
                 bounds: Bounds | None = None,
                 sleep_mode: engines.SleepMode | None = None) -> None:
        """`sleep_mode`: the engines' sleep-mode calls (engines/<engine>.py); vLLM's, which
        the emulator imitates, unless given."""
        self.models = {m["name"]: m for m in models}
        self.upstreams = upstreams
        self.events = events
        self.model_query = model_query
        self.bounds = bounds or Bounds()
        self.calls = sleep_mode or engines.sleep_mode()
        self.awake: str | None = None
        self.inflight = {name: 0 for name in self.models}
        self.pending = False
        self.swaps = 0
        self.dropped = 0  # requests whose client left before they were sent
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    # --- life cycle (a thread of its own: the run's code around it is synchronous) ------------
    def start(self, timeout_s: float = 30.0) -> int:
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            try:
                asyncio.run(self._serve(ready))
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=main, name="swap-driver", daemon=True)
        self._thread.start()
        ready.wait(timeout_s)
        if failure or self.port is None:
            raise SwapError(f"swap driver did not start: {failure[0] if failure else 'timeout'}")
        return self.port

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve(self, ready: threading.Event) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._idle = asyncio.Condition()
        # the engines are ours on 127.0.0.1 or in-cluster Services: never through a proxy
        async with httpx.AsyncClient(trust_env=False, timeout=None) as self._http:
            swapped = [n for n, m in self.models.items() if m["placement"] == "swapped"]
            for name in swapped:  # the one awake now (the emulator: the first listed)
                try:
                    status, body = await self._call(name, "GET", self.calls.state,
                                                     self.bounds.status_s)
                    if status == 200 and not json.loads(body).get(self.calls.state_key, True):
                        self.awake = name
                except (SwapError, ValueError, AttributeError) as exc:
                    _say(f"model {name}: sleep state unknown ({exc}); taken as asleep")
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            async with server:
                await self._stop.wait()

    # --- swapping ----------------------------------------------------------------------------
    async def _acquire(self, name: str | None) -> None:
        m = self.models.get(name) if name is not None else None
        if m is None or m["placement"] != "swapped":
            if name in self.inflight:
                self.inflight[name] += 1
            return
        if self.awake == name and not self.pending:
            self.inflight[name] += 1
            return
        async with self._lock:  # cancelled while queued (its client left): out of the queue
            if self.awake != name:
                self.pending = True
                swap = asyncio.ensure_future(self._swap_to(name))
                try:
                    await asyncio.shield(swap)
                except asyncio.CancelledError:
                    # its client left mid-swap: the swap (every call bounded) ends before the
                    # lock goes to the next request, so two swaps never overlap
                    with contextlib.suppress(Exception):
                        await swap
                    raise
                finally:
                    self.pending = False
            self.inflight[name] += 1

    async def _release(self, name: str | None) -> None:
        if name in self.inflight:
            async with self._idle:
                self.inflight[name] -= 1
                self._idle.notify_all()

    async def _swap_to(self, name: str) -> None:
        old = self.awake
        if old is not None:
            try:
                async with self._idle, asyncio.timeout(self.bounds.drain_s):
                    await self._idle.wait_for(lambda: self.inflight[old] == 0)
            except TimeoutError:
                raise SwapError(f"model {old}: {self.inflight[old]} request(s) still in flight "
                                f"after {self.bounds.drain_s:g} s; not put to sleep for "
                                f"model {name}", 504) from None
            level = self.models[old].get("sleep_level") or 1
            self.awake = None  # from here, a failure leaves its state unknown: swapped afresh
            await self._timed(old, "model_sleep", "POST", f"{self.calls.sleep}?level={level}",
                              f"level {level}", self.bounds.sleep_s)
        await self._timed(name, "model_wake", "POST", self.calls.wake,
                          f"level {self.models[name].get('sleep_level') or 1}",
                          self.bounds.wake_s)
        self.awake = name
        self.swaps += 1

    async def _timed(self, name: str, kind: str, method: str, path: str, detail: str,
                     deadline_s: float) -> None:
        t0 = time.time_ns()
        status, body = await self._call(name, method, path, deadline_s)
        t1 = time.time_ns()
        if status != 200:
            raise SwapError(f"{method} {path} for model {name}: HTTP {status} {body[:200]!r}")
        if self.events is not None:
            self.events.add(kind, name, at_ns=t1, value=(t1 - t0) / 1e9, detail=detail)

    async def _call(self, name: str, method: str, path: str,
                    deadline_s: float) -> tuple[int, bytes]:
        """A sleep-mode call through the bounded control client: one deadline over connect,
        head and body (SwapError 504 past it), the answer capped in bytes."""
        if self.model_query:
            path += ("&" if "?" in path else "?") + f"model={name}"
        host, port = self.upstreams[name]
        try:
            r, body = await control.arequest(self._http, method, f"http://{host}:{port}{path}",
                                             max_bytes=CONTROL_MAX_BYTES, deadline_s=deadline_s)
        except control.ControlError as exc:
            _say(f"model {name}: {method} {path}: {exc}")
            late = "no complete answer" in str(exc)
            raise SwapError(f"{method} {path} for model {name}: {exc}",
                            504 if late else 502) from None
        except httpx.HTTPError as exc:
            raise SwapError(f"{method} {path} for model {name}: {exc!r}"[:300]) from None
        return r.status_code, body

    # --- proxying ----------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ups: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        carry = b""  # a byte the client sent early, read while watching for it to leave
        try:
            while True:
                try:
                    head = carry + await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                headers = headers_of(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                # the client sends nothing more until it has its answer: a read that ends
                # means it left (its own timeout), and its request is not worth sending
                gone = asyncio.ensure_future(reader.read(1))
                try:
                    await self._one(head, body, writer, ups, gone)
                finally:
                    gone.cancel()
                    await asyncio.wait({gone})  # the reader is free again (or ended) first
                carry = _early(gone)
                if headers.get("connection", "").lower() == "close":
                    return
        except (_ClientGone, ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            for _, uw in ups.values():
                uw.close()
            writer.close()

    async def _one(self, head: bytes, body: bytes, writer: asyncio.StreamWriter, ups: dict,
                   gone: asyncio.Future) -> None:
        """One request: its model acquired, then forwarded."""
        name = model_of(body)
        target = self.upstreams.get(name) or next(iter(self.upstreams.values()))
        try:
            await self._unless_gone(self._acquire(name), gone)
        except _ClientGone:
            self.dropped += 1
            raise
        except SwapError as exc:
            writer.write(error_answer(exc.status, REASONS.get(exc.status, "Bad Gateway"),
                                      str(exc)))
            await writer.drain()
            return
        try:
            await self._unless_gone(self._forward(target, head + body, writer, ups), gone)
        except UpstreamTimeout as exc:
            _drop(ups, target)
            if exc.started:  # part of the answer went out: only closing is left
                raise ConnectionError("upstream stalled mid-answer") from None
            writer.write(error_answer(504, "Gateway Timeout", f"the engine sent nothing within "
                                      f"{self.bounds.read_s:g} s"))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            _drop(ups, target)
            raise ConnectionError("upstream failed") from None
        finally:
            await self._release(name)

    async def _forward(self, target: tuple[str, int], request: bytes,
                       writer: asyncio.StreamWriter, ups: dict) -> None:
        if target not in ups:
            try:
                ups[target] = await asyncio.wait_for(asyncio.open_connection(*target),
                                                     self.bounds.connect_s)
            except TimeoutError:
                raise UpstreamTimeout(started=False) from None
        ur, uw = ups[target]
        uw.write(request)
        await uw.drain()
        if not await relay(ur, writer, self.bounds.read_s):
            _drop(ups, target)

    @staticmethod
    async def _unless_gone(coro, gone: asyncio.Future):
        """`await coro`, unless the client leaves first: then it is cancelled (a request
        queued for a swap leaves the queue; a stream in flight is cut) and _ClientGone."""
        if _left(gone):  # before anything starts for it
            coro.close()
            raise _ClientGone
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done and _left(gone):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise _ClientGone
        return await task  # done, or the client sent a byte early (kept by _early)


def _left(gone: asyncio.Future) -> bool:
    """Whether the client's watch read says it closed its connection."""
    return gone.done() and not gone.cancelled() and (gone.exception() is not None
                                                     or gone.result() == b"")


def _early(gone: asyncio.Future) -> bytes:
    if gone.done() and not gone.cancelled() and gone.exception() is None:
        return gone.result()
    return b""


def _drop(ups: dict, target: tuple[str, int]) -> None:
    if target in ups:
        ups.pop(target)[1].close()


def _say(message: str) -> None:
    print(f"swap driver: {message}", file=sys.stderr, flush=True)


def load_events(events: Events, status: dict) -> None:
    """`model_load` per model at start from the emulator's status (emulator/modelset.py): its
    weights_load phase, `at` its end, `value` its seconds."""
    from servingbench.resources.contract.timestamps import parse_ts

    for name, st in (status.get("models") or {}).items():
        phase = (st.get("phases") or {}).get("weights_load") or {}
        if phase.get("started_at") and phase.get("ended_at"):
            start, end = parse_ts(phase["started_at"]), parse_ts(phase["ended_at"])
            events.add("model_load", name, at_ns=end, value=(end - start) / 1e9,
                       detail="weights_load at start (EMULATED)")
