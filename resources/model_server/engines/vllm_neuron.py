"""vLLM on AWS Neuron (Trainium, Inferentia): the vLLM server with the Neuron plugin
(neuronx-distributed-inference). Its launch arguments and metric names are vLLM's; its
cold-start markers, environment and tensor-parallel unit (NeuronCores) are its own."""

from __future__ import annotations

from servingbench.resources.model_server.engines import Engine, vllm

# Logical NeuronCores per Neuron chip: vLLM's --tensor-parallel-size counts cores, the
# candidates count chips (trn2 with the default logical-NeuronCore size 2: 8 / 2).
NEURON_CORES_PER_CHIP = {"trn2": 4, "trn1": 2, "inf2": 2}


def tensor_parallel(instance_type: str, chips: int) -> int:
    family = instance_type.split(".")[0]
    if family not in NEURON_CORES_PER_CHIP:
        raise ValueError(f"{instance_type} is not a Neuron instance ({', '.join(NEURON_CORES_PER_CHIP)})")
    return chips * NEURON_CORES_PER_CHIP[family]


ENGINE = Engine(
    name="vllm-neuron", accelerator="neuron", where="eks", family="vllm",
    command=vllm.ENGINE.command, launch=vllm.launch, api_key_env=vllm.ENGINE.api_key_env,
    env=({"name": "VLLM_NEURON_FRAMEWORK", "value": "neuronx-distributed-inference"},
         {"name": "NEURON_COMPILED_ARTIFACTS", "value": "/models/neuron-compiled"}),
    settings=vllm.SETTINGS, quantization=vllm.QUANTIZATION,
    markers={
        "weights_loaded": ("Finished loading model", "Loading weights took", "Model loading took"),
        "compiled": ("Finished compiling model", "Compilation took", "Neuron model loaded"),
        # the compiler wrapper (libneuronxla) per graph: found in the compile cache, or compiled
        "compile_cache_hit": ("Using a cached neff",),
        "compile_cache_miss": ("Call compiler with cmd",),
    },
    gauges=vllm.GAUGES, counters=vllm.COUNTERS, tensor_parallel=tensor_parallel,
)

PLUGIN = ENGINE  # what this file adds to the engines package
