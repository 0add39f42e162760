"""The swap driver's process gets an allow-listed environment: the run's AWS credentials, the
engine's API key and any other token in the pipeline's environment never reach it (it reads
no setting and calls no cloud API; the key travels in the requests it relays). Checked on the
running process's /proc/<pid>/environ, beside a real emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servingbench.emulator.process import EmulatorProcess
from servingbench.resources.model_server.swap.process import SwapProcess

MODELS = [{"name": "a", "model": "scout", "precision": "bf16", "placement": "swapped",
           "memory_share": 0.9, "sleep_level": 1},
          {"name": "b", "model": "scout", "precision": "fp8", "placement": "swapped",
           "memory_share": 0.9, "sleep_level": 1}]
SECRETS = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
           "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
           "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLE", "SERVINGBENCH_ENGINE_API_KEY": "sb-key-123",
           "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "VLLM_API_KEY": "vllm-key-456"}


@pytest.mark.timeout(120)
def test_the_swap_driver_gets_no_credentials(tmp_path, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(MODELS))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with EmulatorProcess(["--time-scale", "0.0005", "--cold-start-s", "0.02", "--models",
                          str(path)]) as emu:
        driver = SwapProcess(MODELS, ("127.0.0.1", emu.port), run_dir, "run-1")
        driver.start()
        try:
            raw = Path(f"/proc/{driver.proc.pid}/environ").read_bytes()
        finally:
            driver.stop()
    env = dict(x.split("=", 1) for x in raw.decode().split("\0") if "=" in x)
    assert "PATH" in env
    assert not [k for k in env if k.startswith("AWS_")]
    assert not set(SECRETS) & set(env)
    assert not [v for v in SECRETS.values() if v in raw.decode()]
