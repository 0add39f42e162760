"""End to end as a user would: the Dagster webserver on 127.0.0.1, benchmark_job launched for
one partition through its GraphQL API, polled to success; then the cost table parquet and the
asset metadata, read back through the same API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.resources.http import control

from tests.support.net import free_port

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = """
candidates:
  - name: p5-scout-bf16-tp8
    instance_type: p5.48xlarge
    model: meta-llama/Llama-4-Scout-17B-16E-Instruct
    precision: bf16
    tensor_parallel: 8
    scenario: {input_tokens: 64, output_tokens: 16, dataset: null}
    load: {concurrency: [1, 2], requests_per_step: 6, warmup_requests: 2}
    price: {sheet: %s}
"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"""
ASSET = """query { assetOrError(assetKey: {path: ["cost_per_1m_output_tokens"]}) {
  ... on Asset { assetMaterializations(limit: 1) { partition runId metadataEntries { label
    ... on PathMetadataEntry { path } ... on MarkdownMetadataEntry { mdStr }
    ... on TextMetadataEntry { text } } } } } }"""


def _gql(http: httpx.Client, url: str, query: str, variables: dict | None = None) -> dict:
    resp = http.post(url, json={"query": query, "variables": variables or {}})
    resp.raise_for_status()
    body = resp.json()
    assert "errors" not in body, body
    return body["data"]


def test_benchmark_job_through_the_webserver(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nrun_coordinator:\n"
        "  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n")
    cands = tmp_path / "candidates.yaml"
    cands.write_text(CANDIDATES % (REPO / "pipelines" / "price_sheet.yaml"))
    env = {**os.environ, "DAGSTER_HOME": str(home), "SERVINGBENCH_DATA_DIR": str(data),
           "SERVINGBENCH_CANDIDATES": str(cands), "SERVINGBENCH_EMULATOR_TIME_SCALE": "0.2",
           "SERVINGBENCH_EMULATOR_COLD_START_S": "0.2"}
    port = free_port()
    exe = str(Path(sys.executable).parent / "dagster-webserver")
    proc = subprocess.Popen([exe, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "webserver.log", "w"),  # noqa: SIM115
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/graphql"
    # one client for every poll: a new one per request (httpx.get) builds a TLS context,
    # ~35 ms of CPU, a few CPU-seconds over the start-up and the run's polls
    http = control.client(timeout=60, trust_env=False)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            try:
                if http.get(f"http://127.0.0.1:{port}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "webserver did not start"
            time.sleep(0.2)
        key = "p5-scout-bf16-tp8|2026-11-29"
        tags = [{"key": "dagster/partition", "value": key},
                {"key": "dagster/partition/candidate", "value": "p5-scout-bf16-tp8"},
                {"key": "dagster/partition/date", "value": "2026-11-29"}]
        params = {"selector": {"repositoryLocationName": "servingbench.pipelines.definitions",
                               "repositoryName": "__repository__", "jobName": "benchmark_job"},
                  "executionMetadata": {"tags": tags}}
        launched = _gql(http, url, LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        deadline = time.monotonic() + 300
        status = None
        while status not in ("SUCCESS", "FAILURE", "CANCELED"):
            assert time.monotonic() < deadline, f"run still {status}"
            time.sleep(0.2)  # a status query is cheap; a second per poll was idle time
            status = _gql(http, url, STATUS, {"id": run_id})["runOrError"]["status"]
        assert status == "SUCCESS"
        (mat,) = _gql(http, url, ASSET)["assetOrError"]["assetMaterializations"]
        assert mat["partition"] == key and mat["runId"] == run_id
        entries = {e["label"]: e for e in mat["metadataEntries"]}
        assert "EMULATED" in entries["cost_per_1m"]["mdStr"]
        assert entries["source"]["text"] == "emulated"
        cost = pq.read_table(Path(entries["parquet"]["path"])).to_pylist()
        assert [r["step"] for r in cost] == ["c=1", "c=2"]
        assert all(r["source"] == "emulated" and r["cost_per_1m_output_usd"] > 0 for r in cost)
        assert (data / "servingbench.duckdb").exists()
    finally:
        http.close()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
