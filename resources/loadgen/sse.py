"""The SSE split of a streaming OpenAI-compatible answer: events, usage and chunk timing.

Per chunk the parser does a byte split and, when the server streams cumulative usage,
one regex search for `"completion_tokens":N` - no JSON decode. Only chunks without usage
(servers that do not support `continuous_usage_stats`), and any chunk the fast path does
not fully recognise, are decoded and checked field by field. A reasoning model's chunk
(`"reasoning` in the bytes) keeps the fast path when it is plainly reasoning text and no
answer text (contract §2.3 `kind`); any other (both in one delta, a reasoning field that is
not a string, usage details) is decoded. Bytes that are not an OpenAI
stream raise Malformed: the request is a protocol_error (connections.py records it).
"""

from __future__ import annotations

import json
import re

from servingbench.resources.contract.redact import short_error
from servingbench.resources.loadgen.records import Request

# No model's context comes near 2^31 tokens: a larger count is a server fault, and the
# bound keeps every int64 sum downstream far from overflow. The fast-path regexes take at
# most 10 digits followed by the end of the value, so a longer, negative or fractional
# number falls through to the checked slow path.
MAX_TOKENS = (1 << 31) - 1
MAX_EVENT_BYTES = 1 << 20  # one SSE event; a longer one is a protocol_error
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,10})\s*[,}]')
_COMPLETION_KEY = b'"completion_tokens"'
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d{1,10})\s*[,}]')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d{1,10})\s*[,}]')
# The fast path's shape check: `choices`, when present, opens a list whose first element is
# an object, or an empty list. Anything else (`[1]`, `null`, a string) goes to the checked
# slow path, which refuses it: usage beside a broken chunk is never counted as tokens.
_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*[{\]]')
# A reasoning chunk's reasoning text (vLLM's and SGLang's spellings), a non-empty string; and
# answer text beside it (a non-empty `content` or `text`). The fast path counts a chunk as
# reasoning only with the first and without the second.
_REASONING_TEXT = re.compile(rb'"reasoning(?:_content)?"\s*:\s*"(?:[^"\\]|\\.)')
_ANSWER_TEXT = re.compile(rb'"(?:content|text)"\s*:\s*"(?:[^"\\]|\\.)')
_REASONING_NULL = re.compile(rb'"reasoning(?:_content)?"\s*:\s*null\s*[,}]')
# Events per request: a token per chunk at most, plus role, usage-only and keep-alive
# events; a stream past CHUNK_FACTOR x max_tokens + CHUNK_SLACK is no honest answer, and
# without a bound one hostile stream grows memory and the chunk log without end.
CHUNK_FACTOR = 4
CHUNK_SLACK = 16
DEFAULT_MAX_EVENTS = CHUNK_FACTOR * 131072 + CHUNK_SLACK  # a body without max_tokens
# Error text keeps this much of what the server sent: redaction runs on all of it before
# the message is cut to its short length, so a secret is never cut in half first.
SNIP = 1024


class Malformed(Exception):
    """The server's bytes are not a valid OpenAI stream: the request is a protocol_error."""


_MAX_TOKENS_FIELD = re.compile(rb'"max_tokens"\s*:\s*(\d{1,10})\s*[,}]')


def max_events(body: bytes) -> int:
    """The event bound of one request from its body's `max_tokens` (the default without)."""
    m = _MAX_TOKENS_FIELD.search(body)
    return DEFAULT_MAX_EVENTS if m is None else CHUNK_FACTOR * int(m.group(1)) + CHUNK_SLACK


def _count(value, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise Malformed(f"usage.{name} is not a token count: {str(value)[:40]}")
    return value


REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM's older and newer spelling


def _has_content(obj: dict) -> tuple[bool, bool]:
    """(answer, reasoning): whether the chunk carries answer text, and reasoning text (a
    `reasoning_content` or `reasoning` string, in a chat delta or beside a completion's
    text, as vLLM's and SGLang's reasoning parsers send it). Every field is type-checked."""
    if "choices" not in obj:
        return False, False  # a usage-only chunk
    choices = obj["choices"]
    if not isinstance(choices, list):  # null included: a list of objects, or empty
        raise Malformed(f"choices is a {type(choices).__name__}, not a list")
    answer = reasoning = False
    for choice in choices:
        if not isinstance(choice, dict):
            raise Malformed(f"a choice is a {type(choice).__name__}, not an object")
        delta = choice.get("delta") or choice.get("message")
        if delta is not None and not isinstance(delta, dict):
            raise Malformed(f"choice delta is a {type(delta).__name__}, not an object")
        for where in (choice, delta or {}):
            for key in ("text", "content", *REASONING_FIELDS):
                part = where.get(key)
                if part is not None and not isinstance(part, str):
                    raise Malformed(f"choice {key} is a {type(part).__name__}, not a string")
                if part:
                    if key in REASONING_FIELDS:
                        reasoning = True
                    else:
                        answer = True
    return answer, reasoning


def _add_chunk(req: Request, at: int, tokens: int, reasoning: bool) -> None:
    """One content chunk; its kind is kept once the request has streamed any reasoning."""
    req.chunk_at.append(at)
    req.chunk_tokens.append(tokens)
    if req.chunk_reasoning is not None:
        req.chunk_reasoning.append(reasoning)
    elif reasoning:  # the first reasoning chunk: every chunk before it was an answer
        req.chunk_reasoning = bytearray(len(req.chunk_at) - 1)
        req.chunk_reasoning.append(1)


def _add_usage(req: Request, total: int, at: int, reasoning: bool = False) -> None:
    """One cumulative `completion_tokens`: the increase is this chunk's token count."""
    req.usage_total = total
    if req.no_usage_content:
        return  # a usage-only final chunk after content streamed without usage
    delta = total - req.usage_cum
    if delta > 0:
        req.usage_cum = total
        _add_chunk(req, at, delta, reasoning)
    elif delta < 0:
        raise Malformed(f"usage.completion_tokens went down from {req.usage_cum} to {total}")


def _on_data(req: Request, payload: bytes, at: int) -> bool:
    """Handle one `data:` payload; True on `[DONE]`."""
    if payload == b"[DONE]":
        return True
    thinking = b'"reasoning' in payload  # a reasoning model's chunk, or its usage details
    # _COMPLETION.search written as bytes.find (a fast scan) and a match where the key
    # starts: the same first match, without the regex engine walking the whole payload
    k = payload.find(_COMPLETION_KEY)
    m = None
    while k >= 0:
        m = _COMPLETION.match(payload, k)
        if m is not None:
            break
        k = payload.find(_COMPLETION_KEY, k + 1)
    if m is not None and payload[0] == 123 and payload[-1] == 125:  # {...} (m: not empty)
        c = payload.find(b'"choices"')
        if c >= 0 and _CHOICES.match(payload, c) is None:
            return _on_json(req, payload, at)  # a shape the fast path does not take
        # a reasoning chunk the fast path takes: reasoning text as a string, no answer text
        # beside it; anything else with "reasoning in it (both kinds in one delta, a
        # reasoning field of another type, usage details) is decoded and checked
        if thinking:
            if payload.count(b'"reasoning') == len(_REASONING_NULL.findall(payload)):
                thinking = False  # SGLang's `"reasoning_content": null` on an answer chunk
            elif (_REASONING_TEXT.search(payload) is None
                  or _ANSWER_TEXT.search(payload) is not None):
                return _on_json(req, payload, at)
        if req.input_tokens is None and b'"prompt_tokens"' in payload:
            p = _PROMPT.search(payload)
            if p is None or b'"image' in payload:  # a count the fast path cannot read or check
                return _on_json(req, payload, at)
            req.input_tokens = _count(int(p.group(1)), "prompt_tokens")
        # on any chunk, not only the first with prompt_tokens: vLLM with continuous usage
        # puts prompt_tokens_details (the prefix-cache hits) in the final usage chunk only
        if b'"cached_tokens"' in payload:
            c = _CACHED.search(payload)
            if c is None:
                return _on_json(req, payload, at)  # a cached count the fast path cannot read
            req.cached_tokens = _count(int(c.group(1)), "cached_tokens")
        if req.text is not None:
            _keep_text(req, payload)
        # _add_usage written out: this is the per-event hot path, where the call itself
        # was measurable side by side (docs/reliability.md, "Cost on the hot path")
        total = int(m.group(1))  # the regex admits 0..9_999_999_999 only
        if total > MAX_TOKENS:
            raise Malformed(f"usage.completion_tokens is not a token count: {total}")
        req.usage_total = total
        if req.no_usage_content:
            return False  # a usage-only final chunk after content streamed without usage
        delta = total - req.usage_cum
        if delta > 0:
            req.usage_cum = total
            req.chunk_at.append(at)
            req.chunk_tokens.append(delta)
            if thinking:
                if req.chunk_reasoning is None:  # the first: every chunk before it answered
                    req.chunk_reasoning = bytearray(len(req.chunk_at) - 1)
                req.chunk_reasoning.append(1)
            elif req.chunk_reasoning is not None:  # an answer chunk after reasoning ones
                req.chunk_reasoning.append(0)
        elif delta < 0:
            raise Malformed(f"usage.completion_tokens went down from {req.usage_cum} to {total}")
        return False
    return _on_json(req, payload, at)


def _on_json(req: Request, payload: bytes, at: int) -> bool:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
        raise Malformed(f"malformed SSE data: {payload[:SNIP]!r}") from None
    if not isinstance(obj, dict):
        raise Malformed(f"malformed SSE data: {payload[:SNIP]!r}")
    if "error" in obj:
        err = obj["error"]
        raise Malformed("server error in stream: " + str(err.get("message") if isinstance(err, dict) else err)[:SNIP])
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise Malformed(f"usage is a {type(usage).__name__}, not an object")
    total = prompt = cached = thought = None
    if usage:
        if usage.get("completion_tokens") is not None:
            total = _count(usage["completion_tokens"], "completion_tokens")
        if usage.get("prompt_tokens") is not None:
            prompt = _count(usage["prompt_tokens"], "prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if details is not None and not isinstance(details, dict):
            raise Malformed(f"usage.prompt_tokens_details is a {type(details).__name__}")
        if details and details.get("cached_tokens") is not None:
            cached = _count(details["cached_tokens"], "cached_tokens")
        if details and details.get("image_tokens") is not None:  # checked, not recorded
            _count(details["image_tokens"], "prompt_tokens_details.image_tokens")
        out = usage.get("completion_tokens_details")
        if out is not None and not isinstance(out, dict):
            raise Malformed(f"usage.completion_tokens_details is a {type(out).__name__}")
        if out and out.get("reasoning_tokens") is not None:
            thought = _count(out["reasoning_tokens"], "completion_tokens_details.reasoning_tokens")
    answer, reasoning = _has_content(obj)  # every field checked before any is kept
    if req.text is not None:
        req.text.append(_content(obj))
    if prompt is not None and req.input_tokens is None:
        req.input_tokens = prompt
    if cached is not None:
        req.cached_tokens = cached
    if thought is not None:
        req.reasoning_usage = thought
    # a chunk with any answer text is an answer chunk (its first token may follow reasoning
    # in the same delta); one with reasoning text only is a reasoning chunk
    thinking = reasoning and not answer
    if total is not None and (not req.no_usage_content or not (answer or reasoning)):
        _add_usage(req, total, at, thinking)  # a cumulative-usage chunk
        return False
    if answer or reasoning:
        req.no_usage_content = True
        _add_chunk(req, at, 1, thinking)
    if total is not None:
        req.usage_total = total
    return False


def _content(obj: dict) -> str:
    """The answer text of one chunk (multi-turn keeps it for the next turn's history);
    anything that is not text is skipped, never trusted."""
    parts = []
    choices = obj.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            parts.append(choice["text"])
        delta = choice.get("delta") or choice.get("message")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
    return "".join(parts)


def _keep_text(req: Request, payload: bytes) -> None:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        return  # the fast path's regex matched a broken chunk: nothing to keep
    if isinstance(obj, dict):
        req.text.append(_content(obj))


def _on_event(req: Request, event: bytes, at: int) -> bool:
    if event[:6] == b"data: " and b"\n" not in event:  # the common one-line event
        return _on_data(req, event[6:].strip(), at)
    done = False
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            done = _on_data(req, line[5:].strip(), at) or done
    return done


class Events:
    """The SSE split of one response body, fed as its bytes arrive.

    The common read holds whole events: they are cut straight from the bytes. Only a partial
    event waits in `buf`, a bytearray that grows in place; the separator search resumes
    where the last one stopped, so an event that trickles in is scanned once.
    """

    __slots__ = ("req", "buf", "scan", "cr", "done", "n", "max_events")

    def __init__(self, req: Request, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.req = req
        self.n = 0  # events so far
        self.max_events = max_events
        self.buf = bytearray()
        self.scan = 0
        self.cr = False  # the last piece ended in "\r": its "\n" may start the next one
        self.done = False

    def feed(self, data: bytes, at: int) -> bool:
        """Count the events completed by `data` (read at `at`); True once `[DONE]` is seen.
        Raises Malformed for bytes that are not an OpenAI stream."""
        if self.cr or 13 in data:  # a "\r" (an int needle: no buffer to acquire)
            if self.cr:
                data = b"\r" + data
            self.cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n")[:-1] if self.cr else data.replace(b"\r\n", b"\n")
        buf = self.buf
        if buf:
            buf += data
            data = buf
        req, start, scan = self.req, 0, self.scan
        find, end = data.find, len(data)
        while scan < end:  # the common read ends with its last event: no search past it
            one_line = False
            if scan == start:  # a fresh event: its first newline says whether it is one line
                i = find(b"\n", start)
                if i < 0:
                    break
                if i + 1 < end and data[i + 1] == 10:
                    one_line = True
                else:
                    i = find(b"\n\n", i)
                    if i < 0:
                        break
            else:
                i = find(b"\n\n", scan)
                if i < 0:
                    break
            # the common one-line `data: {...}` event: its payload is cut straight from the
            # bytes (one copy, not three: event, payload, stripped payload), and stripped
            # only when it does not already start with `{` and end with `}`
            if one_line and data.startswith(b"data: ", start):
                if data[start + 6] == 123 and data[i - 1] == 125:  # {...}
                    done = _on_data(req, data[start + 6:i], at)
                else:
                    done = _on_data(req, data[start + 6:i].strip(), at)
            else:
                done = _on_event(req, data[start:i], at)
            start = scan = i + 2
            self.n += 1
            if self.n > self.max_events:
                raise Malformed(f"more than {self.max_events} SSE events for one request "
                                f"({CHUNK_FACTOR} x max_tokens + {CHUNK_SLACK})")
            if done:
                self.done = True
                return True
        if data is buf:
            if start:
                del buf[:start]  # O(1): a bytearray drops its head by moving its start
            self.scan = len(buf) - 1 if buf else 0
        elif start < len(data):
            self.buf = bytearray(memoryview(data)[start:])
            self.scan = len(self.buf) - 1
        else:
            self.scan = 0  # the common read: whole events only, nothing left over
        if self.scan >= MAX_EVENT_BYTES:
            raise Malformed(f"an SSE event exceeds {MAX_EVENT_BYTES} bytes without ending")
        return False

    def close(self, secrets: tuple[str, ...]) -> None:
        """The body is over: set the request's status from what the stream said."""
        req = self.req
        n = len(req.chunk_at)
        if self.done:
            if n:
                req.status = "ok"
            else:
                req.status, req.error = "protocol_error", "empty completion: [DONE] with no output token"
            return
        tail = bytes(self.buf).strip()
        if tail.startswith(b"data:"):
            try:
                json.loads(tail[5:].strip())
            except (ValueError, RecursionError):
                req.status, req.error = "protocol_error", short_error(
                    f"malformed SSE data at end of stream: {tail[5:SNIP]!r}", secrets)
                return
        req.status, req.error = "disconnect", f"stream ended without [DONE] after {n} chunks"

