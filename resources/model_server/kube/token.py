"""An EKS bearer token: an STS `GetCallerIdentity` URL presigned with SigV4, the cluster
name bound in the signed header `x-k8s-aws-id` (what `aws eks get-token` and
aws-iam-authenticator do; no aws CLI, no kubeconfig). Valid 15 minutes at most on
EKS's side; we sign for 60 s of URL validity and refresh every few minutes.

The token is a credential: it is never logged, and `Token.__repr__` hides it.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.signers import RequestSigner

PREFIX = "k8s-aws-v1."
CLUSTER_HEADER = "x-k8s-aws-id"
URL_EXPIRES_S = 60
REFRESH_S = 600  # EKS accepts a token for 15 min; renew well before


def sts_endpoint(region: str) -> str:
    return f"https://sts.{region}.amazonaws.com"


def presigned_token(session: Any, cluster_name: str, region: str,
                    sts_url: str | None = None) -> str:
    """`k8s-aws-v1.` + base64url(presigned GetCallerIdentity URL), padding stripped."""
    client = session.client("sts", region_name=region, endpoint_url=sts_url)
    signer = RequestSigner(client.meta.service_model.service_id, region, "sts", "v4",
                           session.get_credentials(), session.events)
    base = (sts_url or sts_endpoint(region)).rstrip("/")
    url = signer.generate_presigned_url(
        {"method": "GET", "url": f"{base}/?Action=GetCallerIdentity&Version=2011-06-15",
         "body": {}, "headers": {CLUSTER_HEADER: cluster_name}, "context": {}},
        region_name=region, expires_in=URL_EXPIRES_S, operation_name="")
    return PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


@dataclass
class TokenSource:
    """Hands out a cached EKS token, renewed every `refresh_s` seconds."""

    make: Callable[[], str]
    refresh_s: float = REFRESH_S
    clock: Callable[[], float] = time.monotonic
    _token: str | None = field(default=None, repr=False)
    _at: float = field(default=0.0, repr=False)

    @classmethod
    def for_eks(cls, session: Any, cluster_name: str, region: str,
                sts_url: str | None = None) -> TokenSource:
        return cls(lambda: presigned_token(session, cluster_name, region, sts_url))

    def __call__(self) -> str:
        now = self.clock()
        if self._token is None or now - self._at >= self.refresh_s:
            self._token, self._at = self.make(), now
        return self._token

    def __repr__(self) -> str:
        return "TokenSource(<redacted>)"
