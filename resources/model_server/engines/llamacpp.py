"""llama.cpp on this host's CPU: llama-cpp-python's OpenAI-compatible server, started by
model_server/local/llamacpp.py through the launcher model_server/local/llamacpp_serve.py. Its launch
arguments and its /metrics counters (llama.cpp's own names, plus the finished-requests
counter the launcher adds). Its cold start is split by the launcher's own markers, not
its log; its gauges are the two request counts the launcher serves."""

from __future__ import annotations

from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.model_server.engines import Counters, Engine, flag

# llama-cpp-python's server settings (its ModelSettings fields, spelled as flags)
SETTINGS = {
    "max_num_batched_tokens": flag("--n_batch"),
    # prompt-lookup decoding is the speculative decoding its server offers without a draft model
    "speculative": lambda value: ["--draft_model", "prompt-lookup-decoding",
                                  "--draft_model_num_pred_tokens", str(value)],
}


def launch(candidate: Candidate, model_file, threads: int, swept: dict | None = None) -> list[str]:
    """The launcher's arguments for a candidate, its GGUF `model_file` and `threads`."""
    return ["--model", str(model_file), "--model_alias", candidate.model,
            "--n_ctx", str(candidate.max_model_len), "--n_threads", str(threads),
            "--n_threads_batch", str(threads),
            # queue concurrent requests instead of cutting the stream in progress
            "--interrupt_requests", "False",
            # llama.cpp's load log (weights, context) stays in the process output
            "--verbose", "True"] + ENGINE.setting_args(swept or {})


def _reason(labels: dict[str, str]) -> str:
    # by HTTP status: 200 finished normally, anything else is not an ok request
    status = labels.get("status", "")
    return "ok" if status == "200" else f"http_{status}"


ENGINE = Engine(
    name="llama.cpp", accelerator="cpu", where="local", family="llama.cpp",
    launch=launch, settings=SETTINGS,
    # what the launcher (local/llamacpp_serve.py) really serves: llama-cpp-python exposes no
    # KV-cache figure, so there is no kv_cache_usage gauge to scale on or sample
    gauges={
        "requests_running": ("llamacpp:requests_processing",),
        "requests_waiting": ("llamacpp:requests_deferred",),
    },
    counters=Counters(
        generation_tokens="llamacpp:tokens_predicted_total",
        prompt_tokens="llamacpp:prompt_tokens_total",
        finished="servingbench:requests_finished_total",
        reason=_reason,
    ),
)

PLUGIN = ENGINE  # what this file adds to the engines package
