"""AWS side of the eks tests: dummy credentials (nothing real can be reached with them) and
an EKS cluster made in moto's server."""

from __future__ import annotations

from resources.aws.caller import make_client

REGION = "us-east-1"
DUMMY_KEY_ID = "AKIASERVINGBENCHTEST"
DUMMY_SECRET = "sbTestSecretKeyDoNotLeak0123456789abcdEFGH"
DUMMY_SESSION_TOKEN = "sbTestSessionTokenDoNotLeakXYZ987"

ROLE = "arn:aws:iam::123456789012:role/sb-nodes"


def make_cluster(endpoint, session):
    """A cluster in moto (its EKS does not check subnet ids; EC2 VPCs are slow to make)."""
    eks = make_client(session, "eks", REGION, endpoint)
    ec2 = make_client(session, "ec2", REGION, endpoint)
    subnet = "subnet-0aaaabbbbccccdddd"
    eks.create_cluster(name="bench", roleArn="arn:aws:iam::123456789012:role/sb-cluster",
                       resourcesVpcConfig={"subnetIds": [subnet]}, version="1.33")
    return eks, ec2, subnet
