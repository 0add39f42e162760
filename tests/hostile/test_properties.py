"""Properties, for any input Hypothesis finds: the SSE parser ends every stream with a
status (never another exception) and splits never change what it counts; redaction never
lets a secret through, wherever it sits in the text."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from servingbench.resources.contract.redact import redact, short_error
from servingbench.resources.loadgen import records, sse

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`


def consume(pieces: list[bytes]) -> records.Request:
    """The pieces fed one at a time, as the connection's `data_received` feeds the body
    (the real connection is exercised over loopback in test_fault_matrix)."""
    req = records.Request("r", "steady", "c=1", "concurrency", 1.0, 0)
    events = sse.Events(req)
    try:
        for k, piece in enumerate(p for p in pieces if p):
            if events.feed(piece, k):
                break
        events.close(())
    except sse.Malformed as exc:
        req.status, req.error = "protocol_error", str(exc)
    return req


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_any_bytes_end_with_a_status(pieces):
    req = consume(pieces)
    assert req.status in ("ok", "protocol_error", "disconnect")
    assert len(req.chunk_at) == len(req.chunk_tokens)
    assert all(0 < t <= sse.MAX_TOKENS for t in req.chunk_tokens)
    for n in (req.usage_total, req.input_tokens):
        assert n is None or 0 <= n <= sse.MAX_TOKENS


@st.composite
def events(draw):
    """A well-formed stream: cumulative usage per chunk, then [DONE], in chosen framing."""
    steps = draw(st.lists(st.integers(0, 5), min_size=1, max_size=20))
    assume(sum(steps) > 0)
    total, lines = 0, []
    for k in steps:
        total += k
        lines.append(b'data: {"choices":[{"text":"x"}],"usage":{"prompt_tokens":7,'
                     b'"completion_tokens":%d}}' % total)
    lines.append(b"data: [DONE]")
    sep = draw(st.sampled_from([b"\n\n", b"\r\n\r\n"]))
    return sep.join(lines) + sep, steps


@settings(max_examples=200, deadline=None)
@given(events(), st.lists(st.integers(0, 10_000), max_size=30))
def test_splits_never_change_the_counts(stream, cuts):
    data, steps = stream
    req = consume(split(data, cuts))
    assert req.status == "ok"
    assert req.chunk_tokens == [k for k in steps if k > 0]
    assert req.usage_total == sum(steps) and req.input_tokens == 7


def test_an_event_past_the_cap_is_a_protocol_error():
    big = b'data: {"x":"' + b"a" * sse.MAX_EVENT_BYTES
    req = consume([big[i:i + 65536] for i in range(0, len(big), 65536)])
    assert req.status == "protocol_error" and "exceeds" in req.error


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
TEMPLATES = {
    "url userinfo": ("http://admin:{}@10.0.0.1:8000/v1", URLSAFE + ".~"),
    "aws env": ("AWS_SECRET_ACCESS_KEY={}", B64),
    "aws config": ("aws_secret_access_key = {}", B64),
    "basic": ("Basic {}", B64),
    "authorization": ("Authorization: Basic {}", B64),
    "bearer": ("Bearer {}", URLSAFE + "."),
    "hf": ("hf_{}", B64[:62]),
    "eks": ("k8s-aws-v1.{}", URLSAFE),
    "json api key": ('{{"api_key": "{}"}}', URLSAFE),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(TEMPLATES)), st.data(), st.text(max_size=80), st.text(max_size=80))
def test_redaction_never_lets_a_secret_through(kind, data, before, after):
    template, alphabet = TEMPLATES[kind]
    secret = data.draw(st.text(alphabet=alphabet, min_size=12, max_size=60))
    assume(secret not in before + after + template)  # e.g. "Authorizatio" is no secret
    text = f"{before} {template.format(secret)} {after}"
    assert secret not in redact(text)
    assert secret not in short_error(text)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=8, max_size=40).filter(lambda s: s.strip() == s and " " not in s),
       st.text(max_size=300), st.text(max_size=300))
def test_a_known_secret_is_redacted_anywhere(secret, before, after):
    assume(secret not in before + after)
    assert secret not in short_error(before + secret + after, (secret,))
