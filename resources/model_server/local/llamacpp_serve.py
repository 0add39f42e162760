"""Launcher for llama-cpp-python's OpenAI-compatible server, as LlamaCppModelServer runs it:

    python -m servingbench.resources.model_server.local.llamacpp_serve --model FILE.gguf --host 127.0.0.1 \
        --port 0 --port_file PATH [any other `python -m llama_cpp.server` option]

It is `python -m llama_cpp.server` (the same argument parser, `create_app` and uvicorn) with
three additions the benchmark needs and the stock entry point lacks:

* cold-start markers: one JSON line on stdout per sub-phase (`process_started` as soon as the
  interpreter runs this module, `weights_load` around the model's construction inside
  `create_app`, then `listening` once the socket is bound), each with `time.time_ns()`, so
  the deploy phase is split from what the engine itself did rather than guessed from its
  log lines; `weights_load_ended` also carries llama.cpp's own model-load time
  (`engine_load_ms`, its `llama_perf_context` `t_load_ms`), the figure the engine reports;
* a socket bound here on port 0 and handed to uvicorn, its port written to `--port_file`:
  no free-port race between choosing a port and binding it;
* `/metrics` in Prometheus text (llama-cpp-python's server has none): the engine's own
  counters, taken where tokens are produced (the model's `generate` loop) and where
  responses finish (an ASGI wrapper), so the load generator's client-side counts have a
  second, independent witness. Token names follow llama.cpp's own server
  (`llamacpp:tokens_predicted_total`, `llamacpp:prompt_tokens_total`); llama.cpp has no
  finished-requests counter, so that one is ours and says so (`servingbench:` prefix).
  Two gauges in llama.cpp's own names, from the completion requests in flight here: one
  lock serves one request at a time, so `llamacpp:requests_processing` is 1 while any is in
  flight and `llamacpp:requests_deferred` the rest (the local autoscaler reads them).

Only the standard library, llama_cpp and the parent watch (model_server/child.py, which needs
nothing but the standard library and the settings list) are imported: this is the engine's
process. The watch starts first: if the run that started this server dies, even by SIGKILL,
the server stops (llama.cpp's threads with it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

_STARTED_NS = time.time_ns()  # the interpreter reached this module (before llama_cpp loads)
_COUNTS = {"tokens_predicted": 0, "prompt_tokens": 0}
_REQUESTS: dict[str, int] = {}
_IN_FLIGHT = {"n": 0}
_LOCK = threading.Lock()
COMPLETION_PATHS = ("/v1/completions", "/v1/chat/completions")


def _marker(event: str, **extra) -> None:
    print(json.dumps({"servingbench": event, "at_ns": time.time_ns(), **extra}), flush=True)


def _count_generate(llama_cls, is_eog) -> None:
    """Count, inside the engine, every prompt token it is given and every token it samples
    that is text (end-of-generation tokens end a stream without being sent, so they are not
    counted: the figure is comparable with the client's content chunks)."""
    original = llama_cls.generate

    def generate(self, tokens, *args, **kwargs):
        with _LOCK:
            _COUNTS["prompt_tokens"] += len(tokens)
        for token in original(self, tokens, *args, **kwargs):
            if not is_eog(self, token):
                with _LOCK:
                    _COUNTS["tokens_predicted"] += 1
            yield token

    llama_cls.generate = generate


def _metrics_text() -> str:
    with _LOCK:
        counts, requests, in_flight = dict(_COUNTS), dict(_REQUESTS), _IN_FLIGHT["n"]
    lines = [
        "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total {counts['tokens_predicted']}",
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        f"llamacpp:prompt_tokens_total {counts['prompt_tokens']}",
        "# HELP servingbench:requests_finished_total Completion requests whose response "
        "finished, by HTTP status (added by servingbench's launcher).",
        "# TYPE servingbench:requests_finished_total counter",
    ]
    lines += [f'servingbench:requests_finished_total{{status="{k}"}} {v}'
              for k, v in sorted(requests.items())]
    lines += [
        "# HELP llamacpp:requests_processing Number of requests processing.",
        "# TYPE llamacpp:requests_processing gauge",
        f"llamacpp:requests_processing {min(in_flight, 1)}",
        "# HELP llamacpp:requests_deferred Number of requests deferred.",
        "# TYPE llamacpp:requests_deferred gauge",
        f"llamacpp:requests_deferred {max(in_flight - 1, 0)}",
    ]
    return "\n".join(lines) + "\n"


class _Counted:
    """ASGI wrapper: serves /metrics and counts finished completion responses."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path == "/metrics" and scope.get("method") == "GET":
            body = _metrics_text().encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain; version=0.0.4")]})
            await send({"type": "http.response.body", "body": body})
            return None
        if path not in COMPLETION_PATHS:
            return await self.app(scope, receive, send)
        status = {"code": 0, "done": False}

        async def watch(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                with _LOCK:
                    key = str(status["code"])
                    _REQUESTS[key] = _REQUESTS.get(key, 0) + 1
                    if not status["done"]:
                        status["done"] = True
                        _IN_FLIGHT["n"] -= 1

        with _LOCK:
            _IN_FLIGHT["n"] += 1
        try:
            return await self.app(scope, receive, watch)
        finally:
            with _LOCK:  # a request cut before its last body message still leaves
                if not status["done"]:
                    status["done"] = True
                    _IN_FLIGHT["n"] -= 1


def _engine_load_ms(app_module, llama_cpp) -> float | None:
    """llama.cpp's own measurement of the model's load (`t_load_ms` of its perf data, set
    by llama_model_load), read from the model the server just built; None if unreadable."""
    try:
        llama = app_module._llama_proxy._current_model
        return float(llama_cpp.llama_perf_context(llama._ctx.ctx).t_load_ms)
    except Exception:  # noqa: BLE001 - another binding's layout: the markers still stand
        return None


def main(argv: list[str] | None = None) -> int:
    from servingbench.resources.model_server.child import watch_parent

    watch_parent()
    _marker("process_started", at_ns=_STARTED_NS)
    import llama_cpp
    import llama_cpp.server.app as app_module
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="llamacpp_serve")
    add_args_from_model(parser, Settings)
    parser.add_argument("--port_file", required=True)
    args = parser.parse_args(argv)
    server_settings = parse_model_from_args(ServerSettings, args)
    model_settings = [parse_model_from_args(ModelSettings, args)]

    def is_eog(llama, token) -> bool:
        try:
            return bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, token))
        except AttributeError:   # older bindings: only the one end-of-sequence token
            return token == llama.token_eos()

    _count_generate(llama_cpp.Llama, is_eog)
    # Bind first: the weights load only once the port is ours.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((server_settings.host, server_settings.port))
    _marker("weights_load_started", model=os.path.basename(model_settings[0].model))
    app = create_app(server_settings=server_settings, model_settings=model_settings)
    _marker("weights_load_ended", engine_load_ms=_engine_load_ms(app_module, llama_cpp))
    port = sock.getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, args.port_file)
    _marker("listening", port=port)
    config = uvicorn.Config(_Counted(app), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
