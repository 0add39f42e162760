"""Control-plane checks before a run (httpx): is the endpoint there, which stream options work."""

from __future__ import annotations

import httpx
from servingbench.resources.contract.redact import short_error
from servingbench.resources.http import control
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import LoadError

FULL = {"include_usage": True, "continuous_usage_stats": True}
FINAL_ONLY = {"include_usage": True}
PROBE_MAX_BYTES = 1 << 20  # a two-token answer is a few hundred bytes


def api_url(cfg: LoadConfig) -> str:
    return f"{cfg.base_url}/v1/{'chat/completions' if cfg.api == 'chat' else 'completions'}"


def _body(cfg: LoadConfig, stream_options: dict | None) -> dict:
    body: dict = {"model": cfg.model, "max_tokens": 2, "stream": True, "temperature": 0}
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": "hello"}]
    else:
        body["prompt"] = "hello"
    if stream_options is not None:
        body["stream_options"] = stream_options
    return body


def probe(cfg: LoadConfig, headers: dict[str, str], secrets: tuple[str, ...]) -> tuple[dict | None, bool]:
    """Send one tiny streaming request; return (stream_options the server accepts, emulated).

    Falls back from continuous usage to final-only usage to none when the server answers
    400/422 to the option. Raises LoadError with a clear message when it cannot go on.
    """
    url = api_url(cfg)
    options = [FULL, FINAL_ONLY, None] if cfg.continuous_usage else [FINAL_ONLY, None]
    timeout = httpx.Timeout(cfg.first_token_timeout_s, connect=cfg.connect_timeout_s)
    last = ""
    deadline = cfg.connect_timeout_s + cfg.first_token_timeout_s  # two tokens, all told
    with control.client(timeout=timeout, trust_env=False) as http:
        for opt in options:
            try:
                r, raw = control.request(http, "POST", url, json=_body(cfg, opt), headers=headers,
                                         max_bytes=PROBE_MAX_BYTES, deadline_s=deadline)
                emulated = r.headers.get("x-servingbench-emulated") == "1"
                text = raw.decode("utf-8", "replace")
            except control.ControlError as exc:
                raise LoadError(short_error(f"the probe request failed: {exc}", secrets)) from None
            except httpx.ConnectError as exc:
                raise LoadError(short_error(f"cannot connect to {cfg.endpoint}: {exc}", secrets)) from None
            except httpx.TimeoutException:
                raise LoadError(f"{cfg.endpoint}: no answer within the timeouts (connect "
                                f"{cfg.connect_timeout_s:g} s, first token {cfg.first_token_timeout_s:g} s)") from None
            except httpx.HTTPError as exc:
                raise LoadError(short_error(f"{cfg.endpoint}: {type(exc).__name__}: {exc}", secrets)) from None
            if r.status_code == 200:
                return opt, emulated
            last = short_error(f"HTTP {r.status_code}: {text}", secrets)
            if r.status_code in (401, 403):
                raise LoadError(f"{url} refused the credentials ({last}); check --api-key-env")
            if r.status_code == 404:
                raise LoadError(f"{url}: not found ({last}); is this an OpenAI-compatible "
                                f"server, and is the model name {cfg.model!r} right?")
            if r.status_code not in (400, 422):
                raise LoadError(f"{url}: the probe request failed ({last})")
    raise LoadError(f"{url}: the server rejects a plain streaming request ({last})")
