"""Which model each request names, for a node serving several (contract §2.1 `models`): the
load goes to one endpoint that routes by the request body's `model` (the swap driver,
resources/model_server/swap/driver.py, or an engine serving several models), and the request log's
`model` says which one each request addressed.

Two mixes: by `request_share` (each request draws its model, seeded: the same run sends the
same sequence), or in bursts (`model_bursts` requests for one model, then as many for the
next, in the order listed): bursts alternate between swapped models and so force swaps.
The body is built once for the candidate's own model name (prompts.py) and its leading
`"model"` value is replaced here, so prompts, sizes and the bodies built ahead stay as they
are."""

from __future__ import annotations

import json
import random
import re

_MODEL = re.compile(rb'^\{\s*"model"\s*:\s*"(?:[^"\\]|\\.)*"')


class ModelMix:
    def __init__(self, mix, bursts: int | None = None, seed: int = 0, worker: int = 0) -> None:
        pairs = [(str(name), float(share)) for name, share in mix]
        self.names = [n for n, _ in pairs]
        self.weights = [s for _, s in pairs]
        self.bursts = bursts
        self.rng = random.Random(f"model-mix:{seed}:{worker}")
        self.sent = 0
        self._heads = {n: json.dumps({"model": n}, separators=(",", ":"))[:-1].encode()
                       for n in self.names}

    def pick(self) -> str:
        i = self.sent
        self.sent += 1
        if self.bursts is not None:
            return self.names[(i // self.bursts) % len(self.names)]
        return self.rng.choices(self.names, self.weights)[0]

    def apply(self, body: bytes) -> tuple[bytes, str | None]:
        """The body naming the next model, and that model; a body without a leading `model`
        (not one prompts.py built) goes unchanged, its model unknown."""
        m = _MODEL.match(body)
        if m is None:
            return body, None
        name = self.pick()
        return self._heads[name] + body[m.end():], name

    def model_of(self, body: bytes) -> str | None:
        m = _MODEL.match(body)
        if m is None:
            return None
        return json.loads(m.group(0)[m.group(0).index(b":") + 1:].strip())


def check(mix, bursts) -> str | None:
    """What is wrong with a load config's model_mix / model_bursts, or None."""
    if not mix:
        return None if bursts is None else "model_bursts: needs model_mix"
    try:
        pairs = [(name, float(share)) for name, share in mix]
    except (TypeError, ValueError):
        return "model_mix: expected [[name, share], ...]"
    if any(not isinstance(n, str) or not n or not n.isprintable() for n, _ in pairs):
        return "model_mix: every name must be a printable, non-empty string"
    if any(s < 0 for _, s in pairs) or (bursts is None and sum(s for _, s in pairs) <= 0):
        return "model_mix: shares must be >= 0 and add to more than 0"
    if bursts is not None and (not isinstance(bursts, int) or isinstance(bursts, bool)
                               or bursts < 1):
        return f"model_bursts: expected a positive integer, got {bursts!r:.40}"
    return None
