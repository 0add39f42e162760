"""docs/iam-policy.json grants every AWS action the eks path calls, and nothing broad."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r'self\.call\(\s*self\.(\w+),\s*"(\w+)"')
SERVICE = {"eks": "eks", "ec2": "ec2", "ce": "ce", "pricing": "pricing", "sts": "sts"}
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
    assert {"eks:CreateNodegroup", "ce:GetCostAndUsage", "ec2:DescribeInstances"} <= used
    assert used - FREE <= granted, f"missing from the policy: {sorted(used - FREE - granted)}"
