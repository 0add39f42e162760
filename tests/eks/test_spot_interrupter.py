"""A spot run's interruptions on EKS (resources/model_server/kube/spot.py): the run's FIS
template lives as long as the deployment and goes however the run ends (moto's FIS), one
experiment starts at each scheduled time counted from the steady phase's start in the
manifest (never before it, never twice), each notice FIS reports is recorded for its
instance (FIS's API shape through botocore's Stubber: moto resolves no tag-selected
target), a failed start fails the run, and a candidate with interruptions but no FIS role
is refused."""

from __future__ import annotations

import datetime

import pytest
from botocore.stub import Stubber
from servingbench.resources.cluster.fis import ACTION, FisInterruptions
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import plan_of
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.model_server.kube.server import KubeModelServer
from servingbench.resources.model_server.kube.spot import SpotInterrupter

from tests.support.eks.aws import OWNER, REGION

RUN = "20261129T020000Z-p5.48xlarge-scout-bf16-spot"
FIS_ROLE = "arn:aws:iam::123456789012:role/sb-fis"
T0 = mf.parse_ts("2026-11-29T02:00:00Z")


class Clock:
    def __init__(self) -> None:
        self.now = T0 - 10**9

    def __call__(self) -> int:
        return self.now


def steady_at(tmp_path, started: int | None) -> None:
    m = mf.empty(RUN, "measured", T0 - 60 * 10**9)
    if started is not None:
        m["phases"]["steady"] = {"started_at": mf.format_ts(started), "ended_at": None}
    mf.dump(m, tmp_path / "manifest.json")


def test_experiments_start_at_the_scheduled_times_and_the_template_goes(moto, tmp_path):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    clock = Clock()
    steady_at(tmp_path, None)
    schedule = SpotInterrupter(fis, RUN, tmp_path, [60.0, 600.0], poll_s=3600, clock=clock)
    with schedule.running():
        (template,) = admin.list_experiment_templates()["experimentTemplates"]
        clock.now = T0 + 100 * 10**9
        assert schedule.tick() == []           # no steady phase yet: nothing counts
        steady_at(tmp_path, T0)
        first = schedule.tick()                # 100 s into steady: the 60 s one
        assert len(first) == 1
        assert schedule.tick() == []           # not twice
        clock.now = T0 + 601 * 10**9
        second = schedule.tick()
        assert len(second) == 1 and second != first
        runs = admin.list_experiments()["experiments"]
        assert {e["experimentTemplateId"] for e in runs} == {template["id"]} and len(runs) == 2
    assert admin.list_experiment_templates()["experimentTemplates"] == []
    assert schedule.errors == []


def test_the_template_goes_when_the_run_fails(moto, tmp_path):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    steady_at(tmp_path, T0)
    schedule = SpotInterrupter(fis, RUN, tmp_path, [0.0], poll_s=3600, clock=Clock())
    with pytest.raises(RuntimeError, match="load failed"), schedule.running():
        raise RuntimeError("load failed")
    assert admin.list_experiment_templates()["experimentTemplates"] == []


def test_a_start_that_fails_is_kept_as_an_error(moto, tmp_path):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    steady_at(tmp_path, T0)
    clock = Clock()
    clock.now = T0 + 5 * 10**9
    schedule = SpotInterrupter(fis, RUN, tmp_path, [1.0], poll_s=3600, clock=clock)
    with schedule.running():
        fis.delete(schedule.template_id)       # the template is gone: the start fails
        assert schedule.tick() == []
    assert len(schedule.errors) == 1 and "starting a FIS experiment" in schedule.errors[0]


def test_a_time_never_started_inside_the_steady_phase_is_an_error(moto, tmp_path):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    steady_at(tmp_path, None)  # its start unknown while it ran (load pods)
    schedule = SpotInterrupter(fis, RUN, tmp_path, [10.0, 900.0], poll_s=3600, clock=Clock())
    with schedule.running():
        schedule.tick()
        m = mf.load(tmp_path / "manifest.json")  # written at the load's end
        m["phases"]["steady"] = {"started_at": mf.format_ts(T0),
                                 "ended_at": mf.format_ts(T0 + 300 * 10**9)}
        mf.dump(m, tmp_path / "manifest.json")
    # the 10 s one was due in the 300 s phase, the 900 s one was not
    assert schedule.errors == ["1 of 1 interruptions due in the steady phase never started "
                               "(was its start known while it ran? load pods write it at "
                               "their end)"]


def test_each_notice_is_recorded_once_for_its_instance(shared_session, aws_env, tmp_path):
    fis = FisInterruptions(shared_session, REGION, role_arn=FIS_ROLE, owner=OWNER)
    fis.experiments.append("EXP1a2b3c4d5e6f7")
    got = []
    schedule = SpotInterrupter(fis, RUN, tmp_path, [0.0], notice=lambda i, at: got.append((i, at)))
    at = datetime.datetime(2026, 11, 29, 2, 31, 30, 250000, tzinfo=datetime.UTC)
    with Stubber(fis.fis) as stub:
        stub.add_response("get_experiment", {"experiment": {
            "id": "EXP1a2b3c4d5e6f7", "actions": {"interrupt": {
                "actionId": ACTION, "startTime": at, "state": {"status": "running"}}}}},
            {"id": "EXP1a2b3c4d5e6f7"})
        stub.add_response("list_experiment_resolved_targets", {"resolvedTargets": [{
            "resourceType": "aws:ec2:spot-instance", "targetName": "RunSpotInstances",
            "targetInformation": {
                "arn": f"arn:aws:ec2:{REGION}:123456789012:instance/i-0abc123def4567890"}}]},
            {"experimentId": "EXP1a2b3c4d5e6f7"})
        schedule.record()
        schedule.record()                      # recorded: FIS is not asked again
        stub.assert_no_pending_responses()
    assert got == [("i-0abc123def4567890", mf.parse_ts("2026-11-29T02:31:30.25Z"))]


def test_interruptions_without_the_fis_role_are_refused(tmp_path):
    cand = Candidate(name="spot", instance_type="p5.48xlarge", model="meta-llama/Llama-4-Scout",
                     precision="bf16", tensor_parallel=8, image_digest="repo@sha256:" + "0" * 64,
                     capacity="spot", deployment=plan_of({
                         "capacity": "spot", "interruptions": {"at": [60.0], "notice_s": 120.0}}))
    server = KubeModelServer(lambda: pytest.fail("no cluster is touched"), expose="cluster_ip")
    info = ClusterInfo(facts={"nodegroup": "ng"}, phases={})
    assert server.refuses(cand).startswith("interruptions: need the FIS role")
    with pytest.raises(ValueError, match="interruptions: need the FIS role "
                                         r"\(SERVINGBENCH_EKS_FIS_ROLE_ARN"), \
            server.deploy(cand, info, tmp_path / RUN):
        pass
