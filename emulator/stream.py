"""One generation request on its way out: SSE chunks (or one JSON body), faults,
usage accounting, and its ground-truth record. The engines call `on_token` at each
scheduled time; everything here is synchronous so a step's writes go out together.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable

from servingbench.emulator import api, tokenizer
from servingbench.emulator.faults import Faults
from servingbench.emulator.httpproto import HttpConnection
from servingbench.emulator.metrics import Metrics

DONE = b"data: [DONE]\n\n"
WORD_BYTES = [w.encode() for w in tokenizer.WORD_JSON]
N_WORDS = len(WORD_BYTES)
MALFORMED = b"data: {not json\n\n"


class Stream:
    # A stream gets what it needs from the server (model name, counters, the end-of-stream
    # callback), not the server itself, so this module does not depend on emulator.server.
    def __init__(self, served_model: str, metrics: Metrics,
                 on_finished: Callable[[Stream, int, bool], None], conn: HttpConnection,
                 req: api.GenRequest, faults: Faults, cid: str, request_id: str | None,
                 arrival_ns: int, target: int, finish: str, word_offset: int,
                 reasoning: int = 0, reasoning_field: str = "reasoning_content",
                 details: bool = True):
        self.served_model, self.metrics, self.on_finished = served_model, metrics, on_finished
        self.conn, self.req, self.faults = conn, req, faults
        self.cid, self.request_id = cid, request_id
        self.arrival_ns = arrival_ns  # perf ns, when the request was parsed
        self.start_ns = arrival_ns  # perf ns, when the engine got it (after a first-byte delay)
        self.headers_ns: int | None = None
        self.target, self.finish = target, finish
        self.sent = 0  # tokens written to the client
        self.pending = 0  # tokens produced, not yet written (bundling)
        self.word = word_offset
        # ground truth, flat (scheduled_ns, written_ns, tokens)*: an int array is not tracked
        # by the garbage collector, so long streams do not make full collections slow
        self.gt = array("q")
        conn.gt = self.gt
        self.texts: list[str] = []
        self.alive = True
        self.first_token_ns: int | None = None
        self.stall_ns = int(faults.stall_s * 1e9)
        self.seq = None  # the model engine's Seq
        self.submitted = False
        created = int(time.time())
        model = served_model
        if req.chat:
            head = (f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},'
                    f'"model":"{model}","choices":[')
            self.pre = (head + '{"index":0,"delta":{"content":"').encode()
            self.mid = b'"},"logprobs":null,"finish_reason":'
            self.post = b"}]"
        else:
            head = (f'data: {{"id":"{cid}","object":"text_completion","created":{created},'
                    f'"model":"{model}","choices":[')
            self.pre = (head + '{"index":0,"text":"').encode()
            self.mid = b'","logprobs":null,"finish_reason":'
            self.post = b',"stop_reason":null}]'
        self.head = head.encode()
        self.fast = req.stream and not faults.any
        self.mid_null = self.mid + b"null" + self.post + b"}\n\n"
        self.prompt_details = b'"prompt_tokens_details":{"cached_tokens":%d},' % req.cached_tokens
        self.usage_pre = None  # the bytes between the text and total_tokens
        if req.continuous_usage:
            self.usage_pre = (self.mid + b"null" + self.post
                              + b',"usage":{"prompt_tokens":%d,%b"total_tokens":' % (
                                  req.prompt_tokens, self.prompt_details))
        self.created = created
        # reasoning mode: the first `reasoning` tokens stream as reasoning deltas, the way
        # vLLM's reasoning parser sends them (chat: delta.<field>; completions: choice.<field>)
        self.reasoning = min(reasoning, target)
        self.details = details
        self.kinds: bytearray | None = None  # per ground-truth chunk: 1 reasoning, 0 answer
        if self.reasoning:
            self.fast = False
            self.kinds = bytearray()
            opening = ('{"index":0,"delta":{"' if req.chat else '{"index":0,"text":"","')
            self.rpre = (head + opening + reasoning_field + '":"').encode()
        conn.on_lost = self._client_gone

    @property
    def chunks(self) -> list[list[int]]:
        """[[scheduled_ns, written_ns, tokens], ...] in perf ns."""
        g = self.gt
        return [[g[i], g[i + 1], g[i + 2]] for i in range(0, len(g), 3)]

    # --- helpers -------------------------------------------------------------------------------
    def _usage(self, n: int, final: bool = False) -> bytes:
        p = self.req.prompt_tokens
        extra = b""
        if final and self.reasoning and self.details:  # OpenAI's field, in the final usage
            extra = b',"completion_tokens_details":{"reasoning_tokens":%d}' % min(
                self.reasoning, n)
        return b'"usage":{"prompt_tokens":%d,%b"total_tokens":%d,"completion_tokens":%d%b}' % (
            p, self.prompt_details, p + n, n, extra)

    def _text(self, n: int) -> str:
        words = tokenizer.WORD_JSON
        out = "".join(words[(self.word + i) % len(words)] for i in range(n))
        self.word += n
        return out

    def first_chunk(self) -> bytes:
        """The chat role chunk vLLM sends before any token (completions: none)."""
        if not self.req.chat:
            return b""
        usage = b"," + self._usage(0) if self.req.continuous_usage else b""
        return (self.head + b'{"index":0,"delta":{"role":"assistant","content":""},'
                b'"logprobs":null,"finish_reason":null}]' + usage + b"}\n\n")

    def start(self) -> None:
        """Headers now (streaming); the engine takes it from here."""
        self.headers_ns = time.perf_counter_ns()
        if self.req.stream:
            self.conn.start_stream(first=self.first_chunk())

    # --- the engines' callback --------------------------------------------------------------
    def on_token(self, n: int, scheduled_ns: int) -> bool:
        """`n` new tokens were produced at `scheduled_ns` (perf ns). False: stop producing."""
        if not self.alive:
            return False
        if self.first_token_ns is None:
            self.first_token_ns = scheduled_ns
        if self.fast and self.sent + n < self.target:  # hot path: a plain streamed token
            return self._fast(n, scheduled_ns)
        f = self.faults
        self.pending += n
        produced = self.sent + self.pending
        last = produced >= self.target
        cut = f.disconnect_after if f.disconnect_after is not None else f.malformed_after
        if not self.req.stream:
            if cut is not None and produced >= cut:  # no SSE to break: drop the connection
                self.conn.abort()  # nothing was written: completion_tokens stays 0
                self.record(200, abort=True)
                return False
            self.sent, self.pending = produced, 0
            if last:
                self._finish_full(scheduled_ns)
            return not last
        if cut is not None and self.sent >= cut:
            return self._cut(scheduled_ns)
        if self.pending < f.tokens_per_chunk and not last and (cut is None or produced < cut):
            return True
        k = self.pending if cut is None else min(self.pending, cut - self.sent)
        # reasoning and answer tokens never share an event: a bundle that crosses the end of
        # the reasoning goes out as two events written together (two ground-truth chunks)
        kr = max(0, min(k, self.reasoning - self.sent))
        parts = [(kr, True), (k - kr, False)] if kr and k > kr else [(k, kr > 0)]
        self.pending -= k
        final = last and self.pending == 0
        for i, (n, thinking) in enumerate(parts):
            self.sent += n
            end = i == len(parts) - 1
            # a cut at the last token still cuts: the final chunk goes out, [DONE] never does
            done = end and final and (cut is None or self.sent < cut)
            text = self._text(n)
            usage = b"," + self._usage(self.sent) if self.req.continuous_usage else b""
            fin = (b'"%s"' % self.finish.encode()) if end and final else b"null"
            pre = self.rpre if thinking else self.pre
            data = pre + text.encode() + self.mid + fin + self.post + usage + b"}\n\n"
            stamp = len(self.gt) + 1
            self.gt.extend((scheduled_ns, 0, n))
            if self.kinds is not None:
                self.kinds.append(thinking)
            if done:
                if self.req.include_usage:
                    data += self.head + b"]," + self._usage(self.sent, final=True) + b"}\n\n"
                self.conn.end_stream(data + DONE, stamp)
            else:
                self.conn.write_chunk(data, stamp)
        self.metrics.generation_tokens += k
        if done:
            self.record(200)
            return False
        if cut is not None and self.sent >= cut:
            return self._cut(scheduled_ns)
        return True

    def _fast(self, n: int, scheduled_ns: int) -> bool:
        sent = self.sent = self.sent + n
        if n == 1:
            text = WORD_BYTES[self.word % N_WORDS]
            self.word += 1
        else:
            text = self._text(n).encode()
        if self.usage_pre is not None:
            data = b"%b%b%b%d,\"completion_tokens\":%d}}\n\n" % (
                self.pre, text, self.usage_pre, self.req.prompt_tokens + sent, sent)
        else:
            data = self.pre + text + self.mid_null
        gt = self.gt
        stamp = len(gt) + 1
        gt.append(scheduled_ns)
        gt.append(0)
        gt.append(n)
        self.conn.write_chunk(data, stamp)
        self.metrics.generation_tokens += n
        return True

    def _cut(self, scheduled_ns: int) -> bool:
        if self.faults.disconnect_after is not None:
            self.conn.abort()
        else:
            self.conn.close_after(MALFORMED)
        self.record(200, abort=True)
        return False

    def _finish_full(self, scheduled_ns: int) -> None:
        words = tokenizer.WORDS
        text = "".join(" " + words[(self.word + i) % len(words)] for i in range(self.sent))
        body = api.full_response(self.req.chat, self.cid, self.created, self.served_model,
                                 text, self.finish,
                                 self.req.prompt_tokens, self.sent, self.req.cached_tokens,
                                 min(self.reasoning, self.sent) if self.details else None)
        self.conn.respond(200, body)
        self.headers_ns = time.perf_counter_ns()
        self.gt.extend((scheduled_ns, self.headers_ns, self.sent))
        self.metrics.generation_tokens += self.sent
        self.record(200)

    def finish_empty(self) -> None:
        """The `empty=1` fault: a 200 stream with no content chunk, usage 0, [DONE]."""
        self.start()
        tail = b""
        if self.req.include_usage:
            tail = self.head + b"]," + self._usage(0, final=True) + b"}\n\n"
        if self.req.stream:
            self.conn.end_stream(tail + DONE)
        else:
            self.conn.respond(200, api.full_response(self.req.chat, self.cid, self.created,
                                                     self.served_model, "", "stop",
                                                     self.req.prompt_tokens, 0,
                                                     self.req.cached_tokens))
        self.record(200)

    def _client_gone(self) -> None:
        if self.alive:
            self.record(499, abort=True)  # nginx's "client closed request"

    def record(self, status: int, abort: bool = False) -> None:
        if not self.alive:
            return
        self.alive = False
        self.conn.on_lost = None
        self.on_finished(self, status, abort)
