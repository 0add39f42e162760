"""A small fixed-timing OpenAI-compatible SSE server (the emulator contract's subset).

A real asyncio server process on 127.0.0.1 used by the load generator's tests and by
`benchmarks/loadgen_accuracy.py`: constant TTFT and ITL, tokens emitted on absolute
deadlines (`arrival + ttft + k * itl`), a ground-truth JSONL line per finished request
with the server's own write times, the `X-Servingbench-Fault` header, the usage modes,
and `X-Request-ID` echo. Run: `python tests/support/fixed_server.py --ttft-ms 20 --itl-ms 5`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time

_perf = time.perf_counter_ns
_ANCHOR = time.time_ns() - _perf()


def utc_ns() -> int:
    return _ANCHOR + _perf()


class Server:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.ttft_ns = int(a.ttft_ms * 1e6)
        self.itl_ns = int(a.itl_ms * 1e6)
        self.gt = open(a.ground_truth, "a", buffering=1) if a.ground_truth else None  # noqa: SIM115
        self.n = 0

    # --- HTTP plumbing --------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                arrival = _perf()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0"))
                body = await reader.readexactly(n) if n else b""
                keep = await self.route(method, path.split("?")[0], headers, body, writer, arrival)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    def _head(self, status: int, ctype: str, extra: dict[str, str], length: int | None) -> bytes:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "X")
        h = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}"]
        h.append("Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}")
        if not self.a.no_emulated_header:
            h.append("x-servingbench-emulated: 1")
        h += [f"{k}: {v}" for k, v in extra.items()]
        return ("\r\n".join(h) + "\r\n\r\n").encode()

    def _json(self, writer, status: int, obj, extra: dict[str, str]) -> bool:
        data = json.dumps(obj).encode()
        writer.write(self._head(status, "application/json", extra, len(data)) + data)
        return True

    def _error(self, writer, status: int, msg: str, extra: dict[str, str]) -> bool:
        return self._json(writer, status, {"object": "error", "message": msg, "type": "BadRequestError"
                                           if status == 400 else "ServerError", "code": status}, extra)

    async def route(self, method, path, headers, body, writer, arrival) -> bool:
        extra = {}
        rid = headers.get("x-request-id")
        if rid:
            extra["X-Request-ID"] = rid
        if path == "/health":
            return self._json(writer, 200, {}, extra)
        if path == "/v1/models":
            return self._json(writer, 200, {"object": "list", "data": [{"id": self.a.model, "object": "model"}]}, extra)
        if path == "/tokenize" and not self.a.no_tokenize:
            req = json.loads(body or b"{}")
            n = len(str(req.get("prompt", "")).split())
            return self._json(writer, 200, {"tokens": list(range(n)), "count": n, "max_model_len": 131072}, extra)
        if path == "/metrics" and self.a.no_metrics:
            return self._error(writer, 404, f"no route {path}", extra)
        if path == "/metrics":
            data = b"vllm:generation_tokens_total 0\n"
            writer.write(self._head(200, "text/plain", extra, len(data)) + data)
            return True
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            if self.a.api_key and headers.get("authorization") != f"Bearer {self.a.api_key}":
                return self._error(writer, 401, "invalid API key", extra)
            return await self.complete(path, headers, json.loads(body), writer, arrival, rid)
        return self._error(writer, 404, f"no route {path}", extra)

    # --- completions -----------------------------------------------------------------
    async def complete(self, path, headers, req, writer, arrival, rid) -> bool:
        chat = path.endswith("chat/completions")
        fault = dict(kv.split("=", 1) for kv in headers.get("x-servingbench-fault", "").split(";") if "=" in kv)
        extra = {"X-Request-ID": rid} if rid else {}
        opts = req.get("stream_options") or {}
        if opts.get("continuous_usage_stats") and self.a.reject_continuous:
            return self._error(writer, 400, "continuous_usage_stats: extra inputs are not permitted", extra)
        if "status" in fault:
            self._truth(None, rid, arrival, utc_ns(), None, 0, int(fault["status"]), [])
            return self._error(writer, int(fault["status"]), "injected fault", extra)
        if "first_byte_delay_s" in fault:
            await asyncio.sleep(float(fault["first_byte_delay_s"]))
        prompt = " ".join(m["content"] for m in req["messages"]) if chat else req.get("prompt", "")
        p_tok = len(str(prompt).split())
        n_out = 0 if fault.get("empty") == "1" else int(req.get("max_tokens", 16))
        per = int(fault.get("tokens_per_chunk", 1))
        cont = opts.get("continuous_usage_stats") and not self.a.no_continuous_usage and not self.a.no_usage
        final_usage = opts.get("include_usage") and not self.a.no_usage
        self.n += 1
        cid = f"cmpl-{os.getpid()}-{self.n}"
        headers_ns = utc_ns()
        writer.write(self._head(200, "text/event-stream", extra, None))
        gt_chunks = []
        obj = "chat.completion.chunk" if chat else "text_completion"
        pre = f'{{"id":"{cid}","object":"{obj}","created":0,"model":"{req.get("model")}","choices":'

        def event(choices: str, done: int | None) -> bytes:
            usage = "" if done is None else f',"usage":{{"prompt_tokens":{p_tok},"total_tokens":{p_tok + done},"completion_tokens":{done}}}'
            data = f"data: {pre}{choices}{usage}}}\n\n".encode()
            return b"%x\r\n%s\r\n" % (len(data), data)

        if chat:
            writer.write(event('[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]', 0 if cont else None))
        disconnect = int(fault.get("disconnect_after", -1))
        malformed = int(fault.get("malformed_after", -1))
        stall_ns = int(float(fault.get("stall_s", 0)) * 1e9)
        itl = self.itl_ns
        # Tokens are written from timer callbacks, not a coroutine per token: the server
        # has to keep up with tens of thousands of tokens a second on one core.
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        st = [0, arrival + self.ttft_ns]  # tokens sent, base deadline

        def arm() -> None:
            k = min(per, n_out - st[0])
            due = st[1] + (st[0] + k - 1) * itl
            loop.call_later(max(0.0, (due - _perf()) / 1e9), emit, due, k)

        def emit(due: int, k: int) -> None:
            if _perf() < due:  # the loop's cached clock fired us early: wait the rest
                loop.call_later((due - _perf()) / 1e9, emit, due, k)
                return
            if finished.done() or writer.transport.is_closing():
                if not finished.done():
                    finished.set_result("disconnect")
                return
            sent = st[0] = st[0] + k
            text = "".join(f" t{sent - k + j}" for j in range(k))
            fin = '"length"' if sent == n_out else "null"
            if chat:
                choices = f'[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":{fin}}}]'
            else:
                choices = f'[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{fin}}}]'
            writer.write(event(choices, sent if cont else None))
            gt_chunks.append([_ANCHOR + due, utc_ns(), k])
            if stall_ns and sent == k:
                st[1] += stall_ns
            if sent == disconnect:
                writer.transport.abort()
                finished.set_result("disconnect")
            elif sent == malformed:
                data = b"data: {not json\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                writer.transport.close()  # flushes what is buffered, then closes
                finished.set_result("malformed")
            elif sent >= n_out:
                finished.set_result(200)
            else:
                arm()

        if n_out > 0:
            arm()
            outcome = await finished
            if outcome != 200:
                self._truth(cid, rid, arrival, headers_ns, p_tok, st[0], outcome, gt_chunks)
                return False
        sent = st[0]
        if final_usage:
            writer.write(event("[]", sent))
        writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
        await writer.drain()
        self._truth(cid, rid, arrival, headers_ns, p_tok, sent, 200, gt_chunks)
        return True

    def _truth(self, cid, rid, arrival, headers_ns, p_tok, n, status, chunks) -> None:
        if self.gt is not None:
            self.gt.write(json.dumps({
                "completion_id": cid, "request_id": rid, "arrival_ns": _ANCHOR + arrival,
                "headers_ns": headers_ns, "prompt_tokens": p_tok, "completion_tokens": n,
                "status": status, "chunks": chunks}) + "\n")


async def serve(a: argparse.Namespace) -> None:
    srv = Server(a)
    server = await asyncio.start_server(srv.handle, a.host, a.port, backlog=4096, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, a.port_file)
    print(f"servingbench fixed-timing test server (EMULATED) listening on http://{a.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    p.add_argument("--model", default="fixed")
    p.add_argument("--ttft-ms", type=float, default=20)
    p.add_argument("--itl-ms", type=float, default=5)
    p.add_argument("--ground-truth")
    p.add_argument("--no-continuous-usage", action="store_true")
    p.add_argument("--no-usage", action="store_true")
    p.add_argument("--no-tokenize", action="store_true")
    p.add_argument("--no-metrics", action="store_true", help="/metrics answers 404")
    p.add_argument("--no-emulated-header", action="store_true")
    p.add_argument("--reject-continuous", action="store_true")
    p.add_argument("--api-key")
    a = p.parse_args(argv)
    try:
        import uvloop
        uvloop.run(serve(a))
    except ImportError:
        asyncio.run(serve(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
