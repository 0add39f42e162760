"""The fitted "host CPU + tiny model" spec: it loads, it is what the fit says, and it queues
like llama-cpp-python's server (model functions and the scheduler directly; no server)."""

from __future__ import annotations

import pytest
from servingbench.emulator import cli, specs
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.scheduler import Scheduler, Seq

SPEC = "llamacpp-gemma3-270m-q4-this-host"


def test_the_fitted_spec_overrides_the_defaults_and_names_itself():
    cfg = specs.fitted_config(SPEC)
    assert cfg.fitted == SPEC and cfg.describe()["fitted_spec"] == SPEC
    assert cfg.model.name == "gemma3-270m" and cfg.instance.platform == "cpu"
    assert cfg.serving["max_num_seqs"] == 1  # one request at a time, as the engine
    assert cfg.efficiency["request_overhead_ms"] > 0
    # every other spec pays no per-request overhead inside the engine's steps
    assert specs.config("p5.48xlarge", "scout", "bf16").efficiency["request_overhead_ms"] == 0
    assert specs.config("p5.48xlarge", "scout", "bf16").fitted is None


def test_a_dense_model_has_no_expert_term():
    m = specs.model("gemma3-270m")
    assert m.expert_params_b == 0.0 and m.dense_params_b == pytest.approx(m.active_params_b)


def test_lone_request_times_are_the_fitted_line():
    """TTFT = request overhead + the prompt's FLOPs / the effective rate (the line
    benchmarks/emulator_calibrate_llamacpp.py fits); ITL = the decode step."""
    cfg = specs.fitted_config(SPEC)
    m = PerfModel(cfg)
    for n in (128, 384):
        # the linear layers per prompt token, the LM head for the one row that samples
        flops = (2 * cfg.model.dense_linear_params * n + 2 * cfg.model.head_params
                 + m.prefill_pairs(0, n) * 4 * 4 * 256 * 18)
        assert m.prefill_time(n, budget=512) == pytest.approx(
            m.request_overhead_s + flops / cfg.peak_flops, rel=1e-6)
    assert m.decode_step(1, 100) == pytest.approx(cfg.weights_bytes / m.mem_bw, rel=0.02)


def test_the_request_overhead_is_paid_once_per_admitted_request():
    m = PerfModel(specs.fitted_config(SPEC))
    sched = Scheduler(m, max_num_seqs=1, token_budget=512, kv_tokens=100_000)
    one, two = Seq(prompt=64, output=3, tag=1), Seq(prompt=64, output=3, tag=2)
    sched.add(one)
    sched.add(two)
    first = sched.step()
    assert first.emitted == [one] and list(sched.waiting) == [two]  # one sequence at a time
    assert first.duration == pytest.approx(m.step_time(64, 0, 0.0, m.prefill_pairs(0, 64), 1))
    assert first.duration - m.step_time(64, 0, 0.0, m.prefill_pairs(0, 64)) == pytest.approx(
        m.request_overhead_s)
    second = sched.step()  # a decode step of request 1: no request overhead
    assert second.duration < first.duration and second.emitted == [one]


def test_an_unknown_spec_is_refused_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--spec", "no-such-spec"])
    assert exc.value.code == 2 and "--spec" in capsys.readouterr().err
    with pytest.raises(specs.SpecError, match="unknown fitted spec"):
        specs.fitted_config("no-such-spec")


def test_the_emulator_serves_the_fitted_spec_and_says_it_is_fitted():
    from servingbench.emulator.process import EmulatorProcess

    with EmulatorProcess(["--spec", SPEC, "--cold-start-s", "0", "--no-prefix-cache"]) as emu:
        cfg = emu.status()["config"]
    assert cfg["fitted_spec"] == SPEC and cfg["calibrated"] is True
    assert cfg["max_num_seqs"] == 1 and cfg["served_model_name"] == "google/gemma-3-270m"
