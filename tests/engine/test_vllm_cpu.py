"""Real vLLM on this host's CPU, without starting it: the command it runs is the Kubernetes
Deployment's, differing exactly as engines/vllm.py CPU_DIFFERENCES names; what its CPU build
cannot do is refused naming the key (exit 2); a `vllm` candidate on local.host is routed to
it and measured, one on a cloud instance type to the emulator; and the launcher ends its
process group whatever happens (real processes standing in for vLLM; tests/engine/
test_vllm_lifecycle.py does the same with vLLM itself)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from servingbench.pipelines import refusals
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError
from servingbench.resources.cluster.local import LocalHostCluster
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube.render import render
from servingbench.resources.model_server.kube.server import engine_spec_for
from servingbench.resources.model_server.local import LocalModelServers, vllm_model
from servingbench.resources.model_server.local import vllm_cpu as vllm_local

REPO = Path(__file__).resolve().parents[2]
SHEET = REPO / "pipelines" / "price_sheet_local.yaml"
VLLM = engines.get("vllm")
DIGEST = "vllm/vllm-openai@sha256:" + "ab" * 32


def _file(tmp_path: Path, extra: str = "", instance: str = "local.host") -> Path:
    path = tmp_path / "candidates.yaml"
    path.write_text(
        "candidates:\n"
        f"  - {{name: tiny, engine: vllm, instance_type: {instance}, model: servingbench/tiny, "
        f"precision: bf16, tensor_parallel: 1, max_model_len: 2048, "
        f"price: {{sheet: {SHEET}}}{', ' + extra if extra else ''}}}\n")
    return path


def _one(tmp_path: Path, extra: str = "", instance: str = "local.host"):
    (c,) = load_candidates(_file(tmp_path, extra, instance))
    return c


def _named(args: list[str], i: int) -> str:
    """The argument at `i` by its flag's name ('model' for `vllm serve MODEL`)."""
    return "model" if i == 1 else args[i] if args[i].startswith("--") else args[i - 1]


def test_the_local_command_is_the_deployments_but_for_the_named_differences(tmp_path):
    c = _one(tmp_path, "engine_args: {max_num_seqs: 8, kv_cache_dtype: fp8}, "
                       "speculative: {method: ngram, draft_tokens: 3}")
    container = render(engine_spec_for(replace(c, image_digest=DIGEST), "r1", "ng"))[0][
        "spec"]["template"]["spec"]["containers"][0]
    kube = [*container["command"][1:], *container["args"]]  # serve MODEL ... (`vllm` dropped)
    local = vllm_local.command(c, Path("/models/tiny"), 18123)
    assert local[:2] == [str(vllm_local.python()), str(vllm_local.SERVE)]
    local = local[2:]
    added = local[len(kube):]
    changed = {_named(kube, i) for i, (a, b) in enumerate(zip(kube, local[:len(kube)],
                                                                strict=True)) if a != b}
    assert local[:len(kube)] != kube and added == ["--load-format", "dummy"]
    assert changed | {added[0]} == {name for name, _ in VLLM.cpu.differences}
    # what the candidate sweeps reaches the CPU build exactly as it reaches the Deployment
    for flag in ("--max-num-seqs", "--kv-cache-dtype", "--speculative-config",
                 "--max-model-len", "--tensor-parallel-size", "--served-model-name"):
        assert local[local.index(flag) + 1] == kube[kube.index(flag) + 1], flag
    assert local[1] == "/models/tiny" and local[local.index("--port") + 1] == "18123"


@pytest.mark.parametrize(("extra", "key", "words"), [
    ("tensor_parallel: 2", "tensor_parallel", "tensor_parallel 1"),
    ("precision: fp8", "precision", "FP8 weights"),
    ("max_model_len: 65536", "max_model_len", "at most 32768"),
    ("replicas: {min: 1, max: 2, initial: 1}", "replicas", "replicas of it"),
    ("models: [{name: a, model: m/a, precision: bf16, placement: swapped, sleep_level: 1, "
     "memory_share: 0.4, request_share: 0.5}, {name: b, model: m/b, precision: bf16, "
     "placement: swapped, sleep_level: 1, memory_share: 0.4, request_share: 0.5}]",
     "models", "Sleep mode is not supported"),
], ids=["tp", "fp8", "context", "replicas", "sleep"])
def test_what_the_cpu_build_cannot_do_is_refused_naming_the_key(tmp_path, extra, key, words):
    path = _file(tmp_path, extra)
    # what `servingbench run` and `demo` ask before Dagster, and the chain's pre-flight
    with pytest.raises(ConfigError, match=rf"candidate tiny: {key}: .*{re.escape(words)}"):
        refusals.check("local", path, load_candidates(path))
    # the same candidate on a cloud instance type is the emulator's, and not refused
    cloud = _file(tmp_path, extra.replace("tensor_parallel: 2", "tensor_parallel: 8"),
                  instance="p5.48xlarge")
    refusals.check("local", cloud, load_candidates(cloud))


def test_a_refusal_exits_2_naming_the_key(tmp_path, capsys):
    path = _file(tmp_path, "tensor_parallel: 4")
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "d")]) == 2
    assert "candidate tiny: tensor_parallel: 4: vLLM's CPU build" in capsys.readouterr().err


def test_an_fp8_kv_cache_is_not_refused(tmp_path):
    # measured: vllm-cpu 0.32.0 serves with --kv-cache-dtype fp8 (FP8 weights fail)
    c = _one(tmp_path, "engine_args: {kv_cache_dtype: fp8}")
    assert c.engine_args == {"kv_cache_dtype": "fp8"} and VLLM.cpu.refusal(c) is None


def test_vllm_on_this_host_is_measured_and_on_a_cloud_type_emulated(tmp_path):
    here, cloud = _one(tmp_path), _one(tmp_path, "tensor_parallel: 8", "p5.48xlarge")
    assert engines.runs_here("vllm", "local.host") and not engines.runs_here("vllm", "p5.48xlarge")
    assert not engines.runs_here("sglang", "local.host")  # no CPU build: the emulator
    cluster = LocalHostCluster()
    assert not cluster.emulated_for(here) and cluster.emulated_for(cloud)

    class Marker:
        def __init__(self, name):
            self.name = name

        def deploy(self, *_):
            return self.name

    servers = LocalModelServers(Marker("emulator"), Marker("llama.cpp"), Marker("vllm"))
    assert servers.deploy(here, None, tmp_path) == "vllm"
    assert servers.deploy(cloud, None, tmp_path) == "emulator"


def test_the_setup_script_the_model_and_the_engine_file_agree(tmp_path):
    script = (REPO / "scripts" / "vllm_setup.sh").read_text()
    assert f"VLLM_CPU_VERSION={vllm_local.VLLM_CPU_VERSION}\n" in script
    # the refusal's bound is the tiny model's context
    longest = vllm_model.CONFIG["max_position_embeddings"]
    c = _one(tmp_path)
    assert VLLM.cpu.refusal(replace(c, max_model_len=longest)) is None
    assert VLLM.cpu.refusal(replace(c, max_model_len=longest + 1))[0] == "max_model_len"
    # vLLM's CPU attention serves these head sizes only (cpu_attn.py); 16 fails at the
    # first request
    assert vllm_model.CONFIG["head_dim"] in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    assert vllm_model.CONFIG["hidden_size"] == (vllm_model.CONFIG["num_attention_heads"]
                                                * vllm_model.CONFIG["head_dim"])


# --- the launcher's process group, with real processes standing in for vLLM -------------

GROUP = ("import os, signal, subprocess, sys, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN) if 'stubborn' in sys.argv else None\n"
         "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
         "print('started', flush=True)\n"
         "time.sleep(300)\n")


def _wait_gone(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while vllm_local.group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not vllm_local.group_members(pgid)


def test_a_start_past_its_deadline_leaves_no_process(tmp_path):
    # never healthy, and both processes of its group ignore SIGTERM
    proc = vllm_local.VllmProcess([sys.executable, "-c", GROUP, "stubborn"], port=1,
                                  ready_timeout_s=1.5, grace_s=0.5)
    with pytest.raises(vllm_local.EngineStartError, match=r"not ready after 1\.5 s:\nstarted"):
        proc.start()
    assert _wait_gone(proc.proc.pid, 1) and not proc.alive()


def test_a_start_that_exits_says_so_and_leaves_no_process():
    code = ("import subprocess, sys; subprocess.Popen(['sleep', '300']); print('starting');"
            "print('ValueError: bad flag'); print('exiting'); sys.exit(3)")
    proc = vllm_local.VllmProcess([sys.executable, "-c", code], port=1, grace_s=1)
    with pytest.raises(vllm_local.EngineStartError,
                       match=r"exit code 3\):\nValueError: bad flag\nstarting"):
        proc.start()
    assert _wait_gone(proc.proc.pid, 2)  # the leader's orphaned child went with the group


# a stand-in for vLLM's start: the engine core's "compiled" line, then the API server answers
# /health (on the port given), as vLLM does, in that order
HEALTHY_AFTER_MARKER = """
import http.server, sys
print("INFO init engine (profile, create kv cache, warmup model) took 0.10 seconds", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_the_ready_phase_survives_a_reader_behind_the_output(monkeypatch):
    """The line that starts the ready phase is in vLLM's output before /health answers, but
    the thread reading that output may not have got to it yet (a busy machine): the start
    then waits a bounded moment for it, and the ready phase is not lost."""
    read = vllm_local.VllmProcess._read

    def behind(self):
        time.sleep(1.0)  # the reader falls behind the server's start
        read(self)

    monkeypatch.setattr(vllm_local.VllmProcess, "_read", behind)
    port = vllm_local.free_port()
    proc = vllm_local.VllmProcess([sys.executable, "-c", HEALTHY_AFTER_MARKER, str(port)], port,
                                  ready_timeout_s=30, grace_s=1)
    try:
        proc.start()
        assert "compiled" in proc.marks
        assert proc.marks["compiled"] <= time.time_ns()
    finally:
        proc.stop()
    assert _wait_gone(proc.proc.pid, 2)


STARTER = f"""
import sys, time
from servingbench.resources.model_server.local.vllm_cpu import VllmProcess
proc = VllmProcess([sys.executable, "-c", {GROUP!r}], port=1)
proc.spawn()
print(proc.proc.pid, flush=True)
time.sleep(300)
"""


def test_the_group_ends_when_its_starter_is_killed():
    """vLLM runs under ChildProcess's guard: a kill -9 of the process that started it ends
    its whole group (here stand-ins that ignore SIGTERM: the guard's SIGKILL follows)."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE,
                               text=True)
    pgid = None
    try:
        pgid = int(starter.stdout.readline())
        deadline = time.monotonic() + 10  # the guard, the stand-in and its child
        while len(vllm_local.group_members(pgid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(vllm_local.group_members(pgid)) >= 3
        # the stand-in's child ignores SIGTERM once its interpreter is up: only the guard's
        # SIGKILL, 2 s after the SIGTERM, ends it (a kill before that lets SIGTERM do it)
        time.sleep(1.0)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert _wait_gone(pgid, 10), vllm_local.group_members(pgid)
    finally:
        starter.kill()
        starter.wait()
        starter.stdout.close()
        if pgid is not None:  # a failed watch left them: not to outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def test_demo_real_without_vllm_installed_exits_2_saying_how(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVINGBENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert cli(["demo", "--real", "--only", "local-vllm-tiny",
                "--data-dir", str(tmp_path / "d")]) == 2
    assert "run `make engine-vllm`" in capsys.readouterr().err
