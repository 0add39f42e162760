"""Three candidates whose manifests are pinned by golden files."""

from __future__ import annotations

from servingbench.resources.model_server.kube.render import EngineSpec

DIGEST = "sha256:" + "0123456789abcdef" * 4  # a fixture digest, not a real image

VLLM_GPU = EngineSpec(
    run_id="20261129T020000Z-p5.48xlarge-scout-bf16-7f3a", candidate="p5-scout-bf16-tp8",
    nodegroup="sb-20261129T020000Z-p5-48xlarge-scout-bf16-e8eff455", engine="vllm",
    accelerator="nvidia", image=f"vllm/vllm-openai@{DIGEST}",
    model="meta-llama/Llama-4-Scout-17B-16E-Instruct", tensor_parallel=8, devices=8,
    max_model_len=131072, settings={"kv_cache_dtype": "fp8", "max_num_seqs": 256},
    owner="sb-test-install",
)
SGLANG_GPU = EngineSpec(
    run_id="20261129T030000Z-p5.48xlarge-maverick-fp8-1c2d", candidate="p5-maverick-fp8-tp8-ep",
    nodegroup="sb-20261129T030000Z-p5-48xlarge-maverick-fp8-0a1b2c3d", engine="sglang",
    accelerator="nvidia", image=f"lmsysorg/sglang@{DIGEST}",
    model="meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", tensor_parallel=8, devices=8,
    max_model_len=65536, expert_parallel=True, quantization="fp8", owner="sb-test-install",
    expose="load_balancer", source_ranges=("10.20.0.0/16", "192.168.7.0/24"),
)
VLLM_NEURON = EngineSpec(
    run_id="20261129T040000Z-trn2.48xlarge-scout-bf16-9e8f", candidate="trn2-scout-bf16-tp64",
    nodegroup="sb-20261129T040000Z-trn2-48xlarge-scout-bf16-5e6f7a8b", engine="vllm",
    accelerator="neuron",
    image=f"public.ecr.aws/neuron/pytorch-inference-vllm-neuronx@{DIGEST}",
    model="meta-llama/Llama-4-Scout-17B-16E-Instruct", tensor_parallel=64, devices=16,
    max_model_len=16384, settings={"max_num_seqs": 32}, memory_gib=1800, cpu="180",
    neuron_config={"logical_nc_config": 2, "sequence_parallel_enabled": True,
                   "on_device_sampling_config": {"do_sample": False}},
    owner="sb-test-install", run_as_user=1000,  # as if the image were built for a non-root user
)
GOLDEN = {"vllm_gpu": VLLM_GPU, "sglang_gpu": SGLANG_GPU, "vllm_neuron": VLLM_NEURON}
