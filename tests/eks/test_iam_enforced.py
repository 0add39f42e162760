"""docs/iam-policy.json is a tested artifact: the eks path's real calls (create a node group
and its launch template, refresh the heartbeat, describe the scope, delete, reap) succeed as
an identity whose only permissions are that policy, on moto's server with IAM enforced
(tests/support/eks/iam.py: resource ARNs, tag conditions, PassRole); and the same identity
cannot take over, delete or tag another installation's node group."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from servingbench.resources.aws.caller import AwsCallError
from servingbench.resources.cluster.eks_api import OWNER_TAG, RUN_TAG, EksNodegroups, NodegroupSpec
from servingbench.resources.cluster.fis import FisInterruptions, template
from servingbench.resources.cluster.reaper import reap_nodegroups

from tests.support.eks import iam
from tests.support.eks.aws import OWNER, REGION, ROLE, make_cluster

ROOT = Path(__file__).resolve().parents[2]
SPEC = NodegroupSpec(candidate="p5-scout-bf16-tp8", instance_type="p5.48xlarge", node_count=1)
RUN = "20261129T020000Z-p5.48xlarge-scout-bf16-7f3a"
THEIRS = "sb-someone-elses-run"


def pipeline_policy() -> dict:
    text = (ROOT / "docs/iam-policy.json").read_text()
    for k, v in {"ACCOUNT_ID": iam.ACCOUNT, "REGION": REGION, "CLUSTER_NAME": "bench",
                 "NODE_ROLE_NAME": "sb-nodes", "FIS_ROLE_NAME": "sb-fis",
                 "OWNER_ID": OWNER}.items():
        text = text.replace(k, v)
    return json.loads(text)


@pytest.fixture
def restricted(moto, monkeypatch):
    """(EksNodegroups as the restricted identity, admin eks client, their node group's arn)."""
    endpoint, session = moto
    eks, _, subnet = make_cluster(endpoint, session)
    theirs = eks.create_nodegroup(
        clusterName="bench", nodegroupName=THEIRS, nodeRole=ROLE, subnets=[subnet],
        tags={OWNER_TAG: "another-team", RUN_TAG: "someone-elses-run"})["nodegroup"]["nodegroupArn"]
    creds = iam.identity(endpoint, "sb-pipeline", pipeline_policy())
    mine = boto3.Session(aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    cluster = EksNodegroups(mine, "bench", REGION, node_role_arn=ROLE, owner=OWNER,
                            endpoint_url=endpoint, poll_s=0.1)
    with iam.enforce(monkeypatch):
        yield cluster, theirs


def test_the_eks_path_runs_under_exactly_the_documented_policy(restricted):
    cluster, _ = restricted
    info = cluster.create_nodegroup(SPEC, RUN, timeout_s=10)
    cluster.beat(info)
    scope = cluster.describe_scope(info)
    assert scope.nodegroup == info.nodegroup
    assert reap_nodegroups(cluster, 3600) == []  # lists and describes, keeps the young group
    assert cluster.delete_nodegroup(info.nodegroup, info.launch_template_id, timeout_s=10)
    assert iam.DENIED == []


def test_another_installations_node_group_cannot_be_taken_over(restricted):
    cluster, theirs = restricted
    # the takeover: put this installation's owner tag on their group, then delete it
    with pytest.raises(AwsCallError, match="eks:TagResource"):
        cluster.call(cluster.eks, "tag_resource", resourceArn=theirs, tags={OWNER_TAG: OWNER})
    with pytest.raises(AwsCallError, match="eks:TagResource"):
        cluster.call(cluster.eks, "tag_resource", resourceArn=theirs,
                     tags={"servingbench:heartbeat": "1"})
    with pytest.raises(AwsCallError, match="eks:DeleteNodegroup"):
        cluster.call(cluster.eks, "delete_nodegroup", clusterName="bench", nodegroupName=THEIRS)
    assert {a for a, _ in iam.DENIED} == {"eks:TagResource", "eks:DeleteNodegroup"}


def test_the_evaluator_sees_the_takeover_the_old_statement_allowed():
    """Without the Null and TagKeys conditions, tagging an owned group with our owner tag
    was allowed: the check above can fail."""
    arn = f"arn:aws:eks:{REGION}:{iam.ACCOUNT}:nodegroup/bench/sb-x/abc"
    ctx = {"aws:TagKeys": [OWNER_TAG], f"aws:RequestTag/{OWNER_TAG}": [OWNER],
           f"aws:ResourceTag/{OWNER_TAG}": ["another-team"]}
    old = {"Statement": [{"Effect": "Allow", "Action": "eks:TagResource",
                          "Resource": f"arn:aws:eks:{REGION}:{iam.ACCOUNT}:nodegroup/bench/sb-*/*",
                          "Condition": {"StringEquals": {f"aws:RequestTag/{OWNER_TAG}": OWNER}}}]}
    assert iam.allowed([old], "eks:TagResource", arn, ctx)
    assert not iam.allowed([pipeline_policy()], "eks:TagResource", arn, ctx)
    extra = ctx | {"aws:TagKeys": [OWNER_TAG, "team"]}
    extra.pop(f"aws:ResourceTag/{OWNER_TAG}")
    assert not iam.allowed([pipeline_policy()], "eks:TagResource", arn, extra)  # keys limited


FIS_ROLE = f"arn:aws:iam::{iam.ACCOUNT}:role/sb-fis"


@pytest.fixture
def restricted_fis(moto, monkeypatch):
    """(FisInterruptions as the restricted identity, an admin FIS client, another
    installation's template id)."""
    endpoint, session = moto
    admin = session.client("fis", region_name=REGION, endpoint_url=endpoint)
    theirs = admin.create_experiment_template(
        **template("someone-elses-run", "another-team", FIS_ROLE))["experimentTemplate"]["id"]
    creds = iam.identity(endpoint, "sb-pipeline", pipeline_policy())
    mine = boto3.Session(aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    fis = FisInterruptions(mine, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    with iam.enforce(monkeypatch):
        yield fis, admin, theirs


def test_the_fis_path_runs_under_exactly_the_documented_policy(restricted_fis):
    fis, _, _ = restricted_fis
    with fis.template_for(RUN) as template_id:
        (experiment,) = fis.start_due(template_id, RUN, [0.0], elapsed_s=1)
        got = fis.call(fis.fis, "get_experiment", id=experiment)["experiment"]
        assert got["experimentTemplateId"] == template_id
    assert iam.DENIED == []


def test_another_installations_template_can_be_neither_started_nor_deleted(restricted_fis):
    fis, _, theirs = restricted_fis
    with pytest.raises(AwsCallError, match="fis:StartExperiment"):
        fis.start(theirs, RUN)
    with pytest.raises(AwsCallError, match="fis:DeleteExperimentTemplate"):
        fis.delete(theirs)
    # nor can a template be made that hands FIS some other role
    other = FisInterruptions(boto3.Session(region_name=REGION), REGION,
                             role_arn=f"arn:aws:iam::{iam.ACCOUNT}:role/admin", owner=OWNER)
    other.fis, other.call = fis.fis, fis.call  # the restricted identity's client
    with pytest.raises(AwsCallError, match="fis:CreateExperimentTemplate"):
        other.create(RUN)
    assert [a for a, _ in iam.DENIED] == ["fis:StartExperiment", "fis:DeleteExperimentTemplate",
                                          "iam:PassRole"]
