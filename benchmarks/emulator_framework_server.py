"""The framework path, for comparison only: Starlette StreamingResponse on uvicorn (uvloop).

Same request, same fixed timing (token k due at arrival + k·ITL, absolute deadlines,
one asyncio task per stream), same ground-truth lines as the emulator, so
benchmarks/emulator_throughput.py --framework measures both with one client.
Not used by the product: the emulator's hot path is emulator/httpproto.py + engine.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

ARGS = argparse.Namespace()


async def completions(request: Request) -> StreamingResponse:
    arrival = time.perf_counter_ns()
    body = await request.json()
    itl = int(ARGS.itl_ms * 1e6)
    n, p = body["max_tokens"], 1

    async def gen():
        chunks = []
        for k in range(n):
            due = arrival + k * itl
            delay = (due - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            usage = {"prompt_tokens": p, "total_tokens": p + k + 1, "completion_tokens": k + 1}
            yield ("data: " + json.dumps({"id": "cmpl-f", "object": "text_completion",
                                          "choices": [{"index": 0, "text": " word",
                                                       "finish_reason": None}],
                                          "usage": usage}) + "\n\n").encode()
            chunks.append([due, time.perf_counter_ns(), 1])
        yield b"data: [DONE]\n\n"
        with ARGS.ground_truth.open("a") as fh:  # per request: uvicorn re-raises SIGTERM on exit
            fh.write(json.dumps({"chunks": chunks}) + "\n")

    return StreamingResponse(gen(), media_type="text/event-stream")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", type=Path, required=True)
    p.add_argument("--ground-truth", type=Path, required=True)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.parse_args(namespace=ARGS)
    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="uvloop", log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        tmp = ARGS.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        os.replace(tmp, ARGS.port_file)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
