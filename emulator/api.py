"""The OpenAI/vLLM request contract: validation with vLLM's error shape, response bodies.

Errors: {"error": {"message", "type", "param", "code"}} with the HTTP status in code
(vLLM's ErrorResponse): 400 BadRequestError, 404 NotFoundError, 429/500 as faulted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from servingbench.emulator import tokenizer, vision

ERROR_TYPES = {400: "BadRequestError", 401: "Unauthorized", 404: "NotFoundError", 405: "MethodNotAllowed",
               429: "TooManyRequestsError", 500: "InternalServerError",
               503: "ServiceUnavailableError"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    err = {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param,
           "code": status}
    return json.dumps({"error": err}).encode()


@dataclass(frozen=True)
class GenRequest:
    chat: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    prompt_tokens: int
    max_tokens: int | None  # None: until the context is full (chat default)
    min_tokens: int
    ignore_eos: bool
    prompt: list | None = None  # the prompt's tokens, for the prefix cache
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    images: int = 0  # image_url parts in the messages (their tokens are in prompt_tokens)


def _int_field(body: dict, name: str, lo: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise ApiError(400, f"{name} must be an integer, got {json.dumps(v)}", name)
    if v < lo:
        raise ApiError(400, f"{name} must be at least {lo}, got {v}.", name)
    return v


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def check_model(body: dict, served: str) -> None:
    name = body.get("model")
    if name is not None and name != served:
        raise ApiError(404, f"The model `{name}` does not exist.", "model")


def prompt_tokens_of(body: dict, chat: bool) -> list:
    """The prompt as a token sequence (ids, or pieces of a text prompt): one per token."""
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise ApiError(400, "messages must be a non-empty list of message objects", "messages")
        try:
            return tokenizer.chat_tokens(msgs)
        except vision.ImageError as exc:
            raise ApiError(400, f"messages: image_url: {exc}", "messages") from None
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.pieces(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise ApiError(400, "prompt must be a string, a list of token ids, or a list of one of "
                   "those (batched prompts are not supported by the emulator)", "prompt")


def parse_generation(raw: bytes, chat: bool, served: str, max_model_len: int) -> GenRequest:
    body = parse_json(raw)
    check_model(body, served)
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "n must be 1 (the emulator serves one choice per request)", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be a boolean", "stream")
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not stream):
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    opts = opts or {}
    name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    max_tokens = _int_field(body, name, 1)
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    if max_tokens is None and not chat:
        max_tokens = 16  # vLLM / OpenAI legacy completions default
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(400, f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                       f"got {min_tokens}.", "min_tokens")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(400, "ignore_eos must be a boolean", "ignore_eos")
    prompt_seq = prompt_tokens_of(body, chat)
    prompt = len(prompt_seq)
    want = prompt + (max_tokens or 0)
    if prompt >= max_model_len or want > max_model_len:
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. "
                       f"However, you requested {want} tokens ({prompt} in the messages, "
                       f"{max_tokens or 0} in the completion). Please reduce the length of "
                       "the messages or completion.", "input_tokens")
    images = tokenizer.count_images(body["messages"]) if chat else 0
    return GenRequest(chat, stream, bool(opts.get("include_usage", False)),
                      bool(opts.get("continuous_usage_stats", False)), prompt, max_tokens,
                      min_tokens, ignore_eos, prompt_seq, 0, images)


def parse_tokenize(raw: bytes, served: str) -> list[int]:
    body = parse_json(raw)
    check_model(body, served)
    if "messages" in body:
        return prompt_tokens_of(body, chat=True)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string", "prompt")
    return tokenizer.tokenize(prompt)


def usage(prompt: int, completion: int, cached: int = 0, reasoning: int | None = None) -> dict:
    # vLLM started with --enable-prompt-tokens-details, as servingbench's manifests start it
    out = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
           "completion_tokens": completion, "prompt_tokens_details": {"cached_tokens": cached}}
    if reasoning:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def full_response(chat: bool, cid: str, created: int, model: str, text: str,
                  finish: str, prompt: int, completion: int, cached: int = 0,
                  reasoning: int | None = None) -> bytes:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                  "logprobs": None, "finish_reason": finish, "stop_reason": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                  "stop_reason": None, "prompt_logprobs": None}
        obj = "text_completion"
    return json.dumps({"id": cid, "object": obj, "created": created, "model": model,
                       "choices": [choice], "usage": usage(prompt, completion, cached, reasoning)}
                      ).encode()
