"""Spot interruptions through AWS FIS (resources/cluster/fis.py): the run's experiment
template targets only its own spot instances (by the run's tag) and is deleted however the
run ends, on moto's server; the experiments it starts are read back in FIS's API shape
(botocore's Stubber: moto resolves no tag-selected target); the interruption schedules."""

from __future__ import annotations

import datetime

import pytest
from botocore.stub import Stubber
from servingbench.resources.cluster.eks_api import OWNER_TAG, RUN_TAG
from servingbench.resources.cluster.fis import (
    ACTION,
    FisInterruptions,
    node_of,
    template,
)
from servingbench.resources.contract.deployment import Interruptions

from tests.support.eks.aws import OWNER, REGION

RUN = "20261129T020000Z-p5.48xlarge-scout-bf16-spot"
FIS_ROLE = "arn:aws:iam::123456789012:role/sb-fis"


def test_the_template_targets_one_running_spot_instance_of_the_run():
    t = template(RUN, OWNER, FIS_ROLE)
    (target,) = t["targets"].values()
    assert target == {"resourceType": "aws:ec2:spot-instance",
                      "resourceTags": {RUN_TAG: RUN, OWNER_TAG: OWNER},
                      "filters": [{"path": "State.Name", "values": ["running"]}],
                      "selectionMode": "COUNT(1)"}
    (action,) = t["actions"].values()
    assert action["actionId"] == ACTION == "aws:ec2:send-spot-instance-interruptions"
    assert action["parameters"] == {"durationBeforeInterruption": "PT2M"}
    assert t["tags"] == {RUN_TAG: RUN, OWNER_TAG: OWNER} and t["roleArn"] == FIS_ROLE


def test_create_start_delete_on_moto(moto):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    with fis.template_for(RUN) as template_id:
        got = admin.get_experiment_template(id=template_id)["experimentTemplate"]
        assert got["tags"] == {RUN_TAG: RUN, OWNER_TAG: OWNER}
        assert got["targets"]["RunSpotInstances"]["resourceTags"][RUN_TAG] == RUN
        times = Interruptions.of({"at": [600, 60]}).times(900)
        assert fis.start_due(template_id, RUN, times, elapsed_s=30) == []
        first = fis.start_due(template_id, RUN, times, elapsed_s=61)
        assert len(first) == 1
        assert fis.start_due(template_id, RUN, times, elapsed_s=300) == []  # not twice
        second = fis.start_due(template_id, RUN, times, elapsed_s=900)
        assert len(second) == 1 and second != first
        runs = admin.list_experiments()["experiments"]
        assert {e["experimentTemplateId"] for e in runs} == {template_id} and len(runs) == 2
        assert all(e["tags"] == {RUN_TAG: RUN, OWNER_TAG: OWNER} for e in runs)
    assert admin.list_experiment_templates()["experimentTemplates"] == []
    assert fis.delete(template_id) is False  # already gone: not an error
    assert fis.call.calls["fis:CreateExperimentTemplate"] == 1


def test_the_template_goes_when_the_run_fails(moto):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    with pytest.raises(RuntimeError, match="load failed"), fis.template_for(RUN):
        raise RuntimeError("load failed")
    assert admin.list_experiment_templates()["experimentTemplates"] == []


def test_notices_read_back_in_fis_api_shape(shared_session, aws_env):
    fis = FisInterruptions(shared_session, REGION, role_arn=FIS_ROLE, owner=OWNER)
    fis.experiments.append("EXP1a2b3c4d5e6f7")
    at = datetime.datetime(2026, 11, 29, 2, 31, 30, tzinfo=datetime.UTC)
    with Stubber(fis.fis) as stub:
        stub.add_response("get_experiment", {"experiment": {
            "id": "EXP1a2b3c4d5e6f7", "actions": {"interrupt": {
                "actionId": ACTION, "startTime": at, "state": {"status": "completed"}}}}},
            {"id": "EXP1a2b3c4d5e6f7"})
        stub.add_response("list_experiment_resolved_targets", {"resolvedTargets": [{
            "resourceType": "aws:ec2:spot-instance", "targetName": "RunSpotInstances",
            "targetInformation": {
                "arn": f"arn:aws:ec2:{REGION}:123456789012:instance/i-0abc123def4567890"}}]},
            {"experimentId": "EXP1a2b3c4d5e6f7"})
        notices = fis.notices()
        stub.assert_no_pending_responses()
    assert notices == [("EXP1a2b3c4d5e6f7", "i-0abc123def4567890", at)]
    nodes = [{"metadata": {"name": "ip-10-0-1-5.ec2.internal"},
              "spec": {"providerID": "aws:///us-east-1a/i-0abc123def4567890"}}]
    assert node_of("i-0abc123def4567890", nodes) == "ip-10-0-1-5.ec2.internal"
    assert node_of("i-0000000000000000", nodes) is None


def test_a_rate_gives_the_same_times_for_the_same_seed():
    a = Interruptions.of({"rate_per_hour": 6, "seed": 7})
    times = a.times(3600)
    assert times == Interruptions.of({"rate_per_hour": 6, "seed": 7}).times(3600)
    assert times != Interruptions.of({"rate_per_hour": 6, "seed": 8}).times(3600)
    assert all(0 < t < 3600 for t in times) and times == sorted(times)
    assert 1 <= len(times) <= 20  # 6 expected in the hour
    assert Interruptions.of({"at": [900, 30, 120]}).times(600) == [30.0, 120.0]


@pytest.mark.parametrize("doc, match", [
    ({"at": [30], "rate_per_hour": 2}, "either at .* or rate_per_hour"),
    ({}, "either at .* or rate_per_hour"),
    ({"at": [-5]}, "interruptions.at"),
    ({"rate_per_hour": 0}, r"interruptions.rate_per_hour: expected a finite number in \(0, 3600\]"),
    ({"at": [30], "when": 1}, "unknown key"),
    ([30], "expected a mapping"),
])
def test_bad_interruptions_name_the_key(doc, match):
    with pytest.raises(ValueError, match=match):
        Interruptions.of(doc)


def test_the_reaper_deletes_the_templates_a_killed_run_left(moto):
    """A spot run killed (SIGKILL, an OOM kill) before its `template_for` block deleted its
    experiment template leaves it behind: the reaper deletes it once the run is dead (its node
    group gone and past the TTL, the run not alive), and never another installation's, nor a
    live run's."""
    import time

    from servingbench.resources.cluster.eks_api import EksNodegroups, NodegroupSpec
    from servingbench.resources.cluster.reaper import reap_nodegroups

    from tests.support.eks.aws import ROLE, make_cluster

    endpoint, session = moto
    make_cluster(endpoint, session)
    ours = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    theirs = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner="another-install",
                              endpoint_url=endpoint)
    killed = ours.create("run-killed")       # its run died before deleting it
    running = ours.create("run-running")      # its node group is still up
    foreign = theirs.create("run-theirs")
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER,
                            endpoint_url=endpoint, poll_s=0.05)
    cluster.create_nodegroup(NodegroupSpec(candidate="c", instance_type="p5.48xlarge"),
                             "run-running", timeout_s=10)
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    later = time.time_ns() + 2 * 3600 * 10**9
    gone = reap_nodegroups(cluster, 3600, now_ns=later, fis=ours,
                           alive=lambda run_id: "STARTED" if run_id == "run-running" else None)
    left = {t["id"] for t in admin.list_experiment_templates()["experimentTemplates"]}
    assert left == {running, foreign}
    assert gone == [f"experiment template {killed} (run run-killed)"]
    # a young template (within the TTL) is kept even when its run has no node group
    young = ours.create("run-just-started")
    assert reap_nodegroups(cluster, 3600, fis=ours, alive=lambda r: None) == []
    assert young in {t["id"] for t in admin.list_experiment_templates()["experimentTemplates"]}
