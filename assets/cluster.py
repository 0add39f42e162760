"""provisioned_cluster: the pre-flight fit check, then the scope that will produce tokens."""

from __future__ import annotations

import dagster as dg
from servingbench.resources.cluster.interface import Cluster, ClusterInfo
from servingbench.resources.contract.candidate import Candidate


def preflight(candidate: Candidate) -> dict:
    """TP vs accelerators per node, weights + KV cache vs accelerator memory, before anything
    is provisioned (resources/cluster/fit.py, the rule a sweep prunes with). Raises
    dg.Failure with the arithmetic when the model cannot load."""
    from servingbench.resources.cluster.fit import check

    fit = check(candidate)
    if fit.fits is False:
        raise dg.Failure(description=f"pre-flight fit check: {fit.message}",
                         metadata={k: v for k, v in (("weights_gb", fit.weights_gb),
                                                     ("capacity_gb", fit.capacity_gb))
                                   if v is not None})
    return {"fit": fit.message}


def provision(cluster: Cluster, candidate: Candidate, run_id: str) -> ClusterInfo:
    """The candidate's scope. On EKS, first the check that its `replicas` / `autoscaling`
    are all rendered (kube/autoscale.py `unwired`): a run started from the UI or a schedule
    fails naming the key before its node group is made (`servingbench run` exits 2 on it
    before any of this)."""
    from servingbench.resources.cluster.eks import EksNodegroupCluster
    from servingbench.resources.model_server.kube.autoscale import unwired
    from servingbench.resources.model_server.kube.models_deploy import refused

    if isinstance(cluster, EksNodegroupCluster):
        if getattr(candidate, "models", None):
            # one pod per model (kube/models_deploy.py): what it cannot run fails here
            why = refused(candidate)
            if why is not None:
                raise dg.Failure(description=f"candidate {candidate.name}: {why}")
            return cluster.provision(candidate, run_id)
        why = unwired(candidate.engine, candidate.replicas, candidate.autoscaling)
        if why is not None:
            raise dg.Failure(description=f"candidate {candidate.name}: {why}")
    return cluster.provision(candidate, run_id)


def metadata(info: ClusterInfo, fit: dict, run_dir) -> dict:
    md = {k: dg.MetadataValue.text(str(v)) for k, v in info.facts.items() if v not in (None, [])}
    md.update({f"host_{k}": dg.MetadataValue.text(str(v)) for k, v in info.host.items()})
    md["preflight"] = dg.MetadataValue.text(fit["fit"])
    md["run_dir"] = dg.MetadataValue.path(str(run_dir))
    return md
