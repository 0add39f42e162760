"""SGLang on NVIDIA GPUs (`python3 -m sglang.launch_server`): launch arguments, cold-start
markers, gauge names. Its counters are not reconciled (server_metrics reads none)."""

from __future__ import annotations

from servingbench.resources.model_server.engines import Engine, flag

# servingbench's method -> SGLang's --speculative-algorithm (MTP heads run as EAGLE drafts)
ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM"}


def _speculative(value) -> list[str]:
    """{"algorithm": "EAGLE", "draft_model_path": ..., "num_steps": 3, ...}: one
    `--speculative-<key>` flag each, as SGLang spells them; or a candidate's engine-neutral
    {"method", "draft_tokens", "draft_model"}, as a chain of `draft_tokens` single drafts
    (top-k 1, so every step verifies draft_tokens + 1 tokens). SGLang exports no
    drafted/accepted counters, so its acceptance rate stays null in the metrics."""
    if "draft_tokens" in value:
        k = value["draft_tokens"]
        value = {"algorithm": ALGORITHMS[value["method"]], "num_steps": k, "eagle_topk": 1,
                 "num_draft_tokens": k + 1,
                 **({"draft_model_path": value["draft_model"]} if value.get("draft_model") else {})}
    args: list[str] = []
    for key, v in value.items():
        args += [f"--speculative-{key.replace('_', '-')}", str(v)]
    return args


SETTINGS = {
    "quantization": flag("--quantization"),
    # SGLang names the FP8 format (fp8_e4m3 | fp8_e5m2); `fp8` is vLLM's e4m3 default
    "kv_cache_dtype": lambda value: ["--kv-cache-dtype", {"fp8": "fp8_e4m3"}.get(value, value)],
    "max_num_seqs": flag("--max-running-requests"),
    # vLLM's per-step token budget is, with chunked prefill, SGLang's prefill chunk size
    "max_num_batched_tokens": flag("--chunked-prefill-size"),
    # a reasoning model's parser: its thinking streams as reasoning deltas
    "reasoning_parser": flag("--reasoning-parser"),
    "speculative": _speculative,
}


def launch(s) -> list[str]:
    """`sglang.launch_server` arguments for a kube EngineSpec `s`."""
    args = ["--model-path", s.model, "--served-model-name", s.model, "--host", "0.0.0.0",
            "--port", str(s.port), "--tp-size", str(s.tensor_parallel),
            "--context-length", str(s.max_model_len), "--enable-metrics"]
    if s.expert_parallel:
        args += ["--ep-size", str(s.tensor_parallel)]
    args += s.runtime.setting_args(s.swept)
    # the key from a file SGLang reads itself (`--config`, SGLang >= 0.5.1), never an argument
    return args + ["--config", s.api_key_config] + list(s.extra_args)


ENGINE = Engine(
    name="sglang", accelerator="nvidia", where="eks", family="sglang",
    command=("python3", "-m", "sglang.launch_server"), launch=launch, settings=SETTINGS,
    api_key_option="api-key",
    quantization={"bf16": None, "fp8": "fp8"},
    markers={
        "weights_loaded": ("Load weight end",),
        "compiled": ("Capture cuda graph end", "Capture CUDA graph end"),
    },
    gauges={
        "kv_cache_usage": ("sglang:token_usage",),
        "requests_running": ("sglang:num_running_reqs",),
        "requests_waiting": ("sglang:num_queue_reqs",),
    },
)

PLUGIN = ENGINE  # what this file adds to the engines package
