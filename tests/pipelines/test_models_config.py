"""A candidate's `models` (several models on one node): each mistake is a ConfigError naming
the key (exit 2 from the command line), and the pre-flight fit check covers every model's
weights and KV cache on the node's accelerator memory, and host memory for sleep level 1."""

from __future__ import annotations

from dataclasses import replace

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.cluster.fit import check
from servingbench.resources.model_server.local import LocalModelServers
from servingbench.resources.model_server.local.emulator import EmulatorModelServer

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
HEAD = ("candidates:\n  - {name: two, instance_type: p5.48xlarge, model: " + SCOUT +
        ", precision: bf16, tensor_parallel: 8, ")


def _entry(name="a", precision="bf16", placement="resident", memory=0.5, requests=0.5,
           extra="", model=SCOUT):
    return (f"{{name: {name}, model: {model}, precision: {precision}, placement: {placement}, "
            f"memory_share: {memory}, request_share: {requests}{', ' + extra if extra else ''}}}")


def _file(tmp_path, models: str, extra: str = ""):
    path = tmp_path / "candidates.yaml"
    path.write_text(HEAD + f"models: [{models}]{', ' + extra if extra else ''}}}\n")
    return path


GOOD = _entry("big", "bf16", memory=0.55) + ", " + _entry("small", "fp8", memory=0.4)


def test_two_resident_models_are_read_and_fit(tmp_path):
    (c,) = load_candidates(_file(tmp_path, GOOD))
    assert [(m.name, m.placement, m.memory_share, m.sleep_level)
            for m in c.deployment.models] == [("big", "resident", 0.55, None),
                                              ("small", "resident", 0.4, None)]
    fit = check(c)
    # Scout from its published shapes (emulator/architectures.yaml): 107.8B parameters, so
    # 215.5 GB in bf16 and 109.8 GB in fp8 (its embedding stays bf16)
    assert fit.fits is True and "big (resident) needs 233.1 GB" in fit.message
    assert fit.weights_gb == pytest.approx(215.5 + 109.8, abs=0.1)


def test_swapped_models_default_to_sleep_level_1_and_take_bursts(tmp_path):
    models = (_entry("a", placement="swapped", memory=0.9) + ", "
              + _entry("b", "fp8", placement="swapped", memory=0.9, extra="sleep_level: 2"))
    (c,) = load_candidates(_file(tmp_path, models, "model_bursts: 16"))
    assert [m.sleep_level for m in c.deployment.models] == [1, 2]
    assert c.deployment.bursts == 16
    # one swapped model awake at a time: 0.9 + 0.9 is not over the node
    assert check(c).fits is True


BAD = {
    "sleep_level on resident": (
        _entry("a", extra="sleep_level: 1") + ", " + _entry("b"), "",
        r"models\[0\]\.sleep_level: only a swapped model sleeps"),
    "sleep_level 3": (
        _entry("a", placement="swapped", extra="sleep_level: 3") + ", "
        + _entry("b", placement="swapped"), "", r"models\[0\]\.sleep_level: 3 is not one of 1, 2"),
    "placement": (_entry("a", placement="pinned") + ", " + _entry("b"), "",
                  r"models\[0\]\.placement: 'pinned' is not one of resident, swapped"),
    "request shares": (_entry("a", requests=0.7) + ", " + _entry("b"), "",
                       r"\.models: the request_share values add to 1\.2, not 1"),
    "memory_share 0": (_entry("a", memory=0) + ", " + _entry("b"), "",
                       r"models\[0\]\.memory_share: expected a finite number in \(0, 1\]"),
    "unknown key": (_entry("a", extra="gpu: 1") + ", " + _entry("b"), "",
                    r"models\[0\]\.gpu: unknown key"),
    "missing key": ("{name: a, model: x, precision: bf16, placement: resident, "
                    "memory_share: 0.5}, " + _entry("b"), "",
                    r"models\[0\]: missing key 'request_share'"),
    "name twice": (_entry("a") + ", " + _entry("a"), "", r"models\[1\]\.name: 'a' given twice"),
    "one model": (_entry("a", requests=1), "", r"\.models: expected a list of 2 to 16 models"),
    "one swapped": (_entry("a", placement="swapped") + ", " + _entry("b"), "",
                    r"one swapped model has no other to swap with"),
    "bursts 0": (GOOD, "model_bursts: 0", r"\.model_bursts: expected an integer in \[1, "),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_models_key_is_named(tmp_path, case):
    models, extra, message = BAD[case]
    with pytest.raises(ConfigError, match=message):
        load_candidates(_file(tmp_path, models, extra))


def test_a_bad_models_key_exits_2_naming_it(tmp_path, capsys):
    path = _file(tmp_path, _entry("a", placement="pinned") + ", " + _entry("b"))
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "candidates.yaml" in err and "models[0].placement" in err and "Traceback" not in err


def test_bursts_without_models_are_refused(tmp_path):
    path = tmp_path / "candidates.yaml"
    path.write_text(HEAD + "model_bursts: 4}\n")
    with pytest.raises(ConfigError, match=r"\.model_bursts: alternates between the candidate's"):
        load_candidates(path)


def test_fit_refuses_a_share_too_small_with_the_numbers(tmp_path):
    (c,) = load_candidates(_file(tmp_path, _entry("big", memory=0.3) + ", " + _entry("b", "fp8")))
    fit = check(c)
    assert fit.fits is False
    assert "big (resident) needs 233.1 GB (weights 215.5 GB) of its share 0.3 × 576.0 GB = " \
           "172.8 GB: DOES NOT FIT" in fit.message


def test_fit_refuses_shares_over_the_node(tmp_path):
    models = (_entry("r", memory=0.55) + ", " + _entry("s1", "fp8", "swapped", 0.5, 0.25)
              + ", " + _entry("s2", "fp8", "swapped", 0.5, 0.25))
    (c,) = load_candidates(_file(tmp_path, models))
    fit = check(c)
    assert fit.fits is False and "resident 0.55 + largest swapped 0.5 = 1.05 of the node: " \
                                 "MORE THAN 1" in fit.message


def test_fit_refuses_sleeping_weights_over_host_memory(tmp_path):
    # six Maverick bf16 (801 GB of weights each) swapped on one trn2 node: one awake fits its
    # accelerators, but five asleep at level 1 keep 4007 GB in 2048 GB of host memory
    six = ", ".join(_entry(f"m{i}", placement="swapped", memory=0.65, requests=0.5 if i < 2 else 0,
                           model=MAVERICK) for i in range(6))
    (c,) = load_candidates(_file(tmp_path, six))
    c = replace(c, instance_type="trn2.48xlarge", tensor_parallel=16)
    fit = check(c)
    assert fit.fits is False and "host memory: sleeping level-1 weights 4007.1 GB of 2048 GB: " \
                                 "DOES NOT FIT" in fit.message
    # level 2 discards the weights: nothing kept in host memory
    level2 = replace(c, deployment=replace(c.deployment, models=tuple(
        replace(m, sleep_level=2) for m in c.deployment.models)))
    assert check(level2).fits is True


def test_llama_cpp_models_are_refused_by_its_server(tmp_path, capsys):
    # several models of one llama.cpp server are measured apart (make demo-models-real): the
    # local profile's model server says so, and the demo exits 2 naming the key
    path = _file(tmp_path, GOOD, "engine: llama.cpp, llamacpp: {model_file: m.gguf}")
    (c,) = load_candidates(path)
    assert LocalModelServers(EmulatorModelServer()).refuses(c).startswith(
        "models: the chain runs several models on the emulator")
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "candidate two: models: the chain runs several models" in err
    assert not (tmp_path / "data").exists()
