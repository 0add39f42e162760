"""provisioned_cluster: the pre-flight fit check, then the scope that will produce tokens."""

from __future__ import annotations

import dagster as dg

from resources.cluster.interface import Cluster, ClusterInfo
from resources.contract.candidate import Candidate


def preflight(candidate: Candidate) -> dict:
    """Weights + a minimal KV cache vs accelerator memory, before anything is provisioned.
    Raises dg.Failure with the arithmetic when the model cannot load."""
    from emulator.fit import fit_check
    from emulator.specs import SpecError

    try:
        fit = fit_check(candidate.instance_type, candidate.model_key, candidate.precision,
                        candidate.tensor_parallel)
    except SpecError as exc:
        return {"fit": f"not checked: {exc}"}
    if not fit.fits:
        raise dg.Failure(description=f"pre-flight fit check: {fit.message}",
                         metadata={"weights_gb": fit.weights_gb, "capacity_gb": fit.capacity_gb})
    return {"fit": fit.message}


def provision(cluster: Cluster, candidate: Candidate, run_id: str) -> ClusterInfo:
    return cluster.provision(candidate, run_id)


def metadata(info: ClusterInfo, fit: dict, run_dir) -> dict:
    md = {k: dg.MetadataValue.text(str(v)) for k, v in info.facts.items() if v not in (None, [])}
    md.update({f"host_{k}": dg.MetadataValue.text(str(v)) for k, v in info.host.items()})
    md["preflight"] = dg.MetadataValue.text(fit["fit"])
    md["run_dir"] = dg.MetadataValue.path(str(run_dir))
    return md
