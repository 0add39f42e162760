"""A deterministic tokenizer of the emulator's own (no model files exist here).

A token is a run of word characters or one other non-space character, so the same
text always gives the same count. Ids are a stable hash of the piece. Generated
text is made of " word" pieces from a fixed list: re-tokenizing the output gives
exactly completion_tokens.
"""

from __future__ import annotations

import json
import re
import zlib

from servingbench.emulator import vision

VOCAB_SIZE = 202048  # Llama 4 vocabulary size (HF config.json vocab_size)
_PIECE = re.compile(r"\w+|[^\w\s]")
WORDS = (
    "the model serves tokens at a measured rate while the scheduler batches requests "
    "from many streams and the cache holds keys and values for every layer of attention "
    "experts route each token through one shared path plus a routed path"
).split()
WORD_JSON = [json.dumps(" " + w)[1:-1] for w in WORDS]  # JSON-escaped, without quotes

# Chat template overhead (Llama 4 style): <|begin_of_text|> + per message
# <|header_start|>role<|header_end|>\n\n…<|eot|>, plus the assistant header.
CHAT_BOS, CHAT_PER_MESSAGE, CHAT_ASSISTANT_HEADER = 1, 4, 3


def tokenize(text: str) -> list[int]:
    return [zlib.crc32(p.encode()) % VOCAB_SIZE for p in _PIECE.findall(text)]


def count(text: str) -> int:
    return len(_PIECE.findall(text))


def pieces(text: str) -> list[str]:
    """The token pieces of `text` (what `tokenize` hashes into ids), one per token."""
    return _PIECE.findall(text)


def _content_tokens(content: object) -> list[int]:
    """A message's content: a text, or parts [{"type": "text", "text": ...}, {"type":
    "image_url", ...}] (an image costs its Llama 4 tiles, emulator/vision.py; an unreadable
    one raises vision.ImageError)."""
    if isinstance(content, str):
        return tokenize(content)
    if not isinstance(content, list):
        return []
    ids: list[int] = []
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "image_url":
            ids += tokenize(" ".join(texts)) + vision.part_tokens(part)
            texts = []
        else:
            texts.append(str(part.get("text", "")))
    return ids + tokenize(" ".join(texts))


def count_images(messages: list) -> int:
    return sum(1 for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
               for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url")


def chat_tokens(messages: list[dict]) -> list[int]:
    ids = [1] * CHAT_BOS
    for msg in messages:
        ids += [2] * (CHAT_PER_MESSAGE - 1) + tokenize(str(msg.get("role", ""))) \
            + _content_tokens(msg.get("content"))
    return ids + [3] * CHAT_ASSISTANT_HEADER
