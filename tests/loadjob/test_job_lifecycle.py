"""The load Job's lifecycle against the fake Kubernetes API (real HTTP on 127.0.0.1, a real
EKS token from dummy credentials), with the pods' shards going through moto's S3 server:
create, watch, every pod's outcome (a failed one named with its reason, its shard kept),
shards collected into the run folder and read as one record set, the Job always deleted."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401 - pa.ipc
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli.loadpod import uploads
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import PARTIAL_SUFFIX, SHARDED
from servingbench.resources.loadgen import config_file
from servingbench.resources.loadgen.config_file import CONFIG_FILE
from servingbench.resources.loadgen.errors import LoadConfigError, LoadError
from servingbench.resources.loadgen.generator import LoadGenerator
from servingbench.resources.loadjob.generator import KubeJobLoadGenerator
from servingbench.resources.loadjob.job import LoadJob
from servingbench.resources.loadjob.render import KEY_ENV, LoadJobSpec
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.token import TokenSource
from servingbench.resources.storage import runstore

from tests.support.eks.aws import DUMMY_KEY_ID, REGION
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import DIGEST
from tests.support.emulator import FIXED_MODEL
from tests.support.fleet import candidates_file

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "good"
IMAGE = f"registry.example/servingbench@{DIGEST}"


def kube_for(api):
    token = TokenSource.for_eks(boto3.Session(), "bench", REGION)
    return KubeClient(api.url, token, sleep=lambda s: None)


def arg(job: dict, flag: str) -> str:
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index(flag) + 1]


def pod_player(tmp_path: Path, failing: dict[int, dict], uploaded: dict):
    """Each pod writes its share of the fixture's records as its shards and uploads them
    with loadpod's own upload list; a failing pod uploads what it had, then fails: its
    streams, as a pod stopped mid-step (a full disk) has no parquet shard."""
    steady = pq.read_table(FIXTURE / "steady_state_request_log.parquet")
    chunks = pq.read_table(FIXTURE / "chunk_log.parquet")
    warmup = pq.read_table(FIXTURE / "warmup_log.parquet")

    def play(job, index):
        n = job["spec"]["completions"]
        worker = f"pod-{index}"
        scratch = tmp_path / "pods" / worker
        scratch.mkdir(parents=True)
        mine = steady.take([i for i in range(steady.num_rows) if i % n == index])
        ids = pa.array(mine["request_id"].to_pylist())
        tables = {"steady_state_request_log": mine,
                  "chunk_log": chunks.filter(pc.is_in(chunks["request_id"], value_set=ids)),
                  "warmup_log": warmup if index == 0 else warmup.slice(0, 0)}
        for name in SHARDED:
            t = tables[name]
            if name != "chunk_log":
                t = t.append_column("worker", pa.array([worker] * t.num_rows, pa.string()))
            if index in failing:
                with pa.OSFile(str(scratch / f"{name}.{worker}{PARTIAL_SUFFIX}"), "wb") as f, \
                        pa.ipc.new_stream(f, t.schema) as w:
                    w.write_table(t)
            else:
                pq.write_table(t, scratch / f"{name}.{worker}.parquet")
        m = json.loads((FIXTURE / "manifest.json").read_text())
        m["steps"][0].update(target=1.0, client_limited=index == 1, loop_lag_p99_s=0.001 * (index + 1))
        # a pod worker's account of its part (the load generator's pod mode writes it)
        summary = {"name": worker, "steps": m["steps"], "phases": m["phases"],
                   "late_start_s": 2.5 if index == 1 else 0.0}
        (scratch / f"worker.{worker}.json").write_text(json.dumps(summary))
        names = uploads(scratch, worker)
        runstore.put(scratch, arg(job, "--upload"), names)
        uploaded[worker] = mine.num_rows
        return failing.get(index, {"phase": "Succeeded"})
    return play


def setup_run(tmp_path: Path) -> tuple[object, Path]:
    (candidate,) = load_candidates(candidates_file(tmp_path, {"p5-scout": "p5.48xlarge"}))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(FIXTURE / "manifest.json", run_dir / "manifest.json")
    shutil.copy(FIXTURE / "bill.parquet", run_dir / "bill.parquet")
    return candidate, run_dir


OOM = {"phase": "Failed", "containerStatuses": [{"name": "load", "state": {"terminated": {
    "exitCode": 137, "reason": "OOMKilled", "message": "step c=2: 812 requests in flight"}}}]}


def test_a_load_job_runs_collects_records_a_failed_pod_and_is_deleted(s3_bucket, tmp_path,
                                                                       monkeypatch):
    uploaded: dict = {}
    monkeypatch.setenv("ENGINE_KEY_FOR_TEST", "k-not-logged-0123")
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID,
                     pod_runner=pod_player(tmp_path, {2: OOM}, uploaded)) as api:
        gen = KubeJobLoadGenerator(kube=lambda: kube_for(api), image=IMAGE, data_uri=s3_bucket,
                                   pods=3, base=LoadGenerator(requests_per_step=6),
                                   owner="sb-test-install", start_delay_s=0, poll_s=0)
        candidate, run_dir = setup_run(tmp_path)
        seen = []
        result = gen.run(candidate, "http://eng.servingbench.svc:8000", "m", run_dir,
                         "fixture-good", progress=seen.append, api_key_env="ENGINE_KEY_FOR_TEST")
        (job_path,) = [r["path"] for r in api.requests
                       if r["method"] == "PATCH" and "/jobs/" in r["path"]]
        job_name = job_path.rsplit("/", 1)[1]
        # the Job and its key Secret are gone, and so are its pods
        assert api.deleted == [f"Job/{job_name}", f"Secret/{job_name}-key"]
        assert not api.objects and not api.pods
    # the pods ran the chain's own config for this candidate, read from the run's prefix
    # (never a copy of the plan in flags), as 3 workers with the key from their Secret
    runstore.get(s3_bucket + "/runs/fixture-good", [CONFIG_FILE], tmp_path / "sent")
    chain = LoadGenerator(requests_per_step=6).config(
        candidate, "http://eng.servingbench.svc:8000", "m", "fixture-good")
    assert config_file.read(tmp_path / "sent" / CONFIG_FILE) == replace(
        chain, workers=3, api_key_env=KEY_ENV)
    assert config_file.read(run_dir / CONFIG_FILE) == config_file.read(tmp_path / "sent" / CONFIG_FILE)
    m = mf.load(run_dir / "manifest.json")
    assert m["workers"] == [
        {"name": "pod-0", "status": "ok", "reason": None},
        {"name": "pod-1", "status": "ok", "reason": None},
        {"name": "pod-2", "status": "failed", "reason": "container load exited 137 (OOMKilled): "
                                                        "step c=2: 812 requests in flight"}]
    # every row any pod uploaded is in the run, the failed pod's shard included
    assert result.n_requests == sum(uploaded.values()) == 3 and result.n_warmup == 1
    (step,) = m["steps"]
    assert step["client_limited"] is True and step["loop_lag_p99_s"] == pytest.approx(0.003)
    assert step["target"] == 1.0
    res = analyze_run(run_dir)
    assert res.exit_code != 2, res.message
    assert sum(r["n_requests"] for r in res.metrics.to_pylist()) == 3
    messages = [e["message"] for e in seen]
    assert any("pod-2" in x and "FAILED" in x and "OOMKilled" in x for x in messages)
    assert any("3 pods" in x for x in messages)
    assert any("pod-1 2.5s late" in x for x in messages)
    assert [w["name"] for w in result.failed_workers] == ["pod-2"]
    assert not any("k-not-logged-0123" in x for x in messages)


def test_no_pod_succeeding_fails_the_load_and_still_deletes_the_job(s3_bucket, tmp_path):
    failing = {i: {"phase": "Failed", "reason": "DeadlineExceeded",
                   "message": "Pod was active on the node longer than the specified deadline"}
               for i in range(2)}
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID,
                     pod_runner=pod_player(tmp_path, failing, {})) as api:
        gen = KubeJobLoadGenerator(kube=lambda: kube_for(api), image=IMAGE, data_uri=s3_bucket,
                                   pods=2, start_delay_s=0, poll_s=0)
        candidate, run_dir = setup_run(tmp_path)
        with pytest.raises(LoadError, match="no load pod succeeded: pod-0: DeadlineExceeded"):
            gen.run(candidate, "http://e:8000", "m", run_dir, "fixture-good")
        assert [d.split("/")[0] for d in api.deleted] == ["Job"] and not api.pods


def test_a_candidate_the_pods_cannot_run_is_refused_before_any_job(s3_bucket, tmp_path):
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, pod_runner=lambda job, i: {}) as api:
        gen = KubeJobLoadGenerator(kube=lambda: kube_for(api), image=IMAGE, data_uri=s3_bucket,
                                   pods=2, start_delay_s=0, poll_s=0)
        candidate, run_dir = setup_run(tmp_path)
        turns = replace(candidate, scenario={"kind": "multi_turn", "turns": 2})
        with pytest.raises(LoadConfigError, match="kind 'multi_turn' is not supported with load pods"):
            gen.run(turns, "http://e:8000", "m", run_dir, "fixture-good")
        assert not api.requests and not (run_dir / CONFIG_FILE).exists()


def stuck(job, index):
    if index == 1:
        return {"phase": "Pending", "containerStatuses": [{"name": "load", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": "manifest unknown"}}}]}
    return {"phase": "Succeeded"}


def test_a_pod_stuck_for_good_ends_the_watch_with_its_reason(s3_bucket):
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, pod_runner=stuck) as api:
        spec = LoadJobSpec(run_id="r1", pods=2, image=IMAGE,
                           upload_uri=f"{s3_bucket}/runs/r1", start_at="2026-11-29T02:30:00Z")
        with LoadJob(kube_for(api), spec).running(timeout_s=3600, poll_s=0) as outcomes:
            pass
        assert [o.status for o in outcomes] == ["ok", "failed"]
        assert "ImagePullBackOff: manifest unknown" in outcomes[1].reason
        assert "still Pending" in outcomes[1].reason
        assert api.deleted == [f"Job/{spec.name}"]


def test_the_watch_is_bounded(s3_bucket):
    never = {"phase": "Running"}
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID,
                     pod_runner=lambda job, i: never) as api:
        spec = LoadJobSpec(run_id="r2", pods=1, image=IMAGE,
                           upload_uri=f"{s3_bucket}/runs/r2", start_at="2026-11-29T02:30:00Z")
        now = [0.0]
        job = LoadJob(kube_for(api), spec, clock=lambda: now[0],
                      sleep=lambda s: now.__setitem__(0, now[0] + s))
        with job.running(timeout_s=60, poll_s=10) as outcomes:
            pass
        (o,) = outcomes
        assert o.status == "failed" and "not finished within 60s" in o.reason
        assert api.deleted == [f"Job/{spec.name}"]


def test_the_rendered_pods_run_as_real_processes(server, s3_bucket, tmp_path):
    """The Job's own pod command, run as N real processes (one per index, with
    JOB_COMPLETION_INDEX) against the fixed-timing server: their shards reach moto's S3 and
    the run holds every request of the plan."""
    import os
    import subprocess
    import sys

    from servingbench.pipelines.cli import load

    if "--worker-index" not in load.parser().format_help():
        pytest.skip("the load generator's pod mode (--worker-index) is not on this branch")
    procs: dict[int, subprocess.Popen] = {}

    def run_pod(job, index):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        if index not in procs:
            args = [str(tmp_path / f"pod-{index}") if a == "/scratch/run" else a for a in c["args"]]
            env = {**os.environ, "JOB_COMPLETION_INDEX": str(index), "PYTHONPATH": str(FIXTURE.parents[2]),
                   **{e["name"]: e["value"] for e in c["env"] if "value" in e and e["name"] != "TMPDIR"}}
            log = open(tmp_path / f"pod-{index}.log", "wb")  # noqa: SIM115 - the process keeps it
            procs[index] = subprocess.Popen([sys.executable, "-m", "servingbench.pipelines.cli", *args],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)
        p = procs[index]
        if p.poll() is None:
            return {"phase": "Running"}
        if p.returncode == 0:
            return {"phase": "Succeeded"}
        tail = (tmp_path / f"pod-{index}.log").read_text()[-300:]
        return {"phase": "Failed", "containerStatuses": [{"name": "load", "state": {
            "terminated": {"exitCode": p.returncode, "message": tail}}}]}

    try:
        with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, pod_runner=run_pod) as api:
            gen = KubeJobLoadGenerator(
                kube=lambda: kube_for(api), image=IMAGE, data_uri=s3_bucket, pods=2,
                base=LoadGenerator(concurrency=(4,), requests_per_step=8, warmup_requests=2,
                                   input_tokens=16, output_tokens=8),
                start_delay_s=8, poll_s=0.5)
            candidate, run_dir = setup_run(tmp_path)
            (run_dir / "bill.parquet").unlink()
            result = gen.run(candidate, server.base_url, FIXED_MODEL, run_dir, "fixture-good")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    m = mf.load(run_dir / "manifest.json")
    assert [w["status"] for w in m["workers"]] == ["ok", "ok"], m["workers"]
    assert result.n_requests == 8 and result.n_warmup == 2
    res = analyze_run(run_dir)
    assert res.exit_code != 2, res.message
