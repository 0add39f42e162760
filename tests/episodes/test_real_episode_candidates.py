"""The real engine's episodes file loads with its replicas and policies, and a llama.cpp
candidate scaling on a gauge the engine does not serve is refused naming the key (the demo
exits 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines import refusals
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import ConfigError
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.local.llamacpp import LlamaCppModelServer

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "pipelines" / "candidates_episodes_real.yaml"
LLAMA = ("name: c1, engine: llama.cpp, instance_type: local.host, model: google/gemma-3-270m-it, "
         "precision: q4_k_m, tensor_parallel: 1, llamacpp: {model_file: gemma-3-270m-q4_k_m.gguf}, "
         f"price: {{sheet: {ROOT / 'pipelines' / 'price_sheet_local.yaml'}}}")


def test_the_shipped_real_episodes_load():
    by_name = {c.name: c for c in load_candidates(FILE)}
    spike, zero = by_name["local-gemma3-270m-spike"], by_name["local-gemma3-270m-from-zero"]
    for c in (spike, zero):
        assert c.engine == "llama.cpp" and c.instance_type == "local.host"
        assert c.deployment.replicas.max == 2 and c.deployment.autoscaling.policy == "local"
        assert c.scenario["kind"] == "schedule"
        assert LlamaCppModelServer().refuses(c) is None
    assert spike.deployment.autoscaling.metric == "requests_waiting"
    assert spike.deployment.replicas.min == 1
    assert zero.deployment.replicas.min == 0 and zero.scenario["shape"] == "zero-burst-zero"


def _bad(tmp_path) -> Path:
    p = tmp_path / "candidates.yaml"
    p.write_text(f"candidates:\n  - {{{LLAMA}, replicas: {{max: 2}}, "
                 "autoscaling: {metric: kv_cache_usage, target: 0.5}}\n")
    return p


def test_kv_cache_usage_on_llama_cpp_is_refused_by_its_server_reading_the_engine(tmp_path):
    # the launcher serves no KV-cache gauge, and the engine's file says so: the server asks it
    (c,) = load_candidates(_bad(tmp_path))
    assert "kv_cache_usage" not in engines.get("llama.cpp").gauges
    assert LlamaCppModelServer().refuses(c).startswith(
        "autoscaling.metric: engine llama.cpp serves no kv_cache_usage gauge")
    with pytest.raises(ConfigError, match=r"candidates.yaml: candidate c1: autoscaling.metric: "
                                          "engine llama.cpp serves no kv_cache_usage gauge"):
        refusals.check("local", _bad(tmp_path), [c])


def test_the_demo_exits_2_naming_it(tmp_path, capsys):
    from servingbench.pipelines.cli import main as cli

    assert cli(["demo", "--real", "--candidates", str(_bad(tmp_path)),
                "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "autoscaling.metric: engine llama.cpp" in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()
