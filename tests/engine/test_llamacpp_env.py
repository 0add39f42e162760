"""The real local engine's process sees only an allow-listed environment: no AWS
credentials, no engine API key, none of llama-cpp-python's bare setting names. Read from
the running engine's /proc/<pid>/environ (Linux), not from what we meant to pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import REAL_FILE
from servingbench.resources.model_server.local.llamacpp import (
    LlamaCppModelServer,
    child_env,
    engine_available,
)

WHY = engine_available()

SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLETOKEN",
    "SERVINGBENCH_ENGINE_API_KEY": "sk-engine-key-example",
    "API_KEY": "sk-bare-setting-llama-cpp-reads",  # llama-cpp-python's ServerSettings.api_key
    "DAGSTER_PG_PASSWORD": "pg-password-example",
}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.split("=", 1) for e in raw.decode("utf-8", "replace").split("\0") if "=" in e)


def test_the_allow_list_keeps_what_the_engine_needs_and_nothing_else():
    env = child_env({"PATH": "/usr/bin", "HOME": "/home/x", "LC_ALL": "C.UTF-8",
                     "OMP_NUM_THREADS": "2", "PYTHONPATH": "/extra", **SECRETS})
    assert set(env) == {"PATH", "HOME", "LC_ALL", "OMP_NUM_THREADS", "PYTHONPATH"}
    assert env["PYTHONPATH"].endswith("/extra")


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=f"real engine: {WHY}")
def test_the_running_engine_has_no_credentials_in_its_environment(monkeypatch, tmp_path):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    cand = {c.name: c for c in load_candidates(REAL_FILE)}["local-gemma3-270m-q4"]
    with LlamaCppModelServer().deploy(cand, None, tmp_path) as dep:
        env = _environ(dep.details["pid"])
    assert "PATH" in env and "PYTHONPATH" in env  # it is the engine's environment
    leaked = {k for k in env if k in SECRETS or k.startswith("AWS_")}
    assert not leaked, f"the engine process sees {sorted(leaked)}"
    assert not any(v in "\0".join(env.values()) for v in SECRETS.values())
