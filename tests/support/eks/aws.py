"""AWS side of the eks tests: dummy credentials (nothing real can be reached with them) and
an EKS cluster made in moto's server."""

from __future__ import annotations

from collections.abc import Iterator

from moto.server import ThreadedMotoServer
from servingbench.resources.aws.caller import make_client

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

OWNER = "sb-test-install"  # this installation's id in the tests


def teach_moto_nodegroup_tags(monkeypatch) -> None:
    """moto's EKS TagResource tags clusters only (its own docstring says so); real EKS tags
    node groups too, and the heartbeat relies on it. moto's server runs in this process, so
    its backend learns node groups here; everything else stays moto's own."""
    from moto.eks.models import EKSBackend

    original = EKSBackend.tag_resource

    def tag_resource(self, resource_arn: str, tags: dict[str, str]) -> None:
        for cluster in self.clusters.values():
            for ng in cluster.nodegroups.values():
                if ng.arn == resource_arn:
                    ng.tags.update(tags)
                    return
        original(self, resource_arn, tags)

    monkeypatch.setattr(EKSBackend, "tag_resource", tag_resource)


def _one_partition_lookup() -> None:
    """moto's EKS checks every role ARN's partition against a boto3 Session it makes for
    that one call (`Session().get_available_partitions()`), which parses botocore's
    endpoint files again each time: ~40 ms of CPU per cluster or node group created, a few
    CPU-seconds of a suite run. The session made at the first call answers every later one
    alike (the partitions are botocore's bundled data); the check itself stays moto's."""
    import functools

    import moto.eks.utils

    if not hasattr(moto.eks.utils.Session, "cache_info"):
        moto.eks.utils.Session = functools.cache(moto.eks.utils.Session)


def run_moto_server() -> Iterator[str]:
    """moto's real server on a free loopback port, for a fixture to yield from."""
    _one_partition_lookup()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def reset_moto(moto_url: str) -> None:
    """Empty moto's server of every backend's state (buckets, clusters, roles)."""
    import httpx
    from servingbench.resources.http.control import tls

    # a reset can take seconds on a loaded machine (httpx waits 5 s by default)
    httpx.post(f"{moto_url}/moto-api/reset", timeout=60, verify=tls()).raise_for_status()


def fresh_s3_bucket(moto_url: str, monkeypatch, bucket: str = "sb-runs") -> str:
    """A fresh bucket on moto's server, with AWS_ENDPOINT_URL pointing every client at it
    and dummy credentials only (no profile or file of the machine is read)."""
    import boto3

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    env = {"AWS_ACCESS_KEY_ID": DUMMY_KEY_ID, "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
           "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_ENDPOINT_URL": moto_url,
           "AWS_CONFIG_FILE": "/nonexistent/servingbench-test-config",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/servingbench-test-creds"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reset_moto(moto_url)
    boto3.client("s3", endpoint_url=moto_url, region_name=REGION, aws_access_key_id=DUMMY_KEY_ID,
                 aws_secret_access_key=DUMMY_SECRET).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/prefix"
