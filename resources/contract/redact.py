"""Short, redacted error strings: no secret ever reaches a record, a log line or a file.

Besides the exact secrets a run knows (its API key), the patterns catch what a server or
a library may echo back: credentials in URLs, Authorization values (Bearer, Basic, any
scheme), `NAME=value` assignments whose name says key/token/secret/password, AWS key
ids, Hugging Face tokens and EKS (`k8s-aws-v1.`) tokens.
"""

from __future__ import annotations

import re

_R = "[REDACTED]"
_SUBS: list[tuple[re.Pattern, str]] = [
    # scheme://user:password@host -> scheme://[REDACTED]@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@"), r"\1" + _R + "@"),
    (re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)(?:[A-Za-z-]+\s+)?[^\s\"',}]+"), r"\1" + _R),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), _R),
    (re.compile(r"\bBasic\s+[A-Za-z0-9+/]{4,}={0,2}"), _R),
    (re.compile(r"k8s-aws-v1\.[A-Za-z0-9_=-]+"), _R),
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), _R),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), _R),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), _R),
    # AWS_SECRET_ACCESS_KEY=..., api_key: ..., "password": "...", X-Amz-Security-Token: ...
    (re.compile(r"(?i)([A-Za-z0-9_-]*(?:key|token|secret|password|passwd|credential|signature)"
                r"[\"']?\s*[=:]\s*[\"']?)[^\s\"',&}]+"), r"\1" + _R),
]
MAX_LEN = 200


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, _R)
    for pat, repl in _SUBS:
        text = pat.sub(repl, text)
    return text


def short_error(text: str, secrets: tuple[str, ...] = ()) -> str:
    text = redact(" ".join(text.split()), secrets)  # whole text redacted, then cut
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 1] + "…"
