"""Replay resources: the chain driven by a recorded run folder instead of a cluster, a server
and a bill. Asset tests use them (with `tests/fixtures/*`), and so can anyone re-running the
pipeline on records they already have. They record nothing new: the run's source stays the
recording's, and the recorded run_id is rewritten to the new run's.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from servingbench.resources.billing.interface import BillSource
from servingbench.resources.cluster.interface import Cluster, ClusterInfo
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.schemas import read_records, write_parquet
from servingbench.resources.model_server.interface import Deployment, ModelServer

SCOPE = ("account_id", "region", "availability_zone", "cluster_name", "k8s_version", "nodegroup",
         "instance_type", "node_count", "instance_ids", "driver_version")


def _rebrand(table: pa.Table, old: str, new: str, columns=("run_id",)) -> pa.Table:
    for col in columns:
        i = table.schema.get_field_index(col)
        table = table.set_column(i, col, pc.if_else(pc.equal(table[col], old), new, table[col]))
    return table


@dataclass
class ReplayCluster(Cluster):
    recording: Path
    emulated = False

    def provision(self, candidate: Candidate, run_id: str) -> ClusterInfo:
        m = mf.load(Path(self.recording) / "manifest.json")
        return ClusterInfo({k: m[k] for k in SCOPE},
                           {k: v for k, v in m["phases"].items() if k == "provision"})

    def teardown(self, info: ClusterInfo) -> None:
        return None


@dataclass
class ReplayModelServer(ModelServer):
    recording: Path

    @contextlib.contextmanager
    def deploy(self, candidate: Candidate, cluster: ClusterInfo, run_dir: Path):
        m = mf.load(Path(self.recording) / "manifest.json")
        yield Deployment(endpoint=f"replay://{Path(self.recording).name}", served_model=m["model"] or "",
                         facts={k: m[k] for k in ("engine", "engine_version", "image_digest")},
                         phases={k: v for k, v in m["phases"].items()
                                 if k in ("deploy", "image_pull", "weights_load", "compile", "ready")},
                         emulated=m["source"] == "emulated")


@dataclass
class ReplayResult:
    n_warmup: int
    n_requests: int
    # the chain reads it of every load result; a replay runs no worker of its own
    failed_workers: list[dict] = field(default_factory=list)


@dataclass
class ReplayLoad:
    recording: Path
    progress: str = "log"

    def run(self, candidate: Candidate, endpoint, served_model, run_dir: Path, run_id: str, progress=None,
            judge=None, api_key_env=None):
        # `judge` (the chain's SLO judge for capacity searches) has nothing to decide here:
        # a replay's steps were recorded, never searched.
        rec = Path(self.recording)
        old = mf.load(rec / "manifest.json")
        counts = {}
        for name in ("warmup_log", "steady_state_request_log", "chunk_log"):
            table = _rebrand(read_records(rec, name), old["run_id"], run_id)
            write_parquet(table, Path(run_dir) / f"{name}.parquet")
            counts[name] = len(table)
        if (rec / "server_metrics.json").exists():  # the engine's counters, as recorded
            shutil.copyfile(rec / "server_metrics.json", Path(run_dir) / "server_metrics.json")
        m = mf.load(Path(run_dir) / "manifest.json")
        m["phases"].update({k: v for k, v in old["phases"].items() if k in ("warmup", "steady")})
        m.update(steps=old["steps"], scenario=old["scenario"], source=old["source"])
        mf.dump(m, Path(run_dir) / "manifest.json")
        return ReplayResult(counts["warmup_log"], counts["steady_state_request_log"])


@dataclass
class RecordedBill(BillSource):
    recording: Path
    source = "recorded"  # the rows keep the source they were recorded with

    def fetch_bill(self, manifest: dict) -> pa.Table:
        old = mf.load(Path(self.recording) / "manifest.json")["run_id"]
        return _rebrand(read_records(Path(self.recording), "bill"), old, manifest["run_id"],
                        ("run_id", "tag_value"))
