"""An engine is one file: resources/model_server/engines/<engine>.py holds its launch
arguments, swept settings, cold-start markers and metric names, and nothing else in the
tree spells them."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube.render import render

from tests.support.eks.specs import SGLANG_GPU, VLLM_GPU, VLLM_NEURON

REPO = Path(__file__).resolve().parents[2]
ENGINES_DIR = REPO / "resources" / "model_server" / "engines"
# What only an engine's file may spell in code: its metric names, its launch flags and
# program, its cold-start log lines (docstrings and comments may name them). The engine's
# own process (the llama.cpp launcher) and the emulator's launcher, whose CLI imitates vLLM's
# on purpose, are not servingbench's knowledge of an engine.
KNOWLEDGE = re.compile(r"\b(?:vllm|sglang|llamacpp):[a-z_]+|--tensor-parallel-size|--tp-size|"
                       r"--max-num-seqs|--max-running-requests|sglang\.launch_server|"
                       r"Capture cuda graph|Model loading took|--n_threads|"
                       # sleep mode: its flag, its development mode, the calls it opens
                       r"--enable-sleep-mode|VLLM_SERVER_DEV_MODE|/wake_up|/is_sleeping|"
                       r"/sleep\b|/collective_rpc|/server_info|/reset_prefix_cache")
NOT_SERVINGBENCH_KNOWLEDGE = {REPO / "resources" / "model_server" / "local" / "llamacpp_serve.py",
                              REPO / "resources" / "model_server" / "local" / "emulator.py"}


def _code_strings(tree: ast.AST) -> list[str]:
    """Every string constant of the module except docstrings."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


def _spelled_in(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path in NOT_SERVINGBENCH_KNOWLEDGE:
            continue
        hits = [h for text in _code_strings(ast.parse(path.read_text()))
                for h in KNOWLEDGE.findall(text)]
        if hits:
            found[str(path.relative_to(REPO))] = hits
    return found


def test_engine_knowledge_is_spelled_only_in_the_engines_files():
    outside = {}
    for room in ("resources", "pipelines", "assets"):
        outside |= {p: h for p, h in _spelled_in(REPO / room).items()
                    if not p.startswith("resources/model_server/engines/")}
    assert outside == {}
    # the scan finds what it looks for: every engine file that launches a server spells it
    inside = _spelled_in(ENGINES_DIR)
    assert {"resources/model_server/engines/vllm.py", "resources/model_server/engines/sglang.py",
            "resources/model_server/engines/llamacpp.py"} <= set(inside)
    assert {"--enable-sleep-mode", "VLLM_SERVER_DEV_MODE", "/wake_up", "/collective_rpc"} <= set(
        inside["resources/model_server/engines/vllm.py"])


def test_every_file_is_an_engine_and_every_engine_a_file():
    files = {p.stem for p in ENGINES_DIR.glob("*.py") if p.stem != "__init__"}
    assert files == {"vllm", "vllm_neuron", "sglang", "llamacpp"}
    assert set(engines.names()) == {"vllm", "vllm-neuron", "sglang", "llama.cpp"}
    for e in engines.all_engines():
        assert e.where in ("eks", "local")
        if e.where == "eks":
            assert e.command and e.launch and set(e.markers) >= {"weights_loaded", "compiled"}
    assert engines.local("llama.cpp") and not engines.local("vllm")


@pytest.mark.parametrize(("spec", "settings", "expected"), [
    (VLLM_GPU, {"max_num_batched_tokens": 8192}, ["--max-num-batched-tokens", "8192"]),
    (SGLANG_GPU, {"max_num_batched_tokens": 8192}, ["--chunked-prefill-size", "8192"]),
    (VLLM_NEURON, {"max_num_batched_tokens": 4096}, ["--max-num-batched-tokens", "4096"]),
    (VLLM_GPU, {"speculative": {"method": "ngram", "num_speculative_tokens": 4}},
     ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']),
    (SGLANG_GPU, {"speculative": {"algorithm": "EAGLE", "num_steps": 3}},
     ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]),
], ids=["vllm-batched", "sglang-batched", "neuron-batched", "vllm-spec", "sglang-spec"])
def test_a_swept_setting_reaches_the_engine_in_its_own_spelling(spec, settings, expected):
    args = render(dataclasses.replace(spec, settings=settings))[0][
        "spec"]["template"]["spec"]["containers"][0]["args"]
    i = args.index(expected[0])
    assert args[i:i + len(expected)] == expected
    if "--api-key" in args:  # vLLM reads its key from VLLM_API_KEY: no argument at all
        assert args.index("--api-key") > i  # the settings come before the key and extra arguments


def test_a_setting_the_engine_does_not_have_is_refused_naming_it():
    with pytest.raises(ValueError, match="engine sglang: no setting 'max_num_sequences'"):
        dataclasses.replace(SGLANG_GPU, settings={"max_num_sequences": 8})
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        engines.get("tgi")


def test_counter_and_gauge_names_come_from_every_engine():
    gauges = engines.gauges()
    assert gauges["kv_cache_usage"].index("vllm:kv_cache_usage_perc") < gauges[
        "kv_cache_usage"].index("vllm:gpu_cache_usage_perc")  # vLLM's rename: the new name first
    assert {c.generation_tokens for c in engines.counters()} == {
        "vllm:generation_tokens_total", "llamacpp:tokens_predicted_total"}
