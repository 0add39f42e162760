"""Prompts and request bodies: built to a target token length, unique by default.

Lengths are calibrated with the server's `/tokenize` when it has one (vLLM, the
emulator); otherwise one token per vocabulary word is assumed and the scenario says
`prompt_sizing: estimate`. Every prompt starts with a random prefix drawn from the
run's seeded generator, so prefix-cache hits never mix into TTFT; the `shared` prefix
mode puts one fixed text of `shared_prefix_tokens` first, to measure cache hits on purpose.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import httpx
from servingbench.resources.http import control
from servingbench.resources.loadgen import images
from servingbench.resources.loadgen.config import MAX_TOKENS, LoadConfig, jsonl
from servingbench.resources.loadgen.errors import LoadConfigError

VOCAB = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force"
).split()
PREFIX_WORDS = 8
TOKENIZE_MAX_BYTES = 16 << 20  # a token id list for a 128k-token prompt is about 1 MiB
TOKENIZE_DEADLINE_S = 30.0


def filler_words(rng: random.Random, n_words: int) -> list[str]:
    """`n_words` vocabulary words drawn from `rng`: the one prompt filler (prefixes and
    fixed-length prompts here, the trace replay's blocks and unique prompts)."""
    return [rng.choice(VOCAB) for _ in range(max(n_words, 0))]


# request bodies: compact JSON; a prompt that ends in a cached filler is spliced in at _MARK
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_MARK = "\x00servingbench:prompt\x00"
_MARK_JSON = _ENCODE(_MARK)

MAX_PROMPT_CHARS = 8 * MAX_TOKENS  # a few characters per token, generously


@dataclass(frozen=True)
class Item:
    prompt: str | list[dict]  # a text, or chat messages (multi-turn history)
    output_tokens: int
    # images of the prompt: (width, height) to generate, or a data URL (a dataset's file)
    images: tuple = ()


def _row_images(row: dict, path: Path, n: int, files: images.FileImages) -> tuple:
    """A dataset row's `images`: sizes `"WxH"` to generate, or image files (relative to the
    dataset's folder, inside it), read once here."""
    value = row.get("images", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LoadConfigError(f"{path}:{n}: images: expected a list of \"WIDTHxHEIGHT\" sizes "
                              "or image file paths")
    out = []
    for v in value:
        if images.looks_like_size(v):
            out.append(images.parse_size(v, f"{path}:{n}: images"))
        else:
            out.append(files.url(v, f"{path}:{n}: images"))
    return tuple(out)


def _length(v) -> bool:
    return type(v) is int and 1 <= v <= MAX_TOKENS


def load_dataset(path: Path) -> list[dict]:
    """The rows of a JSONL dataset; every length is 1..MAX_TOKENS (a huge one would build a
    prompt that exhausts memory) and every prompt at most MAX_PROMPT_CHARS."""
    rows = []
    files = images.FileImages(path.parent)
    for n, row in jsonl(path):
        ok_prompt = isinstance(row, dict) and isinstance(row.get("prompt"), str)
        ok_pair = isinstance(row, dict) and isinstance(row.get("input_tokens"), int)
        if not (ok_prompt or ok_pair) or not isinstance(row.get("output_tokens", 1), int):
            raise LoadConfigError(
                f"{path}:{n}: expected {{\"prompt\": str[, \"output_tokens\": int]}} "
                "or {\"input_tokens\": int, \"output_tokens\": int}"
            )
        for key in ("input_tokens", "output_tokens"):
            if key in row and not _length(row[key]):
                raise LoadConfigError(f"{path}:{n}: {key}: expected an integer from 1 to "
                                      f"{MAX_TOKENS:,}, got {str(row[key])[:40]!r}")
        if ok_prompt and len(row["prompt"]) > MAX_PROMPT_CHARS:
            raise LoadConfigError(f"{path}:{n}: prompt: {len(row['prompt']):,} characters, "
                                  f"above the maximum {MAX_PROMPT_CHARS:,}")
        if "images" in row:
            row = {**row, "images": _row_images(row, path, n, files)}
        rows.append(row)
    if not rows:
        raise LoadConfigError(f"{path}: no rows")
    return rows


class Tokenizer:
    """Counts tokens with the server's own tokenizer, or estimates one per word.

    Two shapes are spoken: vLLM's (and the emulator's) `POST /tokenize {"model", "prompt"}`
    → `{"count"}` or `{"tokens"}`, and llama-cpp-python's `POST /extras/tokenize/count
    {"model", "input"}` → `{"count"}`. The first that answers 200 is kept for the run."""

    SHAPES = (("/tokenize", "prompt"), ("/extras/tokenize/count", "input"))

    def __init__(self, base_url: str, model: str, headers: dict[str, str], enabled: bool) -> None:
        self.base_url, self.model, self.headers = base_url, model, headers
        self.url = f"{base_url}/tokenize"
        self.available = enabled
        self.calls = 0
        self._shapes = list(self.SHAPES)

    def _ask(self, path: str, field: str, text: str) -> int | None:
        """The count from one shape, or None (refused, malformed, too big, too slow)."""
        try:
            with control.client(timeout=TOKENIZE_DEADLINE_S, trust_env=False) as http:
                r, raw = control.request(http, "POST", f"{self.base_url}{path}",
                                         headers=self.headers,
                                         json={"model": self.model, field: text},
                                         max_bytes=TOKENIZE_MAX_BYTES,
                                         deadline_s=TOKENIZE_DEADLINE_S)
            if r.status_code == 200:
                body = json.loads(raw)
                n = body.get("count")
                n = len(body["tokens"]) if n is None else n
                if type(n) is int and 0 <= n < 1 << 31:
                    return n
        except (httpx.HTTPError, control.ControlError, ValueError, KeyError, TypeError,
                AttributeError, RecursionError):
            pass
        return None

    def count(self, text: str) -> int:
        while self.available and self._shapes:
            path, field = self._shapes[0]
            n = self._ask(path, field, text)
            if n is not None:
                self.calls += 1
                self.url = f"{self.base_url}{path}"
                self._shapes = self._shapes[:1]   # this server's shape, from now on
                return n
            self._shapes.pop(0)
        self.available = False
        return len(text.split())


class Prompts:
    def __init__(self, cfg: LoadConfig, tokenizer: Tokenizer) -> None:
        self.cfg, self.tok = cfg, tokenizer
        self.rng = random.Random(f"{cfg.seed}:prompts")
        self.filler_rng = random.Random(f"{cfg.seed}:filler")
        self.dataset = load_dataset(Path(cfg.dataset)) if cfg.dataset else None
        self._filler: dict[int, str] = {}
        self._escaped: dict[str, str] = {}  # a filler's JSON string, quotes included
        self.words_per_token: float | None = None
        self.shared = self._shared_text() if cfg.prefix == "shared" else ""
        self.issued = 0
        self.worker, self.workers = 0, 1
        self.images = images.Images(cfg.seed)

    def for_worker(self, index: int, count: int) -> None:
        """Worker `index` of `count`: its own random prefixes (two workers never send the same
        prompt, so no prefix-cache hit appears that one worker would not see), and the
        dataset rows whose index is its own."""
        self.worker, self.workers = index, count
        if index:
            self.rng = random.Random(f"{self.cfg.seed}:prompts:w{index}")
            self.images = images.Images(f"{self.cfg.seed}:w{index}")

    # --- calibration ----------------------------------------------------------------
    def _words(self, n: int) -> str:
        return " ".join(filler_words(random.Random(f"{self.cfg.seed}:fill:{n}"), n))

    def _fit(self, target: int, head: str) -> str:
        """Filler text so that `head + filler` counts `target` tokens (a few /tokenize calls)."""
        guess = target - len(head.split())
        if self.words_per_token is not None:
            guess = round(guess * self.words_per_token)
        text = self._words(guess)
        for _ in range(6):
            n = self.tok.count((head + " " + text).strip())
            if n == target or not self.tok.available:
                break
            guess = max(0, guess + (target - n))
            text = self._words(guess)
        return text

    def _shared_text(self) -> str:
        return self._fit(self.cfg.shared_prefix_tokens, "")

    def filler(self, target: int) -> str:
        if target not in self._filler:
            sample = self._prefix()
            head = f"{self.shared} {sample}".strip()
            self._filler[target] = self._fit(target, head)
            if self.words_per_token is None and self.tok.available and target > 0:
                words = len((head + " " + self._filler[target]).split())
                self.words_per_token = words / target
        return self._filler[target]

    @property
    def sizing(self) -> str:
        return "tokenize" if self.tok.available else "estimate"

    # --- prompts --------------------------------------------------------------------
    def _prefix(self) -> str:
        return " ".join(filler_words(self.rng, PREFIX_WORDS))

    def next_item(self) -> Item:
        cfg = self.cfg
        i = self.issued
        self.issued += 1
        out = cfg.output_tokens
        pictures = (cfg.image_size,) * cfg.images
        if self.dataset is not None:
            row = self.dataset[(i * self.workers + self.worker) % len(self.dataset)]
            out = row.get("output_tokens", out)
            pictures = row.get("images", pictures)
            if "prompt" in row:
                return Item(f"{self._prefix()} {row['prompt']}", out, pictures)
            target = row["input_tokens"]
        else:
            target = cfg.input_tokens
        head = f"{self.shared} {self._prefix()}".strip()
        return Item(f"{head} {self.filler(target)}", out, pictures)

    def image_parts(self, pictures: tuple) -> list[dict]:
        return self.images.parts(list(pictures))

    def body(self, item: Item, stream_options: dict | None) -> bytes:
        cfg = self.cfg
        req: dict = {"model": cfg.model, "max_tokens": item.output_tokens, "stream": True,
                     "temperature": 0}
        if cfg.api == "chat":
            msgs = item.prompt
            if isinstance(msgs, list):
                req["messages"] = msgs
            elif item.images:  # the text, then the images (built now: each one unique)
                req["messages"] = [{"role": "user", "content": images.message_content(
                    msgs, self.image_parts(item.images))}]
            else:
                req["messages"] = [{"role": "user", "content": msgs}]
        else:
            req["prompt"] = item.prompt
        if stream_options is not None:
            req["stream_options"] = stream_options
        if cfg.ignore_eos:
            req["ignore_eos"] = True
            req["min_tokens"] = item.output_tokens
        text = item.prompt
        tail = self._tail(text) if isinstance(text, str) else None
        if tail is None:
            return _ENCODE(req).encode()
        # The text ends in a filler this workload escaped before: only its head (the
        # request's own few words) is escaped now, a tenth of a 512-token prompt's bytes
        # (the rest of a closed loop's per-request work is ~60 µs; this was ~5 of it).
        if cfg.api == "chat":
            content = req["messages"][0]["content"]
            if isinstance(content, list):  # text then images: only the text part is spliced
                content[0]["text"] = _MARK
            else:
                req["messages"][0]["content"] = _MARK
        else:
            req["prompt"] = _MARK
        head = _ENCODE(text[:len(text) - len(tail)])
        return _ENCODE(req).replace(_MARK_JSON, head[:-1] + self._escaped[tail][1:], 1).encode()

    def _tail(self, text: str) -> str | None:
        """The cached filler `text` ends with, if it is long enough to be worth it."""
        for filler in self._filler.values():
            if len(filler) >= 256 and text.endswith(filler):
                if filler not in self._escaped:
                    self._escaped[filler] = _ENCODE(filler)
                return filler
        return None

    def scenario(self, stream_options: dict | None) -> dict:
        cfg = self.cfg
        kind = cfg.scenario.describe() if cfg.scenario is not None else {"kind": "fixed"}
        return {**kind,
            "input_tokens": None if self.dataset else cfg.input_tokens,
            "output_tokens": None if self.dataset else cfg.output_tokens,
            "dataset": str(cfg.dataset) if cfg.dataset else None,
            "api": cfg.api,
            "prefix": cfg.prefix,
            "shared_prefix_tokens": cfg.shared_prefix_tokens if cfg.prefix == "shared" else 0,
            "prompt_sizing": self.sizing,
            "ignore_eos": cfg.ignore_eos,
            "stream_options": stream_options,
            "arrival": cfg.arrival,
            "seed": cfg.seed,
            "images": cfg.images or None,
            "image_size": f"{cfg.image_size[0]}x{cfg.image_size[1]}" if cfg.images else None,
        }
