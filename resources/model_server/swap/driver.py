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
emulator/models.py); a vLLM Deployment per model takes none. Requests pass through as
bytes, streamed chunk by chunk (chunked or Content-Length bodies) on keep-alive connections.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from servingbench.resources.model_server.fleet.events import Events


class SwapError(RuntimeError):
    pass


class SwapDriver:
    def __init__(self, models: list[dict], upstreams: dict[str, tuple[str, int]],
                 events: Events | None = None, model_query: bool = True) -> None:
        self.models = {m["name"]: m for m in models}
        self.upstreams = upstreams
        self.events = events
        self.model_query = model_query
        self.awake: str | None = None
        self.inflight = {name: 0 for name in self.models}
        self.pending = False
        self.swaps = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    # --- life cycle (a thread of its own: the run's code around it is synchronous) ------------
    def start(self, timeout_s: float = 10.0) -> int:
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
        swapped = [n for n, m in self.models.items() if m["placement"] == "swapped"]
        for name in swapped:  # the one awake now (the emulator: the first listed)
            status, body = await self._call(name, "GET", "/is_sleeping")
            if status == 200 and not json.loads(body).get("is_sleeping", True):
                self.awake = name
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
        async with self._lock:
            if self.awake != name:
                self.pending = True
                try:
                    await self._swap_to(name)
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
            async with self._idle:
                await self._idle.wait_for(lambda: self.inflight[old] == 0)
            level = self.models[old].get("sleep_level") or 1
            await self._timed(old, "model_sleep", "POST", f"/sleep?level={level}",
                              f"level {level}")
            self.awake = None
        await self._timed(name, "model_wake", "POST", "/wake_up",
                          f"level {self.models[name].get('sleep_level') or 1}")
        self.awake = name
        self.swaps += 1

    async def _timed(self, name: str, kind: str, method: str, path: str, detail: str) -> None:
        t0 = time.time_ns()
        status, body = await self._call(name, method, path)
        t1 = time.time_ns()
        if status != 200:
            raise SwapError(f"{method} {path} for model {name}: HTTP {status} {body[:200]!r}")
        if self.events is not None:
            self.events.add(kind, name, at_ns=t1, value=(t1 - t0) / 1e9, detail=detail)

    async def _call(self, name: str, method: str, path: str) -> tuple[int, bytes]:
        if self.model_query:
            path += ("&" if "?" in path else "?") + f"model={name}"
        host, port = self.upstreams[name]
        r, w = await asyncio.open_connection(host, port)
        try:
            w.write(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 0\r\n"
                    "Connection: close\r\n\r\n".encode())
            await w.drain()
            raw = await r.read()
        finally:
            w.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body

    # --- proxying ----------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ups: dict[tuple[str, int], tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                headers = _headers(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                name = _model_of(body)
                target = self.upstreams.get(name) or next(iter(self.upstreams.values()))
                try:
                    await self._acquire(name)
                except SwapError as exc:
                    msg = json.dumps({"error": {"message": str(exc), "code": 502}}).encode()
                    writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json"
                                 b"\r\ncontent-length: " + str(len(msg)).encode()
                                 + b"\r\n\r\n" + msg)
                    await writer.drain()
                    continue
                try:
                    if target not in ups:
                        ups[target] = await asyncio.open_connection(*target)
                    ur, uw = ups[target]
                    uw.write(head + body)
                    await uw.drain()
                    if not await _relay(ur, writer):
                        uw.close()
                        del ups[target]
                finally:
                    await self._release(name)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            for _, uw in ups.values():
                uw.close()
            writer.close()


def _headers(head: bytes) -> dict[str, str]:
    out = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _model_of(body: bytes) -> str | None:
    if not body:
        return None
    try:
        name = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


async def _relay(up: asyncio.StreamReader, down: asyncio.StreamWriter) -> bool:
    """One response from upstream to the client, each chunk sent on as it comes; whether the
    upstream connection stays open."""
    head = await up.readuntil(b"\r\n\r\n")
    down.write(head)
    headers = _headers(head)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            line = await up.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                down.write(line)
                while True:  # trailers, then the empty line
                    t = await up.readuntil(b"\r\n")
                    down.write(t)
                    if t == b"\r\n":
                        break
                break
            down.write(line + await up.readexactly(size + 2))
            await down.drain()
    elif "content-length" in headers:
        down.write(await up.readexactly(int(headers["content-length"])))
    else:
        down.write(await up.read())
        await down.drain()
        return False
    await down.drain()
    return headers.get("connection", "").lower() != "close"


def load_events(events: Events, status: dict) -> None:
    """`model_load` per model at start from the emulator's status (emulator/models.py): its
    weights_load phase, `at` its end, `value` its seconds."""
    from servingbench.resources.contract.timestamps import parse_ts

    for name, st in (status.get("models") or {}).items():
        phase = (st.get("phases") or {}).get("weights_load") or {}
        if phase.get("started_at") and phase.get("ended_at"):
            start, end = parse_ts(phase["started_at"]), parse_ts(phase["ended_at"])
            events.add("model_load", name, at_ns=end, value=(end - start) / 1e9,
                       detail="weights_load at start (EMULATED)")
