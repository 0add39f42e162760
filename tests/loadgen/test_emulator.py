"""Against the real emulator as a process on loopback:
fixed timing, ground truth, faults, and the EMULATED label."""

from __future__ import annotations

import json

import httpx
import pytest
from servingbench.emulator import process
from servingbench.resources.contract import manifest as mf
from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, ns, rows


def _model(base_url: str) -> str:
    return httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]


def test_load_against_the_emulator_matches_its_ground_truth(tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    args = ["--fixed-timing", "20:2", "--cold-start-s", "0", "--ground-truth", str(truth_path)]
    with process.EmulatorProcess(args) as emu:
        base = {"source": "measured"}  # the emulator's header overrides what a caller claims
        cfg = config(emu.base_url, model=_model(emu.base_url), concurrency=[1, 3], rates=[20],
                     requests_per_step=4, warmup_requests=2, output_tokens=12)
        result = run_load(cfg, tmp_path / "run", manifest_base=base, progress=False)
    assert result.source == "emulated" and mf.load(tmp_path / "run" / "manifest.json")["source"] == "emulated"
    steady = rows(tmp_path / "run")
    assert len(steady) == 12 and {r["status"] for r in steady} == {"ok"}
    truth = {t["request_id"]: t for t in map(json.loads, truth_path.read_text().splitlines())}
    for r in steady:
        t = truth[r["request_id"]]
        assert r["output_tokens"] == t["completion_tokens"] == 12
        assert r["input_tokens"] == t["prompt_tokens"]
        # not before it was written: the client stamps the bytes as they arrive, while the
        # server stamps its write just after making it (a process the machine pauses in
        # between stamps late), and each process maps its clock to UTC once
        assert ns(r["first_token_at"]) >= t["chunks"][0][1] - 10_000_000


@pytest.mark.parametrize(("fault", "status"), [("status=429", "http_error"), ("disconnect_after=2", "disconnect"),
                                               ("malformed_after=2", "protocol_error"), ("empty=1", "protocol_error")])
def test_emulator_faults(tmp_path, fault, status):
    with process.EmulatorProcess(["--fixed-timing", "5:1", "--cold-start-s", "0"]) as emu:
        cfg = config(emu.base_url, model=_model(emu.base_url), requests_per_step=2,
                     headers={"X-Servingbench-Fault": fault})
        result = run_load(cfg, tmp_path / "run", progress=False)
    assert result.statuses == {status: 2}
