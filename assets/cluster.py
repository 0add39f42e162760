"""provisioned_cluster: the pre-flight checks, then the scope that will produce tokens."""

from __future__ import annotations

import dagster as dg
from servingbench.resources.cluster.interface import ClusterInfo
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.model_server.interface import ModelServer


def preflight(candidate: Candidate, model_server: ModelServer) -> dict:
    """Before anything is provisioned or written: the model server is asked whether it can
    run the candidate's deployment plan as written (a run started from the UI or a schedule
    fails naming the key; `servingbench run` and `demo` exit 2 on it before Dagster starts),
    then TP vs accelerators per node and weights + KV cache vs accelerator memory
    (resources/cluster/fit.py, the rule a sweep prunes with). Raises dg.Failure with the
    reason, or with the arithmetic when the model cannot load."""
    from servingbench.resources.cluster.fit import check

    why = model_server.refuses(candidate)
    if why is not None:
        raise dg.Failure(description=f"candidate {candidate.name}: {why}")
    fit = check(candidate)
    if fit.fits is False:
        raise dg.Failure(description=f"pre-flight fit check: {fit.message}",
                         metadata={k: v for k, v in (("weights_gb", fit.weights_gb),
                                                     ("capacity_gb", fit.capacity_gb))
                                   if v is not None})
    return {"fit": fit.message}


def metadata(info: ClusterInfo, fit: dict, run_dir) -> dict:
    md = {k: dg.MetadataValue.text(str(v)) for k, v in info.facts.items() if v not in (None, [])}
    md.update({f"host_{k}": dg.MetadataValue.text(str(v)) for k, v in info.host.items()})
    md["preflight"] = dg.MetadataValue.text(fit["fit"])
    md["run_dir"] = dg.MetadataValue.path(str(run_dir))
    return md
