"""The embedded default's model server: the engine emulator as a local subprocess."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from servingbench.resources.contract import deployment_record
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicated, SeveralModels, Single
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server.interface import Deployment, ModelServer

# The engine arguments the emulator models (docs/emulator.md), in its own (vLLM's) spelling.
MODELLED = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
            "kv_cache_dtype": "--kv-cache-dtype"}


def draft_tokens(value) -> int | None:
    """The draft length of an `engine_args.speculative` value, in any engine's words (vLLM
    `num_speculative_tokens`, SGLang `num_steps`, servingbench's `draft_tokens`, a bare
    count); None when it names none (the emulator cannot model it then)."""
    if isinstance(value, dict):
        for key in ("draft_tokens", "num_speculative_tokens", "num_steps"):
            if isinstance(value.get(key), int) and not isinstance(value[key], bool):
                return value[key]
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def emulator_flags(engine_args: dict) -> list[str]:
    out = []
    for key, flag in MODELLED.items():
        if engine_args.get(key) is not None:
            out += [flag, str(engine_args[key])]
    k = draft_tokens(engine_args.get("speculative"))
    if k:  # modelled with the emulator's default acceptance (a candidate's `speculative` key sets it)
        out += ["--spec-draft-tokens", str(k)]
    return out


def not_modelled(engine_args: dict) -> list[str]:
    """Engine arguments the emulator runs without (the candidate runs as if they were off,
    and its deployment says so): speculative decoding without a draft length, and any
    argument it has no model of."""
    return [k for k, v in engine_args.items() if v not in (None, False) and k not in MODELLED
            and not (k == "speculative" and draft_tokens(v))]


class EmulatorModelServer(ModelServer):
    """Starts the local engine emulator as a subprocess on a free loopback port. Its numbers
    are modelled, never measured: every run it serves is labelled `emulated`."""

    def __init__(self, time_scale: float = 1.0, cold_start_s: float | None = None,
                 seed: int = 0, ready_timeout_s: float = 120, extra_args: tuple[str, ...] = ()):
        self.time_scale, self.cold_start_s, self.seed = time_scale, cold_start_s, seed
        self.ready_timeout_s, self.extra_args = ready_timeout_s, tuple(extra_args)

    def args(self, candidate: Candidate, run_dir: Path) -> list[str]:
        # the engine the candidate names is the profile the emulator imitates (its scheduling
        # and its fitted figures, emulator/engines.yaml)
        args = ["--candidate", candidate.instance_type, "--model", candidate.model_key,
                "--precision", candidate.precision, "--tp", str(candidate.tensor_parallel),
                "--engine", candidate.engine,
                "--time-scale", str(self.time_scale), "--seed", str(self.seed),
                "--max-model-len", str(candidate.max_model_len),
                "--ground-truth", str(run_dir / "emulator_ground_truth.jsonl")]
        if self.cold_start_s is not None:
            args += ["--cold-start-s", str(self.cold_start_s)]
        spec = candidate.speculative
        if spec is not None:  # the emulator models the drafts; its acceptance is the plan's
            args += ["--spec-draft-tokens", str(spec.draft_tokens),
                     "--spec-acceptance", str(spec.acceptance)]
        if candidate.reasoning is not None:  # a reasoning model: thinking first, as modelled
            lo, hi = candidate.reasoning.emulated_tokens
            args += ["--reasoning-tokens", f"{lo}:{hi}"]
        return args + emulator_flags(candidate.engine_args or {}) + list(self.extra_args)

    def refuses(self, candidate: Candidate) -> str | None:
        match candidate.deployment:
            case Single() | SeveralModels():
                return None
            case Replicated(autoscaling=a) if a is not None and a.policy != "local":
                return (f"autoscaling.policy: {a.policy} runs on EKS; the embedded default runs "
                        "policy local (the same rule, over emulator replicas)")
            case Replicated():
                return None
        raise TypeError(f"unknown deployment plan {candidate.deployment!r}")

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster: ClusterInfo, run_dir: Path) -> Iterator[Deployment]:
        plan = candidate.deployment
        if isinstance(plan, SeveralModels):  # several models on the node
            from servingbench.resources.model_server.local.emulator_models import deploy_models

            with deploy_models(self, candidate, plan, run_dir) as dep:
                yield dep
            return
        if isinstance(plan, Replicated):
            with self.deploy_replicas(candidate, plan, run_dir) as dep:
                yield dep
            return
        from servingbench.emulator.process import EmulatorProcess

        started = time.time_ns()
        with EmulatorProcess(self.args(candidate, run_dir), ready_timeout_s=self.ready_timeout_s) as emu:
            ended = time.time_ns()
            status = emu.status()
            phases = {"deploy": {"started_at": format_ts(started), "ended_at": format_ts(ended)}}
            for name in ("image_pull", "weights_load", "compile", "ready"):
                if status.get("phases", {}).get(name):
                    phases[name] = status["phases"][name]
            deployment_record.write(run_dir, {
                "endpoint": emu.base_url, "pid": emu.pid, "emulated": True,
                "config": status.get("config"), "engine_args": dict(candidate.engine_args or {}),
                "engine_args_not_modelled": not_modelled(candidate.engine_args or {})})
            yield Deployment(
                endpoint=emu.base_url, served_model=candidate.model,
                facts={"engine": f"servingbench-emulator ({candidate.engine})",
                       "engine_version": status.get("version"),
                       "image_digest": None},
                phases=phases, emulated=True,
                details={"pid": emu.pid, "port": emu.port, "config": status.get("config"),
                         "ground_truth": str(run_dir / "emulator_ground_truth.jsonl")},
                # its /metrics carries the vLLM gauges and the modelled DCGM series
                telemetry=[{"kind": "emulated", "url": f"{emu.base_url}/metrics"}])

    @staticmethod
    def replicas_own_nodes(candidate: Candidate) -> bool:
        """Whether each emulated replica stands for a node of its own. It does when the
        candidate names its capacity (each spot node is interrupted alone), and whenever two
        replicas cannot share one instance: a TP8 model on an 8-accelerator p5 needs a p5 per
        replica, so an autoscaler that adds a replica adds a node to the bill. Sharing one
        emulated node would bill three replicas as one and flatten every autoscaler setting's
        cost to the same figure."""
        from servingbench.resources.contract.accelerators import per_node_of

        if candidate.capacity is not None:
            return True
        per_node = per_node_of(candidate.instance_type)
        return per_node is not None and 2 * candidate.tensor_parallel > per_node

    @contextlib.contextmanager
    def deploy_replicas(self, candidate: Candidate, plan: Replicated,
                        run_dir: Path) -> Iterator[Deployment]:
        """`replicas` (and `autoscaling`): emulator replicas behind HAProxy (fleet/replicated.py);
        each replica keeps its own ground truth, `emulator_ground_truth.<replica>.jsonl`."""
        from servingbench.resources.model_server.fleet.replicated import replicated

        base = self.args(candidate, run_dir)
        at = base.index("--ground-truth")

        def args(name: str) -> list[str]:
            return [*base[:at], "--ground-truth",
                    str(run_dir / f"emulator_ground_truth.{name}.jsonl"), *base[at + 2:]]

        with replicated(args, run_dir, run_dir.name, plan, self.ready_timeout_s,
                        notice_scale=self.time_scale,
                        own_nodes=self.replicas_own_nodes(candidate)) as pool:
            deployment_record.write(run_dir, {
                "endpoint": pool["endpoint"], "emulated": True, "balancer": "haproxy",
                **plan.as_dict(), "capacity": candidate.capacity,
                "engine_args": dict(candidate.engine_args or {}),
                "engine_args_not_modelled": not_modelled(candidate.engine_args or {})})
            yield Deployment(
                endpoint=pool["endpoint"], served_model=candidate.model,
                facts={"engine": f"servingbench-emulator ({candidate.engine})",
                       "engine_version": None, "image_digest": None},
                phases=pool["phases"], emulated=True,
                details={"balancer": pool["endpoint"], "replicas": plan.replicas.as_dict()},
                telemetry=[{"kind": "emulated", "url": url} for url in pool["metrics_urls"][:1]])
