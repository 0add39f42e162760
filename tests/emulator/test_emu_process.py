"""Process life: cold-start phases, clean stop, refusal to start, option errors."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
from servingbench.emulator.process import EmulatorProcess, EmulatorStartError
from servingbench.resources.contract.timestamps import parse_ts

from tests.support.emulator import stream
from tests.support.net import wait_port_file


@pytest.mark.serial  # not ready is checked inside a 3 s cold start
def test_cold_start_phases_health_503_then_200(tmp_path):
    # 3 s of cold start leaves room for the 503 checks below on a busy machine
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "servingbench.emulator", "--candidate", "trn2.48xlarge",
                             "--cold-start-s", "3", "--port", "0", "--port-file", str(port_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_port_file(port_file, proc)
        assert proc.stdout.readline().strip() == \
            f"servingbench emulator (EMULATED) listening on http://127.0.0.1:{port}"
        base = f"http://127.0.0.1:{port}"
        h = httpx.get(base + "/health")
        assert h.status_code == 503 and h.headers["x-servingbench-emulated"] == "1"
        assert httpx.post(base + "/v1/completions", json={"prompt": "x"}).status_code == 503
        status = httpx.get(base + "/servingbench/status").json()
        assert status["emulated"] is True and status["ready"] is False
        deadline = time.monotonic() + 30
        while httpx.get(base + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        status = httpx.get(base + "/servingbench/status").json()
        phases = status["phases"]
        assert list(phases) == ["weights_load", "compile", "ready"]  # Neuron: a compile phase
        ends = [(parse_ts(p["started_at"]), parse_ts(p["ended_at"])) for p in phases.values()]
        assert all(a <= b for a, b in ends)
        assert ends[0][1] <= ends[1][0] and ends[1][1] <= ends[2][0]
        assert 2.9e9 <= ends[2][1] - ends[0][0] < 30e9
        assert status["ready"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)


@pytest.mark.serial  # a wall-clock bound on the stop: a starved process exits late
def test_sigterm_stops_cleanly_within_a_second_even_mid_stream():
    with EmulatorProcess(["--fixed-timing", "1:50", "--cold-start-s", "0"]) as e:
        import threading
        t = threading.Thread(target=lambda: _swallow(e.base_url), daemon=True)
        t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        e.proc.send_signal(signal.SIGTERM)
        rc = e.proc.wait(timeout=5)
        assert time.monotonic() - t0 < 2.0  # contract: 1 s; generous on a shared machine
        assert rc == 0


def _swallow(base: str) -> None:
    try:
        stream(base, "/v1/completions", {"prompt": "x", "max_tokens": 200, "ignore_eos": True,
                                         "stream": True})
    except httpx.HTTPError:
        pass


def test_sigint_stops_too():
    with EmulatorProcess(["--fixed-timing", "1:1", "--cold-start-s", "0"]) as e:
        e.proc.send_signal(signal.SIGINT)
        # that it stops; how soon is the serial SIGTERM test's (a starved process exits late)
        assert e.proc.wait(timeout=30) == 0


def test_configuration_that_does_not_fit_refuses_to_start_with_exit_3():
    with pytest.raises(EmulatorStartError) as info:
        EmulatorProcess(["--model", "maverick", "--precision", "bf16"], ready_timeout_s=10).start()
    assert info.value.returncode == 3
    assert "801.4 GB" in info.value.stderr and "576.0 GB" in info.value.stderr
    assert "Traceback" not in info.value.stderr


def test_bad_options_exit_2_without_traceback():
    p = subprocess.run([sys.executable, "-m", "servingbench.emulator", "--fixed-timing", "abc"],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "TTFT_MS:ITL_MS" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["--candidate", "p9.huge"], "invalid choice"), (["--fault-rate", "explode=0.1"], "KIND=P"),
    (["--tp", "9"], "accelerators"), (["--time-scale", "0"], "must be > 0"),
    (["--cold-start-s", "-1"], "cold-start-s")])
def test_bad_option_messages(args, needle, capsys):
    from servingbench.emulator.cli import main
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own exit
        rc = exc.code
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_servingbench_cli_dispatches_to_the_emulator():
    from servingbench.pipelines.cli import main
    assert main(["emulator", "--model", "maverick", "--precision", "bf16"]) == 3


def test_model_mode_streams_with_modelled_timing():
    """Default (modelled) engine: concurrent requests batch; stall pauses one stream only."""
    with EmulatorProcess(["--time-scale", "0.01", "--cold-start-s", "0"]) as e:
        body = {"prompt": "x " * 100, "max_tokens": 20, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        t0 = time.monotonic()
        _, ev = stream(e.base_url, "/v1/completions", body, headers={"X-Servingbench-Fault": "stall_s=0.3"})
        assert ev[-2]["usage"]["completion_tokens"] == 20
        assert time.monotonic() - t0 >= 0.3
        assert e.status()["config"]["fixed_timing_ms"] is None


def test_unwritable_ground_truth_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = subprocess.run([sys.executable, "-m", "servingbench.emulator", "--cold-start-s", "0",
                        "--ground-truth", str(blocker / "gt.jsonl")],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "ground-truth" in p.stderr and "Traceback" not in p.stderr
