"""The SSE split's fast path (a one-line `data:` event cut straight from the bytes, the usage
key found by a byte scan) counts exactly what the general path counts."""

from __future__ import annotations

from servingbench.resources.loadgen import records, sse


def _usage(n: int, pad: bytes = b"") -> bytes:
    return (b'data: ' + pad + b'{"choices":[{"index":0,"text":" w"}],"usage":{"prompt_tokens":3,'
            b'"completion_tokens":%d}}' % n + pad + b"\n\n")


def _feed(pieces: list[bytes]) -> records.Request:
    req = records.Request("r", "steady", "c=1", "concurrency", 1.0, 0)
    events = sse.Events(req)
    for k, piece in enumerate(pieces):
        if events.feed(piece, k):
            break
    events.close(())
    return req


def test_padded_and_multi_line_events_count_like_plain_ones():
    plain = [_usage(1), _usage(2), _usage(4), b"data: [DONE]\n\n"]
    odd = [_usage(1, pad=b"  "),  # whitespace around the payload: stripped as before
           b"event: message\ndata: " + _usage(2)[6:],  # two lines: the general path
           _usage(4, pad=b"\t"), b"data: [DONE]\n\n"]
    a, b = _feed(plain), _feed(odd)
    assert a.status == b.status == "ok"
    assert a.chunk_tokens == b.chunk_tokens == [1, 1, 2]
    assert a.input_tokens == b.input_tokens == 3


def test_events_cut_anywhere_count_the_same():
    stream = b"".join([_usage(1), _usage(3), _usage(4), b"data: [DONE]\n\n"])
    whole = _feed([stream])
    for size in (1, 2, 7, 50):
        req = _feed([stream[i:i + size] for i in range(0, len(stream), size)])
        assert req.chunk_tokens == whole.chunk_tokens == [1, 2, 1], size
        assert req.status == "ok"


def test_the_first_usage_key_that_holds_a_count_is_the_one_read():
    # a `"completion_tokens"` key that holds no count comes first: like a regex search, the
    # scan goes on to the next one (here usage's)
    event = (b'data: {"meta":{"completion_tokens":null},"choices":[{"index":0,"text":" w"}],'
             b'"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n')
    req = _feed([event, b"data: [DONE]\n\n"])
    assert req.status == "ok" and req.chunk_tokens == [2]


def test_cached_tokens_in_the_final_usage_chunk_are_read():
    # vLLM 0.32 with continuous usage, as served (tests/engine/test_vllm_live.py): usage on
    # every chunk, the prefix-cache hits (`prompt_tokens_details`) only in the final,
    # choice-less one, after `prompt_tokens` was read from the first
    first = (b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"how",'
             b'"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":300,'
             b'"total_tokens":301,"completion_tokens":1}}\n\n')
    last = (b'data: {"id":"c","object":"text_completion","choices":[],"usage":{'
            b'"prompt_tokens":300,"total_tokens":301,"completion_tokens":1,'
            b'"prompt_tokens_details":{"cached_tokens":256}},"system_fingerprint":"v"}\n\n')
    req = _feed([first, last, b"data: [DONE]\n\n"])
    assert req.status == "ok" and req.chunk_tokens == [1]
    assert req.input_tokens == 300 and req.cached_tokens == 256
