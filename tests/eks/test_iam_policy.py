"""docs/iam-policy.json grants every AWS action the eks path calls, and nothing broad."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parents[2]
# `self.call(self.<client>, "op"` or `self.call(<client>, "op"` (a client made per region)
CALL = re.compile(r'self\.call\(\s*(?:self\.)?(\w+),\s*"(\w+)"')
SERVICE = {"eks": "eks", "ec2": "ec2", "ce": "ce", "pricing": "pricing", "sts": "sts",
           "savingsplans": "savingsplans", "fis": "fis"}
FREE = {"sts:GetCallerIdentity"}  # needs no permission


def called_actions() -> set[str]:
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="x",
                            aws_secret_access_key="x")
    actions = set()
    rooms = ("resources/cluster", "resources/billing", "resources/aws")
    for path in sorted(p for room in rooms for p in (ROOT / room).glob("*.py")):
        for attr, op in CALL.findall(path.read_text()):
            client = session.client(SERVICE[attr], region_name="us-east-1")
            actions.add(f"{attr}:{client.meta.method_to_api_mapping[op]}")
    return actions


def test_policy_grants_every_called_action_and_no_wildcards():
    policy = json.loads((ROOT / "docs/iam-policy.json").read_text())
    granted = set()
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow"
        acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        assert not any("*" in a for a in acts), st["Sid"]
        granted |= set(acts)
    used = called_actions()
    assert {"eks:CreateNodegroup", "ce:GetCostAndUsage", "ec2:DescribeInstances",
            "ec2:DescribeSpotPriceHistory", "ec2:DescribeCapacityBlockOfferings",
            "savingsplans:DescribeSavingsPlansOfferingRates"} <= used
    assert used - FREE <= granted, f"missing from the policy: {sorted(used - FREE - granted)}"
    # the spot interruptions' rights: exactly what resources/cluster/fis.py calls
    fis = {a for a in granted if a.startswith("fis:")} - {"fis:TagResource"}  # asked at creation
    assert fis == {a for a in used if a.startswith("fis:")}, sorted(fis ^ used)


READ = re.compile(r"^(Describe|List|Get)")
CREATE = re.compile(r"^(Create|Run|Put|Import|Allocate|Request)")
CHANGE = re.compile(r"^(Delete|Update|Modify|Terminate|Stop|Start|Reboot|Attach|Detach"
                    r"|Associate|Disassociate|Replace|Revoke|Authorize|Release|Untag)")
OWNER_KEY = "servingbench:owner"
# Actions whose own condition scopes them, not a tag: passing the node role only to EKS.
SCOPED_OTHERWISE = {"iam:PassRole": "iam:PassedToService"}
# A change whose call also makes a resource: on the resource it makes (no tag yet) it is
# scoped by the tags the request gives it, as a creation is.
MAKES = {"fis:StartExperiment": ":experiment/"}


def conditions(statement) -> dict[str, object]:
    """condition key → value, across operators (StringEquals, Null, ForAllValues:…)."""
    out: dict[str, object] = {}
    for block in statement.get("Condition", {}).values():
        out.update(block)
    return out


def owner_condition(statement, kind: str) -> bool:
    """`aws:{kind}/servingbench:owner` pinned with StringEquals to the installation id."""
    key = f"aws:{kind}/{OWNER_KEY}"
    return statement.get("Condition", {}).get("StringEquals", {}).get(key) == "OWNER_ID"


def mutating_problems(policy: dict) -> list[str]:
    problems = []
    for st in policy["Statement"]:
        acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        cond = conditions(st)
        for action in acts:
            verb = action.split(":", 1)[1]
            if READ.match(verb):
                continue
            if action in SCOPED_OTHERWISE:
                if SCOPED_OTHERWISE[action] not in cond:
                    problems.append(f"{st['Sid']}: {action} without {SCOPED_OTHERWISE[action]}")
                continue
            if st["Resource"] == "*" or st["Resource"] == ["*"]:
                problems.append(f"{st['Sid']}: {action} on every resource")
            if action == "ec2:CreateTags":
                if "ec2:CreateAction" not in cond:
                    problems.append(f"{st['Sid']}: ec2:CreateTags without ec2:CreateAction")
                if not owner_condition(st, "RequestTag"):
                    problems.append(f"{st['Sid']}: ec2:CreateTags without the owner RequestTag")
            elif verb.startswith("Tag"):
                if not (owner_condition(st, "RequestTag") or owner_condition(st, "ResourceTag")):
                    problems.append(f"{st['Sid']}: {action} without an owner tag condition")
            elif CREATE.match(verb):
                if not owner_condition(st, "RequestTag"):
                    problems.append(f"{st['Sid']}: {action} without aws:RequestTag/{OWNER_KEY}")
            elif action in MAKES and all(MAKES[action] in r for r in _list(st["Resource"])):
                if not owner_condition(st, "RequestTag"):
                    problems.append(f"{st['Sid']}: {action} without aws:RequestTag/{OWNER_KEY}")
            elif CHANGE.match(verb):
                if not owner_condition(st, "ResourceTag"):
                    problems.append(f"{st['Sid']}: {action} without aws:ResourceTag/{OWNER_KEY}")
            else:
                problems.append(f"{st['Sid']}: {action} is not classified; decide its condition")
    return problems


def _list(v) -> list:
    return v if isinstance(v, list) else [v]


def test_the_fis_role_can_only_interrupt_this_installations_instances():
    """The experiment's own role (docs/policies/fis-role.json): the one action FIS needs,
    on instances with this installation's owner tag; trusted by FIS of this account only."""
    role = json.loads((ROOT / "docs/policies/fis-role.json").read_text())
    acts = {a for st in role["Statement"] for a in _list(st["Action"])}
    assert acts == {"ec2:SendSpotInstanceInterruptions", "ec2:DescribeInstances"}
    send = [st for st in role["Statement"] if st["Action"] == "ec2:SendSpotInstanceInterruptions"]
    assert [st["Condition"]["StringEquals"] for st in send] == [
        {f"ec2:ResourceTag/{OWNER_KEY}": "OWNER_ID"}]
    trust = json.loads((ROOT / "docs/policies/fis-trust.json").read_text())["Statement"]
    assert [st["Principal"] for st in trust] == [{"Service": "fis.amazonaws.com"}]
    assert trust[0]["Condition"]["StringEquals"] == {"aws:SourceAccount": "ACCOUNT_ID"}
    policy = json.loads((ROOT / "docs/iam-policy.json").read_text())
    passes = [st for st in policy["Statement"] if st["Action"] == "iam:PassRole"
              and "FIS_ROLE_NAME" in st["Resource"]]
    assert [conditions(st)["iam:PassedToService"] for st in passes] == ["fis.amazonaws.com"]


def test_every_mutating_action_requires_the_owner_tag():
    policy = json.loads((ROOT / "docs/iam-policy.json").read_text())
    assert mutating_problems(policy) == []


def test_heartbeat_tagging_is_limited_to_the_heartbeat_key():
    policy = json.loads((ROOT / "docs/iam-policy.json").read_text())
    refresh = [st for st in policy["Statement"] if st["Action"] == "eks:TagResource"
               and owner_condition(st, "ResourceTag")]
    assert refresh and all(conditions(st)["aws:TagKeys"] == ["servingbench:heartbeat"]
                           for st in refresh)


def test_the_check_catches_an_unconditioned_mutation():
    """The rule itself can fail: the old policy's weaknesses are each reported."""
    weak = {"Statement": [
        {"Sid": "A", "Effect": "Allow", "Action": ["eks:CreateNodegroup", "eks:DeleteNodegroup"],
         "Resource": "arn:aws:eks:R:A:nodegroup/C/sb-*/*"},
        {"Sid": "B", "Effect": "Allow", "Action": ["ec2:CreateLaunchTemplate", "ec2:CreateTags"],
         "Resource": "arn:aws:ec2:R:A:launch-template/*",
         "Condition": {"StringLike": {"aws:RequestTag/servingbench:run-id": "*"}}},
        {"Sid": "C", "Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "*"},
        {"Sid": "D", "Effect": "Allow", "Action": "fis:StartExperiment",
         "Resource": "arn:aws:fis:R:A:experiment/*"},
        {"Sid": "E", "Effect": "Allow", "Action": "fis:StartExperiment",
         "Resource": "arn:aws:fis:R:A:experiment-template/*",
         "Condition": {"StringEquals": {f"aws:RequestTag/{OWNER_KEY}": "OWNER_ID"}}},
    ]}
    problems = mutating_problems(weak)
    assert any("A: eks:CreateNodegroup without aws:RequestTag" in p for p in problems)
    assert any("A: eks:DeleteNodegroup without aws:ResourceTag" in p for p in problems)
    assert any("B: ec2:CreateTags without ec2:CreateAction" in p for p in problems)
    assert any("B: ec2:CreateLaunchTemplate without aws:RequestTag" in p for p in problems)
    assert any("C: ec2:TerminateInstances on every resource" in p for p in problems)
    assert any("D: fis:StartExperiment without aws:RequestTag" in p for p in problems)
    assert any("E: fis:StartExperiment without aws:ResourceTag" in p for p in problems)


def test_no_read_action_is_granted_that_the_code_never_calls():
    """Reads are granted on `*`, so each one is a right to see the whole account's
    resources of its kind: only those the eks path calls. EKS's own checks of a node
    group's launch template and subnets run under its service-linked role
    (AWSServiceRoleForAmazonEKSNodegroup), not the caller's identity."""
    policy = json.loads((ROOT / "docs/iam-policy.json").read_text())
    granted = {a for st in policy["Statement"]
               for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    reads = {a for a in granted if READ.match(a.split(":", 1)[1])}
    unused = reads - called_actions()
    assert not unused, f"granted, never called: {sorted(unused)}"
