"""Sweeps: a base candidate × a matrix, one candidate per combination, each with a name
derived from its settings alone; combinations that cannot run are listed as skipped with
their reason before anything is provisioned, never dropped."""

from __future__ import annotations

import itertools

import pytest
from servingbench.pipelines.catalog import load_candidates, load_sweeps
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import DEFAULT_FILE, ConfigError
from servingbench.pipelines.sweeps import derived_name, shape
from servingbench.resources.contract import manifest as mf

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
CANDIDATES = (f"candidates:\n  - {{name: p5-scout, instance_type: p5.48xlarge, model: {SCOUT}, "
              "precision: bf16, tensor_parallel: 8}\n")


def write(tmp_path, sweeps: str, candidates: str = CANDIDATES):
    p = tmp_path / "candidates.yaml"
    p.write_text(candidates + "sweeps:\n" + sweeps)
    return p


def test_the_shipped_sweeps_expand_with_every_combination_accounted_for():
    sweeps = {s.name: s for s in load_sweeps(DEFAULT_FILE)}
    assert {"scout-p5", "scout-trn2"} <= set(sweeps)
    p5 = sweeps["scout-p5"]
    assert len(p5.members) + len(p5.skipped) == 3 * 2 * 2 * 3
    # Scout in BF16 is 218 GB of weights: two H100s (144 GB usable) cannot hold it
    skipped = {(s.settings["tensor_parallel"], s.settings["precision"]) for s in p5.skipped}
    assert skipped == {(2, "bf16")}
    assert all("pre-flight fit check: DOES NOT FIT" in s.reason for s in p5.skipped)
    for m in p5.members:
        assert m.sweep["name"] == "scout-p5"
        assert m.tensor_parallel == m.sweep["settings"]["tensor_parallel"]
        assert m.engine_args["max_num_seqs"] == m.sweep["settings"]["engine_args.max_num_seqs"]
        assert m.scenario["input_tokens"] in (1024, 8192)
        assert m.pool == "p5"   # the instance family's pool: a sweep runs under the quota
    # the members are candidates of the file (partitions), the demo's own list is not grown
    names = {c.name for c in load_candidates(DEFAULT_FILE)}
    assert {m.name for m in p5.members} <= names
    assert not {s.name for s in p5.skipped} & names
    trn2 = sweeps["scout-trn2"]
    assert not trn2.skipped and all(m.engine == "vllm-neuron" for m in trn2.members)


def test_names_are_derived_from_the_settings_and_stable_across_runs(tmp_path):
    first = [m.name for s in load_sweeps(DEFAULT_FILE) for m in s.members]
    again = [m.name for s in load_sweeps(DEFAULT_FILE) for m in s.members]
    assert first == again and len(set(first)) == len(first)
    assert "scout-p5-tp4-fp8-seqs64-1k8k" in first
    # the order of the matrix keys does not change a name
    a = write(tmp_path, "  s:\n    base: p5-scout\n    matrix:\n"
                        "      precision: [bf16, fp8]\n      tensor_parallel: [4, 8]\n")
    b = tmp_path / "b.yaml"
    b.write_text(CANDIDATES + "sweeps:\n  s:\n    base: p5-scout\n    matrix:\n"
                 "      tensor_parallel: [8, 4]\n      precision: [fp8, bf16]\n")
    names_a = {m.name: m.sweep["settings"] for m in load_sweeps(a)[0].members}
    names_b = {m.name: m.sweep["settings"] for m in load_sweeps(b)[0].members}
    assert names_a == names_b
    assert set(names_a) == {"s-tp4-bf16", "s-tp4-fp8", "s-tp8-bf16", "s-tp8-fp8"}


def test_a_long_name_is_cut_with_a_hash_of_its_settings():
    settings = {"engine_args.speculative": {"method": "draft_model", "num_speculative_tokens": 5,
                                            "model": "org/some-draft"},
                "scenario": {"input_tokens": 123456, "output_tokens": 654321},
                "engine_args.max_num_batched_tokens": 16384, "tensor_parallel": 8}
    name = derived_name("a-fairly-long-sweep-name", settings)
    assert len(name) <= 64 and name == derived_name("a-fairly-long-sweep-name", dict(settings))
    other = derived_name("a-fairly-long-sweep-name", {**settings, "tensor_parallel": 4})
    assert other != name and other[-8:] != name[-8:]


def test_shapes_are_input_over_output_tokens():
    assert shape("1k/8k", "w") == {"input_tokens": 1024, "output_tokens": 8192}
    assert shape("512/64", "w") == {"input_tokens": 512, "output_tokens": 64}
    with pytest.raises(ConfigError, match="not a shape like 1k/1k"):
        shape("1k:8k", "w")


def test_each_kind_of_combination_that_cannot_run_is_skipped_with_its_reason(tmp_path):
    p = write(tmp_path, (
        "  s:\n    base: {instance_type: p5.48xlarge, model: " + SCOUT + ", precision: bf16,\n"
        "           tensor_parallel: 8, max_model_len: 4096}\n"
        "    matrix:\n"
        "      tensor_parallel: [8, 16]\n"
        "      engine: [vllm, sglang]\n"
        "      engine_args.kv_cache_dtype: [auto, fp8]\n"
        "      scenario: [1k/1k, 8k/1k]\n"))
    (sweep,) = load_sweeps(p)
    reasons = {s.name: s.reason for s in sweep.skipped}
    assert len(sweep.members) + len(sweep.skipped) == 16
    assert reasons["s-vllm-tp8-kvauto-8k1k"] == ("input_tokens + output_tokens = 9,216 does not "
                                                  "fit max_model_len 4,096")
    assert reasons["s-vllm-tp16-kvauto-1k1k"] == ("pre-flight fit check: tensor_parallel 16 > 8 "
                                                   "accelerators per p5.48xlarge node (TP stays "
                                                   "within one node)")
    assert {m.name for m in sweep.members} == {"s-vllm-tp8-kvauto-1k1k", "s-vllm-tp8-kvfp8-1k1k",
                                               "s-sglang-tp8-kvauto-1k1k", "s-sglang-tp8-kvfp8-1k1k"}
    # the engine gets the setting in its own spelling (engines/<engine>.py)
    from servingbench.resources.model_server.engine_args import flags
    fp8 = next(m for m in sweep.members if m.name == "s-vllm-tp8-kvfp8-1k1k")
    assert flags(fp8.engine, fp8.engine_args) == ["--kv-cache-dtype", "fp8"]
    assert flags("sglang", fp8.engine_args) == ["--kv-cache-dtype", "fp8_e4m3"]
    # an engine without the setting: the combination is skipped, named with the setting
    local = write(tmp_path, (
        "  l:\n    base: {engine: llama.cpp, instance_type: local.host, model: google/gemma-3-270m-it,\n"
        "           precision: q4_k_m, tensor_parallel: 1, max_model_len: 2048,\n"
        "           scenario: {input_tokens: 64, output_tokens: 16},\n"
        "           llamacpp: {model_file: gemma-3-270m-q4_k_m.gguf}}\n"
        "    matrix:\n      engine_args.max_num_seqs: [4]\n"
        "      engine_args.max_num_batched_tokens: [256]\n"))
    (sweep,) = load_sweeps(local)
    assert [(s.name, s.reason) for s in sweep.skipped] == [
        ("l-seqs4-mbt256", "engine llama.cpp has no max_num_seqs setting")]


def test_the_kv_cache_of_max_model_len_counts_in_the_fit_and_fp8_halves_it(tmp_path):
    # Scout FP8 on two H100s: 109 GB of weights + 4 GB overhead leave 31 GB for the KV cache,
    # 196,608 B a token in BF16 (48 layers × 2 × 8 heads × 128 × 2 B): 131,072 tokens need
    # 25.8 GB and fit, 262,144 need 51.5 GB and do not; in FP8 (1 B a value) they need 25.8.
    p = write(tmp_path, (
        "  s:\n    base: {instance_type: p5.48xlarge, model: " + SCOUT + ", precision: fp8,\n"
        "           tensor_parallel: 2}\n"
        "    matrix:\n"
        "      max_model_len: [131072, 262144]\n"
        "      engine_args.kv_cache_dtype: [auto, fp8]\n"))
    (sweep,) = load_sweeps(p)
    assert {s.name for s in sweep.skipped} == {"s-kvauto-ctx262144"}
    assert "262144 tokens × 192 KiB" in sweep.skipped[0].reason


@pytest.mark.parametrize("sweep, message", [
    ("  s:\n    base: p5-scout\n    matrix: {tensor_paralel: [4]}\n",
     r"sweeps\.s\.matrix\.tensor_paralel: unknown key \(did you mean 'tensor_parallel'\?\)"),
    ("  s:\n    base: p5-scout\n    matrix: {engine_args.max_num_seq: [4]}\n",
     r"sweeps\.s\.matrix\.engine_args\.max_num_seq: unknown key \(did you mean 'max_num_seqs'\?\)"),
    ("  s:\n    base: p5-scout\n    matrix: {precision: []}\n",
     r"sweeps\.s\.matrix\.precision: expected a non-empty list"),
    ("  s:\n    base: p5-scout\n    matrix: {precision: [fp8, fp8]}\n",
     r"sweeps\.s\.matrix\.precision: a value appears twice"),
    ("  s:\n    base: p5-scout\n    matrix: {precision: [fp9]}\n",
     r"sweeps\.s\.matrix\.precision: 'fp9' is not one of"),
    ("  s:\n    base: p5-scout\n    matrix: {name: [a]}\n", r"sweeps\.s\.matrix\.name: unknown key"),
    ("  s:\n    base: p5-scout\n    matrix: {tensor_parallel.x: [1]}\n",
     r"sweeps\.s\.matrix\.tensor_parallel\.x: tensor_parallel is not a mapping"),
    ("  s:\n    base: p5-scout\n    matrix: {scenario: [1k-1k]}\n", r"not a shape like 1k/1k"),
    ("  s:\n    base: p5-scout\n    matrix: {engine_args.max_num_seqs: [0]}\n",
     r"engine_args\.max_num_seqs: expected a positive integer"),
    ("  s:\n    base: p5-scot\n    matrix: {precision: [fp8]}\n",
     r"sweeps\.s\.base: no candidate named 'p5-scot'"),
    ("  s:\n    base: p5-scout\n", r"sweeps\.s: missing key 'matrix'"),
    ("  s:\n    base: p5-scout\n    matrx: {}\n", r"sweeps\.s\.matrx: unknown key"),
    ("  s:\n    base: {instance_type: p5.48xlarge}\n    matrix: {precision: [fp8]}\n",
     r"sweeps\.s\.base: missing key 'model'"),
    ("  x:\n    base: p5-scout\n    matrix: {precision: [fp8], tensor_parallel: [8]}\n"
     "  x-tp8:\n    base: p5-scout\n    matrix: {precision: [fp8]}\n",
     r"duplicate name 'x-tp8-fp8'"),
    ("  - s\n", r"sweeps: expected a mapping"),
])
def test_bad_sweep_yaml_names_the_key(tmp_path, sweep, message):
    p = write(tmp_path, sweep)
    with pytest.raises(ConfigError, match=message):
        load_sweeps(p)


def test_sweep_list_prints_the_expansion_and_the_skips(tmp_path, capsys):
    assert cli(["sweep", "list", "scout-p5", "--candidates", str(DEFAULT_FILE)]) == 0
    out = capsys.readouterr().out
    assert "sweep scout-p5: 36 combinations" in out and "30 to run, 6 skipped" in out
    assert "  run   scout-p5-tp8-fp8-seqs256-8k1k" in out
    assert "  SKIP  scout-p5-tp2-bf16-seqs64-1k1k" in out and "why: pre-flight fit check" in out
    assert cli(["sweep", "list", "--candidates", str(DEFAULT_FILE)]) == 0
    assert "sweep scout-trn2:" in capsys.readouterr().out


def test_sweep_list_and_run_refuse_bad_input_with_exit_2(tmp_path, capsys, monkeypatch):
    bad = write(tmp_path, "  s:\n    base: p5-scout\n    matrix: {precison: [fp8]}\n")
    assert cli(["sweep", "list", "--candidates", str(bad)]) == 2
    assert "sweeps.s.matrix.precison: unknown key (did you mean 'precision'?)" in \
        capsys.readouterr().err
    assert cli(["sweep", "list", "nope", "--candidates", str(DEFAULT_FILE)]) == 2
    assert "unknown sweep 'nope'; known: scout-p5, scout-trn2" in capsys.readouterr().err
    monkeypatch.setenv("SERVINGBENCH_CANDIDATES", str(bad))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    assert cli(["run", "--sweep", "s"]) == 2
    assert "precison: unknown key" in capsys.readouterr().err


def test_a_member_writes_its_sweep_and_accelerators_into_the_manifest():
    from servingbench.assets.benchmark import initial_manifest

    member = next(m for s in load_sweeps(DEFAULT_FILE) if s.name == "scout-trn2"
                  for m in s.members)
    m = initial_manifest(member, "run-1", "emulated")
    mf.validate(m)
    assert m["sweep"] == {"name": "scout-trn2", "settings": member.sweep["settings"]}
    assert (m["accelerator"], m["accelerators_per_node"]) == ("Trainium2", 16)
    plain = next(c for c in load_candidates(DEFAULT_FILE) if c.name == "g6e-scout-bf16-tp8")
    m = initial_manifest(plain, "run-2", "emulated")
    assert "sweep" not in m and (m["accelerator"], m["accelerators_per_node"]) == ("L40S", 8)
    with pytest.raises(mf.ManifestError, match=r"manifest\.accelerator: \"B200\" is not one of"):
        mf.validate({**m, "accelerator": "B200"})
    with pytest.raises(mf.ManifestError, match=r"manifest\.sweep: missing key 'settings'"):
        mf.validate({**m, "sweep": {"name": "x"}})


def test_every_combination_is_either_a_member_or_skipped(tmp_path):
    p = write(tmp_path, ("  s:\n    base: p5-scout\n    matrix:\n"
                         "      tensor_parallel: [1, 2, 4, 8]\n      precision: [bf16, fp8, int4]\n"))
    (sweep,) = load_sweeps(p)
    combos = {derived_name("s", {"tensor_parallel": t, "precision": q})
              for t, q in itertools.product([1, 2, 4, 8], ["bf16", "fp8", "int4"])}
    assert {m.name for m in sweep.members} | {s.name for s in sweep.skipped} == combos
    assert not {m.name for m in sweep.members} & {s.name for s in sweep.skipped}


def test_each_engine_gets_a_members_engine_args_in_its_own_spelling():
    from dataclasses import replace

    from servingbench.resources.model_server.kube.render import render
    from servingbench.resources.model_server.kube.server import engine_spec_for

    def _container(spec) -> dict:
        (deployment,) = [o for o in render(spec) if o["kind"] == "Deployment"]
        return deployment["spec"]["template"]["spec"]["containers"][0]

    digest = "repo/engine@sha256:" + "0" * 64
    trn2 = next(m for s in load_sweeps(DEFAULT_FILE) if s.name == "scout-trn2"
                for m in s.members if m.engine_args["max_num_seqs"] == 16)
    args = _container(engine_spec_for(replace(trn2, image_digest=digest), "r1", "ng"))["args"]
    assert args[args.index("--max-num-seqs") + 1] == "16"
    gpu = replace(trn2, instance_type="p5.48xlarge", engine="sglang", tensor_parallel=8,
                  image_digest=digest, engine_args={"max_num_seqs": 64, "kv_cache_dtype": "fp8",
                                                    "max_num_batched_tokens": 4096,
                                                    "speculative": {"algorithm": "NGRAM",
                                                                    "num_draft_tokens": 3}})
    args = _container(engine_spec_for(gpu, "r1", "ng"))["args"]
    joined = " ".join(args)
    assert "--max-running-requests 64" in joined and "--kv-cache-dtype fp8_e4m3" in joined
    assert "--chunked-prefill-size 4096" in joined
    assert "--speculative-algorithm NGRAM --speculative-num-draft-tokens 3" in joined
    # vLLM takes its speculative config as one JSON mapping
    vllm_args = {**gpu.engine_args, "speculative": {"method": "ngram", "num_speculative_tokens": 3}}
    args = _container(engine_spec_for(replace(gpu, engine="vllm", engine_args=vllm_args),
                                      "r1", "ng"))["args"]
    assert args[args.index("--speculative-config") + 1] == (
        '{"method": "ngram", "num_speculative_tokens": 3}')
    assert args[args.index("--max-num-batched-tokens") + 1] == "4096"


def test_the_sweeps_frontier_pools_its_members_and_leaves_parity_failures_unranked(tmp_path):
    """Hand-computed: A c=1 (5 tok/s/user, 2.0 tok/s/accel), A c=2 (4, 2.1), B c=1 (6, 1.5)
    beat each other on one axis only, so all three are on the sweep's frontier; B c=2 (7, 3)
    is invalid and C c=1 (10, 10) failed quality parity: shown, never on it."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from servingbench.pipelines.cli.sweep_frontier import rows
    from servingbench.resources.contract.outputs import FRONTIER

    def member(name: str, steps: list[tuple[str, bool, float, float]], passed: bool | None):
        d = tmp_path / name
        d.mkdir()
        m = mf.empty(f"run-{name}", "measured", 0)
        m.update(candidate=name, instance_type="local.host", node_count=1)
        mf.dump(m, d / "manifest.json")
        pq.write_table(pa.Table.from_pylist([
            {"run_id": f"run-{name}", "candidate": name, "step": s, "source": "measured",
             "valid": ok, "accelerators": 1, "interactivity_tok_s": x,
             "output_tok_s_per_accel": y, "on_frontier": ok} for s, ok, x, y in steps],
            schema=FRONTIER), d / "frontier.parquet")
        if passed is not None:
            (d / "quality_parity.json").write_text(json.dumps({"passed": passed}))
        return str(d)

    dirs = [member("a", [("c=1", True, 5.0, 2.0), ("c=2", True, 4.0, 2.1)], True),
            member("b", [("c=1", True, 6.0, 1.5), ("c=2", False, 7.0, 3.0)], True),
            member("c", [("c=1", True, 10.0, 10.0)], False)]
    got = {(r["candidate"], r["step"]): (r["sweep_frontier"], r["parity"]) for r in rows(dirs)}
    assert got == {("a", "c=1"): (True, "pass"), ("a", "c=2"): (True, "pass"),
                   ("b", "c=1"): (True, "pass"), ("b", "c=2"): (False, "pass"),
                   ("c", "c=1"): (False, "FAILED (unranked)")}


def test_a_reader_that_stops_early_ends_the_listing_quietly():
    # a process boundary is the point: the command writes into a pipe whose reader is gone
    # (`servingbench sweep list | head` once head has its lines)
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", "sweep", "list", "scout-p5"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
