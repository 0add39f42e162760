"""Short, redacted error strings: no secret ever reaches a record or a log line."""

from __future__ import annotations

import re

_PATTERNS = [
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]+"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"(?i)(api[_-]?key|token|secret|password)(\s*[=:]\s*)\S+"),
]
MAX_LEN = 200


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    for pat in _PATTERNS:
        text = pat.sub(lambda m: (m.group(1) + m.group(2) if m.lastindex else "") + "[REDACTED]", text)
    return text


def short_error(text: str, secrets: tuple[str, ...] = ()) -> str:
    text = " ".join(redact(text, secrets).split())
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 1] + "…"
