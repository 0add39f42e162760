"""Launcher for llama-cpp-python's server serving several models from one process:

    python -m servingbench.resources.model_server.local.llamacpp_models --config_file FILE.json \
        --port_file PATH

FILE.json is llama-cpp-python's own config file (`{"host", "port", "models": [{"model",
"model_alias", ...}]}`). The stock server keeps one model in memory and, when a request
names another `model_alias`, closes the one it holds and loads the requested one from its
GGUF file before answering: a swap that happens inside that request. This launcher is the
stock `create_app` with what a measurement needs added:

* every swap timed where it happens (`LlamaProxy.__call__`): the close of the model held
  (`model_sleep`, llama.cpp frees it: a level-2 sleep in vLLM's words) and the load of the
  requested one (`model_load`), with `time.time_ns()` at both ends, the first model's load
  at start-up included;
* `GET /servingbench/swaps` answering them as JSON (`[{kind, model, started_ns, ended_ns,
  seconds}]`), so the client writes them as events without parsing a log;
* a request naming a model the file does not list is answered 404 (the stock server
  silently serves the first model instead, which would hide a typo as a swap that never
  happened);
* the socket bound on port 0 here and its port written to `--port_file`.

Only the standard library and llama_cpp are imported: this is the engine's process.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

_SWAPS: list[dict] = []
_LOCK = threading.Lock()


def _record(kind: str, model: str, started_ns: int) -> None:
    ended = time.time_ns()
    with _LOCK:
        _SWAPS.append({"kind": kind, "model": model, "started_ns": started_ns,
                       "ended_ns": ended, "seconds": (ended - started_ns) / 1e9})


def _timed_proxy(proxy_cls) -> None:
    """Replace LlamaProxy.__call__ by the same steps, each timed (the stock method closes
    the held model and loads the requested one without saying how long either took)."""

    def call(self, model=None):
        if model is None:
            model = self._default_model_alias
        if model == self._current_model_alias and self._current_model is not None:
            return self._current_model
        if self._current_model is not None:
            t0 = time.time_ns()
            self._current_model.close()
            self._current_model = None
            _record("model_sleep", self._current_model_alias, t0)
        self._current_model = self.load_llama_from_model_settings(
            self._model_settings_dict[model])
        self._current_model_alias = model
        return self._current_model

    load = proxy_cls.load_llama_from_model_settings

    def timed_load(settings):  # the start-up load (in __init__) and every later one
        t0 = time.time_ns()
        llama = load(settings)
        _record("model_load", settings.model_alias or settings.model, t0)
        return llama

    proxy_cls.__call__ = call
    proxy_cls.load_llama_from_model_settings = staticmethod(timed_load)


class _Routes:
    """ASGI wrapper: /servingbench/swaps, and 404 for a model the config does not list."""

    def __init__(self, app, aliases: set[str]) -> None:
        self.app, self.aliases = app, aliases

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope.get("path") == "/servingbench/swaps":
            with _LOCK:
                body = json.dumps(_SWAPS).encode()
            return await self._answer(send, 200, body)
        if scope.get("method") != "POST" or not scope.get("path", "").startswith("/v1/"):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        try:
            name = json.loads(raw or b"{}").get("model")
        except (ValueError, AttributeError):
            name = None
        if name is not None and name not in self.aliases:
            body = json.dumps({"error": {"message": f"The model `{name}` does not exist.",
                                         "type": "NotFoundError", "code": 404}}).encode()
            return await self._answer(send, 404, body)
        sent = {"done": False}

        async def replay():
            if not sent["done"]:
                sent["done"] = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    async def _answer(send, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    from servingbench.resources.model_server.child import watch_parent

    watch_parent()  # started by a ChildProcess: stop when that process is gone
    import llama_cpp.server.model as model_module
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ConfigFileSettings

    parser = argparse.ArgumentParser(prog="llamacpp_models")
    parser.add_argument("--config_file", required=True)
    parser.add_argument("--port_file", required=True)
    args = parser.parse_args(argv)
    with open(args.config_file) as f:
        settings = ConfigFileSettings.model_validate_json(f.read())
    aliases = {m.model_alias or m.model for m in settings.models}
    _timed_proxy(model_module.LlamaProxy)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    app = create_app(server_settings=settings, model_settings=settings.models)
    port = sock.getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, args.port_file)
    config = uvicorn.Config(_Routes(app, aliases), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
