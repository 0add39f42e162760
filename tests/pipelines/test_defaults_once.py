"""Each default of a load run is written once in the product code and read everywhere else:
the token targets, the default engine, max_model_len, the default SLO, the exit statuses 74
and 75, and the record-set names. A second copy typed somewhere is a failure naming the file
and line, so a change of a default cannot miss one of its copies.

The patterns are the default's own spelling (`input_tokens ... 512`, `.get("engine",
"vllm")`, `(2.0, 0.1)`, `= 74`, a tuple of the three record-set names), not every 512."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("pipelines", "assets", "resources")
_RECORD = r'"(?:warmup_log|steady_state_request_log|chunk_log)"'

# what -> (pattern, the one file allowed to hold it)
DEFAULTS = {
    "input-token default 512": (
        r"input_tokens\W{1,8}512\b|\bor 512\b|default 512\b", "resources/contract/candidate.py"),
    "output-token default 128": (
        r"output_tokens\W{1,8}128\b|\bor 128\b|default 128\b", "resources/contract/candidate.py"),
    "default engine": (
        r"""["']engine["'],\s*["']vllm["']|engine:\s*str\s*=\s*["']vllm["']""",
        "resources/contract/candidate.py"),
    "default max_model_len": (r"max_model_len(?::\s*int)?\W{1,8}\d{3,}\b",
                              "resources/contract/candidate.py"),
    "default SLO": (r"\(\s*2(?:\.0)?\s*,\s*0\.1\s*\)", "resources/analysis/metrics.py"),
    "exit status 74": (r"(?:=|return|==)\s*74\b", "resources/contract/exits.py"),
    "exit status 75": (r"(?:=|return|==)\s*75\b", "resources/contract/exits.py"),
    "record-set names": (rf"[(\[]\s*(?:{_RECORD},?\s*){{3}}[)\]]", "resources/contract/schemas.py"),
    "load plan concurrency": (r"\[1, 4, 8, 16, 32\]|\(1, 4, 8, 16, 32\)",
                              "resources/contract/candidate.py"),
}


def product_lines():
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text().splitlines(), 1):
                yield rel, n, line


def found(pattern: str, lines) -> list[str]:
    rx = re.compile(pattern)
    return [f"{rel}:{n}: {line.strip()}" for rel, n, line in lines if rx.search(line)]


@pytest.mark.parametrize("what", list(DEFAULTS))
def test_each_default_is_written_once(what):
    pattern, home = DEFAULTS[what]
    hits = found(pattern, list(product_lines()))
    assert len(hits) == 1 and hits[0].startswith(f"{home}:"), (
        f"{what}: expected once, in {home}; found {len(hits)}:\n" + "\n".join(hits))


def test_the_check_finds_a_second_copy():
    """The patterns catch the copies this project used to have, and leave other numbers be."""
    copies = [("a.py", 1, 'input_tokens=self.input_tokens or targets.get("input_tokens") or 512'),
              ("b.py", 2, 'p.add_argument("--output-tokens", help="default 128 (batch: 64)")'),
              ("c.py", 3, 'if merged.get("engine", "vllm") not in ENGINES:'),
              ("d.py", 4, 'ctx = merged.get("max_model_len", 8192)'),
              ("e.py", 5, "DEFAULT_SLO = (2.0, 0.1)  # contract §3"),
              ("f.py", 6, "DISK_FULL = 74"),
              ("g.py", 7, 'NAMES = ("warmup_log", "steady_state_request_log", "chunk_log")'),
              ("h.py", 8, 'for name in ("chunk_log", "warmup_log", "steady_state_request_log"):')]
    others = [("x.py", 1, "MOONCAKE_BLOCK = 512"), ("y.py", 2, 'RUN_ID = r"[a-z]{1,128}"'),
              ("z.py", 3, "for p in (1, 5, 10, 25, 50, 75, 90, 95, 99):"),
              ("w.py", 4, 'KEYS = ("deployed_model", "warmup_log", "steady_state_request_log",')]
    hit = {what: found(pattern, copies + others) for what, (pattern, _) in DEFAULTS.items()}
    assert [len(hit[w]) for w in ("input-token default 512", "output-token default 128",
                                  "default engine", "default max_model_len", "default SLO",
                                  "exit status 74", "exit status 75", "record-set names")] \
        == [1, 1, 1, 1, 1, 1, 0, 2]
    assert not any(h.startswith(("x.py", "y.py", "z.py", "w.py")) for hs in hit.values() for h in hs)
