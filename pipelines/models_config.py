"""A candidate's `models` key: several models served on one node (contract §2.1 `models`).

    models:
      - {name: big, model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16,
         placement: resident, memory_share: 0.55, request_share: 0.5}
      - {name: small, model: ..., precision: fp8, placement: swapped, sleep_level: 1,
         memory_share: 0.4, request_share: 0.5}
    model_bursts: 16     # optional: requests alternate between the models in bursts of 16

`name` is the served model name a request addresses (the request log's `model`);
`placement` resident (loaded for the whole run, its `memory_share` of the node's accelerator
memory) or swapped (one swapped model awake at a time, the others asleep: vLLM's sleep mode,
`sleep_level` 1 keeps the weights in host memory, 2 discards them); `request_share` the
fraction of requests that name it (the shares add to 1). Every mistake is a ConfigError
naming the key (exit 2); the fit on the node is checked before provisioning
(resources/cluster/fit_models.py).
"""

from __future__ import annotations

import re

PLACEMENTS = ("resident", "swapped")
SLEEP_LEVELS = (1, 2)
MODEL_KEYS = {"name", "model", "model_revision", "precision", "placement", "memory_share",
              "request_share", "sleep_level"}
_REQUIRED = ("name", "model", "precision", "placement", "memory_share", "request_share")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,255}")
TYPES = {"models": (list, "a list of {name, model, precision, placement, memory_share, "
                          "request_share, sleep_level}"),
         "model_bursts": ((int, type(None)), "a positive integer (requests per burst) or null")}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_models(raw, where: str, error, precisions) -> tuple[dict, ...] | None:
    """The checked `models` entries (sleep_level 1 by default for swapped, None for
    resident; model_revision null when not given), or None when absent. `error` is the
    caller's exception class (ConfigError), `precisions` the names it knows."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) < 2:
        raise error(f"{where}.models: expected a list of at least two models, got {raw!r:.80}")
    out, names = [], set()
    for i, entry in enumerate(raw):
        at = f"{where}.models[{i}]"
        if not isinstance(entry, dict):
            raise error(f"{at}: expected a mapping, got {entry!r:.80}")
        unknown = sorted(set(entry) - MODEL_KEYS)
        if unknown:
            raise error(f"{at}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(MODEL_KEYS))})")
        for key in _REQUIRED:
            if key not in entry:
                raise error(f"{at}: missing key {key!r}")
        name = entry["name"]
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise error(f"{at}.name: {name!r:.80} is not a served model name (letters, digits, "
                        "'._-', at most 64)")
        if name in names:
            raise error(f"{at}.name: {name!r} given twice")
        names.add(name)
        for key in ("model", "model_revision"):
            v = entry.get(key)
            if v is not None and (not isinstance(v, str) or not _MODEL_ID.fullmatch(v)):
                raise error(f"{at}.{key}: {v!r:.80} is not a model id")
        if entry["precision"] not in precisions:
            raise error(f"{at}.precision: {entry['precision']!r:.80} is not one of "
                        f"{', '.join(precisions)}")
        if entry["placement"] not in PLACEMENTS:
            raise error(f"{at}.placement: {entry['placement']!r:.80} is not one of "
                        f"{', '.join(PLACEMENTS)}")
        for key in ("memory_share", "request_share"):
            v = entry[key]
            if not _number(v) or not 0 <= v <= 1 or (key == "memory_share" and v == 0):
                raise error(f"{at}.{key}: expected a number in "
                            f"{'(0, 1]' if key == 'memory_share' else '[0, 1]'}, got {v!r:.80}")
        level = entry.get("sleep_level")
        if entry["placement"] == "resident":
            if level is not None:
                raise error(f"{at}.sleep_level: only a swapped model sleeps (placement is "
                            "resident)")
        else:
            level = 1 if level is None else level
            if level not in SLEEP_LEVELS or isinstance(level, bool):
                raise error(f"{at}.sleep_level: {level!r:.80} is not 1 (weights kept in host "
                            "memory) or 2 (weights discarded)")
        out.append({"name": name, "model": entry["model"],
                    "model_revision": entry.get("model_revision"),
                    "precision": entry["precision"], "placement": entry["placement"],
                    "memory_share": float(entry["memory_share"]),
                    "request_share": float(entry["request_share"]), "sleep_level": level})
    total = sum(m["request_share"] for m in out)
    if abs(total - 1.0) > 1e-6:
        raise error(f"{where}.models: the request_share values add to {total:g}, not 1")
    if sum(m["placement"] == "swapped" for m in out) == 1:
        raise error(f"{where}.models: one swapped model has no other to swap with (make it "
                    "resident, or swap two or more)")
    return tuple(out)


def check_bursts(raw, models, where: str, error) -> int | None:
    if raw is None:
        return None
    if models is None:
        raise error(f"{where}.model_bursts: alternates between the candidate's `models`; it "
                    "has none")
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise error(f"{where}.model_bursts: expected a positive integer (requests per burst), "
                    f"got {raw!r:.80}")
    return raw

