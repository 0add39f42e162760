"""deploy/neuron-monitor.yaml: valid Kubernetes, and its reader serves what the sampler reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import kubernetes_validate
import yaml

from tests.support.net import free_port
from tests.support.telemetry import neuron_report, wait_for

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "neuron-monitor.yaml"


def docs():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def test_manifest_validates_against_the_kubernetes_schema():
    kinds = []
    for doc in docs():
        kubernetes_validate.validate(doc, "1.33", strict=True)
        kinds.append(doc["kind"])
    assert kinds == ["ConfigMap", "DaemonSet"]
    monitor = json.loads(docs()[0]["data"]["monitor.json"])
    groups = {m["type"] for m in monitor["neuron_runtimes"][0]["metrics"]}
    assert monitor["period"] == "1s" and groups == {"neuroncore_counters", "memory_used"}


def test_the_reader_serves_the_last_report_neuron_monitor_printed(tmp_path):
    script = docs()[0]["data"]["latest.py"].replace("8081", str(port := free_port()))
    (tmp_path / "latest.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "latest.py")], stdin=subprocess.PIPE)
    try:
        first = neuron_report({0: (10.0, {"tensors": 1})}, device_used=1)
        last = neuron_report({0: (90.0, {"tensors": 2})}, device_used=2)
        for r in (first, last):
            proc.stdin.write(json.dumps(r).encode() + b"\n")
        proc.stdin.flush()
        url = f"http://127.0.0.1:{port}/report"

        def served_last():
            try:
                return httpx.get(url, timeout=1).json() == last
            except httpx.HTTPError:
                return False
        assert wait_for(served_last, timeout_s=20)
        assert httpx.get(f"http://127.0.0.1:{port}/other", timeout=1).status_code == 404
    finally:
        proc.kill()
        proc.wait(timeout=10)
