"""vLLM on NVIDIA GPUs (`vllm serve`): launch arguments, cold-start markers, metric names.

Its /metrics names are the ones the engine emulator serves too (emulator/), so an emulated
run reads like a vLLM one."""

from __future__ import annotations

import json

from servingbench.resources.model_server.engines import Counters, Engine, flag

SETTINGS = {
    "quantization": flag("--quantization"),
    "kv_cache_dtype": flag("--kv-cache-dtype"),
    "max_num_seqs": flag("--max-num-seqs"),
    "max_num_batched_tokens": flag("--max-num-batched-tokens"),
    # a reasoning model's parser: its thinking streams as reasoning deltas
    "reasoning_parser": flag("--reasoning-parser"),
    # {"method": "eagle", "model": ..., "num_speculative_tokens": 3}, as vLLM takes it, or a
    # candidate's engine-neutral {"method", "draft_tokens", "draft_model"} (speculative())
    "speculative": lambda value: ["--speculative-config",
                                  json.dumps(speculative(value), sort_keys=True)],
}


def speculative(value: dict) -> dict:
    """vLLM's --speculative-config from servingbench's {"method", "draft_tokens",
    "draft_model"} (a value already in vLLM's words passes through): EAGLE / EAGLE-3 with
    their drafter, n-gram prompt lookup, or the model's own MTP layers."""
    if "draft_tokens" not in value:
        return value
    out = {"method": value["method"], "num_speculative_tokens": value["draft_tokens"]}
    if value.get("draft_model"):
        out["model"] = value["draft_model"]
    if value["method"] == "ngram":
        out.update(prompt_lookup_min=2, prompt_lookup_max=4)
    return out
QUANTIZATION = {"bf16": None, "fp8": "fp8"}


def launch(s) -> list[str]:
    """`vllm serve` arguments for a kube EngineSpec `s` (port, model, parallelism, the
    swept settings, then the API key and any extra arguments)."""
    args = [s.model, "--host", "0.0.0.0", "--port", str(s.port), "--served-model-name", s.model,
            "--tensor-parallel-size", str(s.tensor_parallel),
            "--max-model-len", str(s.max_model_len),
            # usage.prompt_tokens_details.cached_tokens: prefix-cache hits, recorded per request
            "--enable-prompt-tokens-details"]
    if s.expert_parallel:
        args.append("--enable-expert-parallel")
    args += s.runtime.setting_args(s.swept)
    if s.accelerator == "neuron" and s.neuron_config:
        args += ["--override-neuron-config", json.dumps(s.neuron_config, sort_keys=True)]
    # the API key comes from VLLM_API_KEY (ENGINE.api_key_env), never an argument
    return args + list(s.extra_args)


MARKERS = {
    "weights_loaded": ("Model loading took", "Loading weights took"),
    "compiled": ("Graph capturing finished", "init engine (profile, create kv cache, warmup model) took"),
}
# vLLM renamed its KV gauge (gpu_cache_usage_perc -> kv_cache_usage_perc): both are read
GAUGES = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    # speculative decoding's cumulative counters (V1): drafted and accepted tokens
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
}
COUNTERS = Counters(
    generation_tokens="vllm:generation_tokens_total",
    prompt_tokens="vllm:prompt_tokens_total",
    finished="vllm:request_success_total",
    reason=lambda labels: labels.get("finished_reason", ""),
    failed_reasons=("abort",),
    ttft="vllm:time_to_first_token_seconds",
)

ENGINE = Engine(
    name="vllm", accelerator="nvidia", where="eks", family="vllm",
    command=("vllm", "serve"), launch=launch, settings=SETTINGS, quantization=QUANTIZATION,
    markers=MARKERS, gauges=GAUGES, counters=COUNTERS, api_key_env="VLLM_API_KEY",
)

PLUGIN = ENGINE  # what this file adds to the engines package
