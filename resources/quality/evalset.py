"""The evaluation set: items with exactly checkable answers, generated from a seed, so every
candidate of a group answers the very same questions and nothing is downloaded.

Five kinds, drawn in turn: arithmetic (a + b, a - b, a × b with small operands), counting
(how many times a letter occurs in a word), copying (repeat a word), ordering (the smallest
of a few numbers) and short factual recall (facts.json, kept in the repository). A user
JSONL of {"prompt", "answer"} rows may be appended (the candidate's quality.dataset).

`eval_set_sha256` is the hash of the canonical JSON of every item: two runs are comparable
only when it is equal.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

FACTS = Path(__file__).with_name("facts.json")
KINDS = ("arithmetic", "counting", "copying", "ordering", "recall")
WORDS = ("banana", "mississippi", "letter", "committee", "balloon", "coffee", "pepper",
         "bookkeeper", "address", "success", "essential", "parallel", "tomorrow", "giraffe",
         "apple", "window", "garden", "rabbit", "yellow", "summer")
COPY_WORDS = ("river", "candle", "orbit", "meadow", "falcon", "marble", "pillow", "harbor",
              "violet", "tunnel", "copper", "saddle", "lantern", "pebble", "walnut", "thunder")


class EvalSetError(ValueError):
    """A user evaluation file is unreadable or malformed; the message names the line."""


@dataclass(frozen=True)
class Item:
    item_id: str
    kind: str
    prompt: str
    answer: str


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        a, b = rng.randint(10, 60), rng.randint(1, 30)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    sym = {"+": "+", "-": "-", "*": "×"}[op]
    return f"What is {a} {sym} {b}? Reply with the number only.", str(value)


def _counting(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    letter = rng.choice(sorted(set(word)))
    return (f'How many times does the letter "{letter}" appear in the word "{word}"? '
            "Reply with the number only.", str(word.count(letter)))


def _copying(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(COPY_WORDS)
    return f'Repeat this word exactly, and nothing else: {word}', word


def _ordering(rng: random.Random) -> tuple[str, str]:
    nums = rng.sample(range(1, 100), 4)
    listed = ", ".join(str(n) for n in nums)
    return f"Which is the smallest of these numbers: {listed}? Reply with the number only.", \
        str(min(nums))


def _recall(rng: random.Random, facts: list[dict]) -> tuple[str, str]:
    fact = rng.choice(facts)
    return fact["prompt"], fact["answer"]


def default_items(n: int, seed: int = 0) -> list[Item]:
    """`n` items, the kinds in turn, each drawn from the seeded generator."""
    facts = json.loads(FACTS.read_text())
    rng = random.Random(f"servingbench-quality:{seed}")
    items = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        prompt, answer = (_recall(rng, facts) if kind == "recall"
                          else {"arithmetic": _arithmetic, "counting": _counting,
                                "copying": _copying, "ordering": _ordering}[kind](rng))
        items.append(Item(f"{kind}-{i:04d}", kind, prompt, answer))
    return items


def load_jsonl(path: Path) -> list[Item]:
    items = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise EvalSetError(f"{path}: cannot read ({exc})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise EvalSetError(f"{path}:{n}: not a JSON line") from None
        if not (isinstance(row, dict) and isinstance(row.get("prompt"), str)
                and isinstance(row.get("answer"), str | int | float)):
            raise EvalSetError(f'{path}:{n}: expected {{"prompt": str, "answer": str}}')
        items.append(Item(f"user-{n:04d}", "user", row["prompt"], str(row["answer"])))
    if not items:
        raise EvalSetError(f"{path}: no rows")
    return items


def build(n: int, seed: int = 0, dataset: Path | None = None) -> tuple[str, list[Item]]:
    """(eval_set name, items)."""
    items = default_items(n, seed)
    name = f"servingbench-default:n={n}:seed={seed}"
    if dataset is not None:
        items += load_jsonl(dataset)
        name += f"+{Path(dataset).name}"
    return name, items


def set_sha256(items: list[Item]) -> str:
    doc = json.dumps([asdict(i) for i in items], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()
