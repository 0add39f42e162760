"""The measured part of the chain as one step: provisioned_cluster → deployed_model →
warmup_log → steady_state_request_log.

They are four assets in the graph, materialized together because the model server only
lives while the cluster does, and both must be torn down whatever happens: provisioning,
deployment and load run inside one try/finally, so no node (or emulator) outlives a
failure. Each link's own logic lives in its own file (cluster.py, model.py, load.py).
"""

from __future__ import annotations

import time

import dagster as dg
from servingbench.assets import cluster as cluster_link
from servingbench.assets import load as load_link
from servingbench.assets import model as model_link
from servingbench.assets import quality as quality_link
from servingbench.assets import telemetry as telemetry_link
from servingbench.assets.partitions import candidate_of, run_value
from servingbench.assets.pools import pool_slot
from servingbench.resources.analysis.workload_outputs import step_reader
from servingbench.resources.contract import accelerators, durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicated, SeveralModels
from servingbench.resources.loadgen import LoadConfigError, LoadError
from servingbench.resources.loadgen.generator import ladder_of

# The Dagster run carries the servingbench run id under this tag, so the reaper can ask
# whether the run that owns a node group is still going (pipelines/liveness.py).
RUN_TAG = "servingbench/run-id"
KEYS = ("provisioned_cluster", "deployed_model", "warmup_log", "steady_state_request_log",
        "quality")
DESCRIPTIONS = {
    "provisioned_cluster": "The scope that produces the tokens: account, region, cluster, node "
                           "group, instance type × count (the local profile: this host, EMULATED).",
    "deployed_model": "The engine serving the candidate, with cold-start sub-phases recorded "
                      "apart from steady state.",
    "warmup_log": "Warm-up requests (contract §2.2, phase = warmup); never feed a figure.",
    "steady_state_request_log": "Steady-state requests and their chunk log (contract §2.2/§2.3).",
    "quality": quality_link.DESCRIPTION,
}


RESOURCES = {"cluster", "model_server", "load_generator", "storage", "candidates"}


def initial_manifest(candidate: Candidate, run_id: str, source: str) -> dict:
    m = mf.empty(run_id, source, time.time_ns())
    m.update(candidate=candidate.name, model=candidate.model, model_revision=candidate.model_revision,
             precision=candidate.precision, tensor_parallel=candidate.tensor_parallel,
             expert_parallel=candidate.expert_parallel, max_model_len=candidate.max_model_len,
             engine=candidate.engine, image_digest=candidate.image_digest,
             instance_type=candidate.instance_type, node_count=candidate.node_count,
             scenario=dict(candidate.scenario),
             price_basis=candidate.price.as_manifest() if candidate.price else None,
             accelerator=accelerators.accelerator_of(candidate.instance_type),
             accelerators_per_node=accelerators.per_node_of(candidate.instance_type))
    match candidate.deployment:
        case Replicated() as plan:
            m["replicas"] = plan.replicas.as_dict()
            m["autoscaling"] = plan.as_dict()["autoscaling"]
        case SeveralModels() as plan:
            # every key but sleep_level (how a swapped model sleeps is the deployment's)
            m["models"] = [slot.as_manifest() for slot in plan.models]
    if candidate.capacity is not None:
        m["capacity"] = candidate.capacity
    if candidate.sweep is not None:
        m["sweep"] = {"name": candidate.sweep["name"], "settings": dict(candidate.sweep["settings"])}
    if candidate.price and candidate.price.bases:
        # the price sheet's what-if bases (unverified); the eks profile replaces them with
        # looked-up prices when it fetches the bill (assets/bill.py)
        m["price_bases"] = [dict(b) for b in candidate.price.bases]
    return m


def build(partitions_def) -> dg.AssetsDefinition:
    deps = {KEYS[0]: set()} | {KEYS[i]: {dg.AssetKey(KEYS[i - 1])} for i in range(1, len(KEYS))}

    @dg.multi_asset(
        name="benchmark_run",
        outs={k: dg.AssetOut(description=DESCRIPTIONS[k], group_name="benchmark") for k in KEYS},
        internal_asset_deps=deps, partitions_def=partitions_def, can_subset=False,
        required_resource_keys=RESOURCES)
    def benchmark_run(context):
        r = context.resources
        candidate = r.candidates[candidate_of(context)]
        fit = cluster_link.preflight(candidate, r.model_server)
        run_id, run_dir = r.storage.new_run(candidate.name, candidate.instance_type)
        # before anything is created: the reaper keeps what carries this run id while the
        # Dagster run is not finished
        context.instance.add_run_tags(context.run_id, {RUN_TAG: run_id})
        emulated_scope = r.cluster.emulated_for(candidate)
        manifest = initial_manifest(candidate, run_id,
                                    "emulated" if emulated_scope else "measured")
        # at once, before anything is created or logged: a run stopped by a signal from
        # here on leaves a folder whose manifest says what it was
        mf.dump(manifest, run_dir / "manifest.json")
        context.log.info(f"run {run_id} → {run_dir}")
        durable.write_json(run_dir / "partition.json", {
            "partition": str(context.partition_key), "created_at": mf.format_ts(time.time_ns()),
            "dagster_run_id": context.run_id})
        # the pool slot spans provision → teardown: the nodes the quota counts
        with pool_slot(context, candidate.pool, candidate.pool_limit, run_dir / "pool.json"):
            info = r.cluster.provision(candidate, run_id)
            try:
                manifest.update(info.facts)
                manifest["phases"].update(info.phases)
                mf.dump(manifest, run_dir / "manifest.json")
                yield dg.Output(run_value(run_id, run_dir, **info.facts), "provisioned_cluster",
                                metadata=cluster_link.metadata(info, fit, run_dir))
                with r.model_server.deploy(candidate, info, run_dir) as dep:
                    manifest.update(dep.facts)
                    manifest["phases"].update(dep.phases)
                    # measured only when both the scope and the engine are real
                    manifest["source"] = "emulated" if dep.emulated or emulated_scope else "measured"
                    mf.dump(manifest, run_dir / "manifest.json")
                    yield dg.Output(run_value(run_id, run_dir, endpoint=dep.endpoint,
                                              emulated=dep.emulated),
                                    "deployed_model", metadata=model_link.metadata(dep))
                    try:
                        with telemetry_link.sampling(dep, run_dir, run_id, context.log):
                            result = r.load_generator.run(
                                candidate, dep.endpoint, dep.served_model, run_dir, run_id,
                                progress=_progress(context),
                                judge=step_reader(
                                    run_dir, candidate.scenario.get("kind"),
                                    candidate.scenario.get("slo"),
                                    ladder=ladder_of(r.load_generator, candidate) is not None),
                                api_key_env=dep.api_key_env)
                    except (LoadError, LoadConfigError, mf.ManifestError) as exc:
                        raise dg.Failure(description=f"load generator: {exc}",
                                         metadata={"run_dir": dg.MetadataValue.path(str(run_dir))}) from None
                    # Same endpoint, after the steady phase closed: quality never overlaps timing.
                    quality = quality_link.run_quality(candidate, dep.endpoint, dep.served_model,
                                                       run_id, run_dir,
                                                       emulated=manifest["source"] == "emulated")
            finally:
                r.cluster.teardown(info)
        manifest = mf.load(run_dir / "manifest.json")
        context.log.info(f"{result.n_warmup} warm-up and {result.n_requests} steady requests "
                         f"recorded ({manifest['source']})")
        if getattr(result, "ladder_stop", None):
            context.log.info(f"load ladder {result.ladder_stop}")
        for w in result.failed_workers:
            # named in the manifest too, and the steps it was in are client-limited (invalid)
            context.log.warning(f"load worker {w['name']} failed ({w['reason']}); its records "
                                "up to then are kept")
        yield dg.Output(run_value(run_id, run_dir, rows=result.n_warmup), "warmup_log",
                        metadata=load_link.log_metadata(run_dir, "warmup_log", manifest, "warmup"))
        yield dg.Output(run_value(run_id, run_dir, rows=result.n_requests),
                        "steady_state_request_log",
                        metadata=load_link.log_metadata(run_dir, "steady_state_request_log",
                                                        manifest, "steady")
                        | telemetry_link.metadata(run_dir))
        yield dg.Output(quality[0], "quality", metadata=quality[1])

    return benchmark_run


def _progress(context):
    """A live display on the terminal (`servingbench demo`), else each step's summary in the
    Dagster log (the UI, schedules)."""
    if context.resources.load_generator.progress == "terminal":
        return True

    def sink(event: dict) -> None:
        if "message" in event:  # the load Job's progress (resources/loadjob/)
            context.log.info(event["message"])
        elif event.get("finished"):
            ttft = event["ttft_p50_s"]
            context.log.info(
                f"step {event['step']}: {event['done']}/{event['total']} requests, "
                f"{event['tok_s']:,.0f} tok/s, {event['errors']} errors, p50 TTFT "
                f"{'-' if ttft is None else f'{ttft * 1e3:.0f} ms'}"
                + (f", CLIENT-LIMITED: {'; '.join(event['client_limited'])}"
                   if event["client_limited"] else ""))
    return sink
