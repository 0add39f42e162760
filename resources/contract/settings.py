"""Every SERVINGBENCH_* environment variable servingbench reads: name, default and meaning,
in one list. Code reads a variable through `get` (never `os.environ` with a name of its own,
never a name built from pieces), so a grep for a name lands here; docs/settings.md is
generated from this list (`python -m servingbench.resources.contract.settings`) and a test
checks it is current. In the Dagster UI a run's resources show the variables they were
configured from (pipelines/resources.py).

An empty value counts as unset. Values are text here: each reader parses and checks its own
and names the variable in its error. A default written `None` is either nothing (the feature
is off) or computed by the reader, as `shown` says. Read when used, never at import."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    meaning: str
    scope: str = "any"  # any | eks (the eks profile) | internal (set by servingbench) | tests
    shown: str | None = None    # the docs' words for a default the reader computes

    @property
    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        return f"`{self.default}`" if self.default is not None else "unset"


SETTINGS: tuple[Setting, ...] = (
    Setting("SERVINGBENCH_PROFILE", "local", "the resources a run uses: `local` (this host, the "
            "engine emulator, the price sheet) or `eks` (docs/eks.md)"),
    Setting("SERVINGBENCH_DATA_DIR", None, "the data folder: run folders and the DuckDB store",
            shown="`data/` in the checkout"),
    Setting("SERVINGBENCH_DATA_URI", None, "`s3://bucket/prefix`: finished run folders are "
            "published there (docs/deploy.md); the load pods write their shards there"),
    Setting("SERVINGBENCH_CANDIDATES", None, "the candidates file",
            shown="`pipelines/candidates.yaml`"),
    Setting("SERVINGBENCH_EMULATOR_TIME_SCALE", "1", "the engine emulator's clock (2: twice the "
            "modelled hardware's speed)"),
    Setting("SERVINGBENCH_EMULATOR_COLD_START_S", None, "the engine emulator's cold start in "
            "seconds", shown="modelled per candidate"),
    Setting("SERVINGBENCH_ANALYZE_MEMORY", "4GB", "DuckDB's memory limit for one analysis; what "
            "does not fit spills under TMPDIR"),
    Setting("SERVINGBENCH_MEETING_SCALE", "1", "load pods on one machine: the meetings' fixed "
            "waits scaled (docs/eks.md, \"Load pods\")"),
    Setting("SERVINGBENCH_CACHE_DIR", None, "where the real local engine and its models are "
            "cached", shown="`~/.cache/servingbench`"),
    Setting("SERVINGBENCH_IMPORT_ROOTS", None, "comma-separated absolute folders and "
            "`s3://bucket/prefix`es the peer import job's `source` must lie under "
            "(docs/import.md)", shown="`imports/` in the data folder"),
    Setting("SERVINGBENCH_PEERS", None, "where `make peers` installed the peer tools whose runs "
            "the tests import", scope="tests", shown="`~/.cache/servingbench/peers`"),
    Setting("SERVINGBENCH_UPDATE_GOLDEN", None, "`1`: the manifest tests rewrite their golden "
            "files instead of comparing (review the diff)", scope="tests"),
    Setting("SERVINGBENCH_PARENT_FD", None, "in a server this host started "
            "(resources/model_server/child.py): the pipe whose closing means its starter is "
            "gone", scope="internal"),
    Setting("SERVINGBENCH_PARENT_PID", None, "in a server this host started: its starter's "
            "process id", scope="internal"),
    Setting("SERVINGBENCH_ENGINE_API_KEY", None, "the deployed engine's API key, for the load "
            "generator (set by servingbench in its own process and in the load pods)",
            scope="internal"),
    Setting("SERVINGBENCH_EKS_CLUSTER", None, "the EKS cluster's name", "eks", "required"),
    Setting("SERVINGBENCH_EKS_REGION", None, "its AWS region", "eks", "required"),
    Setting("SERVINGBENCH_EKS_NODE_ROLE_ARN", None, "the node IAM role of the node groups it creates",
            "eks", "required"),
    Setting("SERVINGBENCH_EKS_OWNER", None, "this installation's id, tagged on everything it creates; "
            "its reaper touches nothing tagged with another", "eks", "required"),
    Setting("SERVINGBENCH_EKS_SUBNETS", None, "comma-separated subnet ids for the node groups", "eks",
            "the cluster's own"),
    Setting("SERVINGBENCH_EKS_CAPACITY_TYPE", "ON_DEMAND", "`ON_DEMAND`, `SPOT` or `CAPACITY_BLOCK`",
            "eks"),
    Setting("SERVINGBENCH_EKS_CAPACITY_RESERVATION_ID", None, "a capacity reservation the node groups "
            "launch into", "eks"),
    Setting("SERVINGBENCH_EKS_FIS_ROLE_ARN", None, "the AWS FIS experiment role a spot candidate's "
            "`interruptions` run under (docs/spot.md); unset: such a candidate is refused", "eks"),
    Setting("SERVINGBENCH_EKS_EXPOSE", "load_balancer", "how the load generator reaches the engine: "
            "`load_balancer` or `cluster_ip` (inside the cluster)", "eks"),
    Setting("SERVINGBENCH_EKS_SOURCE_RANGES", None, "comma-separated CIDRs allowed to reach the load "
            "balancer (private ranges, unless ALLOW_PUBLIC)", "eks"),
    Setting("SERVINGBENCH_EKS_LB_SCHEME", "internal", "`internal` or `internet-facing` (needs "
            "ALLOW_PUBLIC)", "eks"),
    Setting("SERVINGBENCH_EKS_ALLOW_PUBLIC", None, "`plaintext-api-key`: consent to an engine reachable "
            "from the internet (its key crosses it as plain HTTP)", "eks"),
    Setting("SERVINGBENCH_EKS_RUN_NAMESPACE", "dagster", "the namespace of the Dagster run pods "
            "(labelled servingbench/role=swap-driver, deploy/values.yaml): a swapped model admits "
            "its swap driver from there alone", "eks"),
    Setting("SERVINGBENCH_EKS_RUN_AS_USER", None, "the non-root uid the engines run as", "eks",
            "the image's"),
    Setting("SERVINGBENCH_EKS_DCGM_URL", None, "the engine node's dcgm-exporter /metrics "
            "(docs/telemetry.md)", "eks"),
    Setting("SERVINGBENCH_EKS_NEURON_MONITOR_URL", None, "the neuron-monitor reader's report", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_PODS", "0", "load pods of an Indexed Job (0: the load runs in the "
            "run's process); needs DATA_URI, LOAD_IMAGE and EXPOSE=cluster_ip", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_IMAGE", None, "the project's image for the load pods, "
            "repo@sha256:…", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_NODE_SELECTOR", None, "the load pods' nodes, KEY=VALUE[,…]", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_TOLERATIONS", None, "KEY[=VALUE]:EFFECT[,…] the load pods tolerate",
            "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_SERVICE_ACCOUNT", "servingbench-loadgen", "the load pods' service "
            "account (IRSA: writes the run's S3 prefix)", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_CPU", "1", "the CPU each load pod reserves", "eks"),
    Setting("SERVINGBENCH_EKS_LOAD_START_DELAY_S", "180", "seconds from the Job to the pods' common start "
            "(scheduling and image pull)", "eks"),
)
BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The listed setting `name`; KeyError for a name not listed (every read is listed)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a servingbench setting (resources/contract/settings.py "
                       "lists every one)") from None


def get(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable's value in `env` (default: this process's environment), or its default
    when unset or empty."""
    s = setting(name)
    value = (os.environ if env is None else env).get(name)
    return s.default if value in (None, "") else value


def default(name: str) -> str | None:
    return setting(name).default


def markdown() -> str:
    """docs/settings.md: the list as tables, the profile's settings first."""
    out = ["# Settings", "",
           "Every `SERVINGBENCH_*` environment variable servingbench reads (generated from",
           "`resources/contract/settings.py` by `python -m servingbench.resources.contract.settings`;",
           "a test fails when this page is not current). An empty value counts as unset.", ""]
    for scope, title in (("any", "Every profile"), ("eks", "The eks profile (docs/eks.md)"),
                         ("internal", "Set by servingbench itself"),
                         ("tests", "Read by the test suite")):
        out += [f"## {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        out += [f"| `{s.name}` | {s.default_text} | {s.meaning} |"
                for s in SETTINGS if s.scope == scope]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
