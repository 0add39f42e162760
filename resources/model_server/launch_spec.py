"""What an engine is launched with, from a candidate: the one mapping the Kubernetes
Deployment (kube/server.py `engine_spec_for`, kube/render.py) and real vLLM on this host's
CPU (local/vllm_cpu.py) both use, so the two start the engine from the same arguments.

`launch_fields(candidate)` gives the fields an engine's `launch(spec)` reads (parallelism,
context, precision, the swept settings, speculative decoding, the reasoning parser), with a
ValueError naming the candidate for what the engine cannot take; `LaunchSpec` is those
fields and a port, for a launcher that is not a Deployment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.model_server import engine_args, engines


def launch_fields(candidate: Candidate) -> dict:
    """The candidate's engine (its `family` and `accelerator`) and everything its `launch`
    reads; a clear ValueError for a precision or parallelism the engine cannot take."""
    engine = engines.get(candidate.engine)
    if candidate.precision not in engine.quantization:
        raise ValueError(f"candidate {candidate.name}: precision {candidate.precision!r} needs a "
                         f"pre-quantized checkpoint as `model`; not supported on eks yet")
    try:
        tp = engine.tensor_parallel(candidate.instance_type, candidate.tensor_parallel)
    except ValueError as exc:
        raise ValueError(f"candidate {candidate.name}: {exc}") from None
    return dict(
        engine=engine.family, accelerator=engine.accelerator, model=candidate.model,
        tensor_parallel=tp, devices=candidate.tensor_parallel,
        max_model_len=candidate.max_model_len, expert_parallel=candidate.expert_parallel,
        quantization=engine.quantization[candidate.precision],
        # a sweep's engine settings by their common name, and the candidate's speculative
        # decoding and reasoning parser; the engine's file spells them
        settings={**engine_args.active(candidate.engine_args or {}),
                  **({"speculative": candidate.speculative.as_setting()}
                     if candidate.speculative else {}),
                  **({"reasoning_parser": candidate.reasoning.parser}
                     if candidate.reasoning else {})})


@dataclass(frozen=True)
class LaunchSpec:
    """An engine's launch fields (`launch_fields`) and the port it listens on."""

    engine: str
    accelerator: str
    model: str
    tensor_parallel: int
    devices: int
    max_model_len: int
    port: int
    expert_parallel: bool = False
    quantization: str | None = None
    settings: dict = field(default_factory=dict)
    neuron_config: dict = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @property
    def runtime(self) -> engines.Engine:
        return engines.on_kubernetes(self.engine, self.accelerator)

    @property
    def swept(self) -> dict:
        """Every setting the engine is launched with, by its common name, in launch order."""
        return {"quantization": self.quantization, **self.settings}

    def command(self) -> list[str]:
        """The engine's program and its arguments (`command` + `launch(self)`)."""
        engine = self.runtime
        return [*engine.command, *engine.launch(self)]
