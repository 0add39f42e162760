"""The Definitions load, and a snapshot of the graph: a change to it is a visible diff."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings

ASSETS = ["benchmark_report", "cost_explorer_bill", "cost_per_1m_output_tokens", "deployed_model",
          "derived_metrics", "provisioned_cluster", "quality", "steady_state_request_log",
          "warmup_log"]
CHECKS = sorted([
    "cost_explorer_bill:bill_has_a_single_source", "cost_explorer_bill:bill_matches_run_scope",
    "cost_per_1m_output_tokens:headline_has_not_regressed",
    "quality:quality_matches_reference",
    "steady_state_request_log:output_tokens_are_counted",
    "steady_state_request_log:request_timestamps_are_ordered",
    "steady_state_request_log:steady_requests_are_complete",
    "steady_state_request_log:warmup_and_steady_are_separated"])
CHAIN = {"deployed_model": ["provisioned_cluster"], "warmup_log": ["deployed_model"],
         "steady_state_request_log": ["warmup_log"], "cost_explorer_bill": ["steady_state_request_log"],
         "derived_metrics": ["cost_explorer_bill", "steady_state_request_log"],
         "quality": ["steady_state_request_log"],
         "cost_per_1m_output_tokens": ["derived_metrics", "quality"], "provisioned_cluster": [],
         "benchmark_report": ["cost_per_1m_output_tokens"]}
NON_BLOCKING = {"headline_has_not_regressed"}  # the nightly regression check: WARN only


def test_definitions_snapshot(tmp_path):
    defs = build_definitions(Settings(data_dir=tmp_path))
    graph = defs.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == ASSETS
    assert sorted(f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys) == CHECKS
    for key, parents in CHAIN.items():
        node = graph.get(dg.AssetKey(key))
        assert sorted(p.to_user_string() for p in node.parent_keys) == sorted(parents), key
    jobs = sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__"))
    assert jobs == ["benchmark_job", "bill_refresh_job", "peer_import_job", "reaper_job"]
    selected = {j.name: sorted(k.to_user_string() for k in j.asset_layer.selected_asset_keys)
                for j in defs.resolve_all_job_defs()
                if not j.name.startswith("__") and j.name not in ("reaper_job", "peer_import_job")}
    assert selected["benchmark_job"] == ASSETS
    assert selected["bill_refresh_job"] == ["benchmark_report", "cost_explorer_bill",
                                            "cost_per_1m_output_tokens", "derived_metrics"]
    crons = {s.name: (s.cron_schedule, s.job_name) for s in defs.schedules}
    assert crons == {"benchmark_schedule": ("0 2 * * *", "benchmark_job"),
                     "bill_refresh_schedule": ("0 6 * * *", "bill_refresh_job"),
                     "reaper_schedule": ("15 * * * *", "reaper_job")}
    parts = graph.get(dg.AssetKey("derived_metrics")).partitions_def
    assert "p5-scout-bf16-tp8|2026-11-29" in parts.get_partition_keys(
        current_time=dt.datetime(2026, 11, 29, 12))


def test_every_gate_is_blocking_and_the_regression_check_is_not(tmp_path):
    defs = build_definitions(Settings(data_dir=tmp_path))
    seen = set()
    for checks_def in defs.asset_checks:
        for spec in checks_def.check_specs:
            seen.add(spec.name)
            assert spec.blocking == (spec.name not in NON_BLOCKING), spec.name
    assert NON_BLOCKING <= seen


def test_the_workspace_loads_like_the_ui_does(tmp_path, monkeypatch):
    """What `make ui` loads (`dagster definitions validate -w workspace.yaml`), in this
    process: the code location workspace.yaml names, found the way Dagster's workspace finds
    it, resolved and checked (`validate_loadable`), and the repository snapshot the UI is sent
    built from it. A real webserver loads the same file and runs a job from it in
    test_e2e_webserver.py; a `dagster` process here would import Dagster once more to prove
    the same."""
    import yaml
    from dagster._core.definitions.reconstruct import repository_def_from_target_def
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._core.workspace.autodiscovery import loadable_targets_from_python_module

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("SERVINGBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    for key in ("SERVINGBENCH_CANDIDATES", "SERVINGBENCH_PROFILE"):  # the defaults, as `make ui`
        monkeypatch.delenv(key, raising=False)
    (entry,) = yaml.safe_load((repo / "workspace.yaml").read_text())["load_from"]
    module = entry["python_module"]
    assert module["module_name"] == "servingbench.pipelines.definitions"
    (target,) = loadable_targets_from_python_module(
        module["module_name"], str(repo / module["working_directory"]))
    repository = repository_def_from_target_def(target.target_definition)
    repository.validate_loadable()
    snap = RepositorySnap.from_def(repository)
    assert {"benchmark_job", "bill_refresh_job", "peer_import_job", "reaper_job"} <= {
        j.name for j in snap.job_datas}
    assert {s.name for s in snap.schedules} == {"benchmark_schedule", "bill_refresh_schedule",
                                                "reaper_schedule"}


def test_a_bad_profile_or_candidates_file_is_a_clear_error(tmp_path):
    import pytest
    from servingbench.pipelines.config import ConfigError
    with pytest.raises(ConfigError, match="profile 'gke'"):
        build_definitions(Settings(data_dir=tmp_path, profile="gke"))
    bad = tmp_path / "c.yaml"
    bad.write_text("candidates:\n  - {name: x, instance_type: p5.48xlarge, model: m, precison: bf16}\n")
    with pytest.raises(ConfigError, match=r"candidates\[0\]\.precison: unknown key \(did you mean 'precision'\?\)"):
        build_definitions(Settings(data_dir=tmp_path, candidates_file=bad))
