"""One way to call AWS: counted, logged, retried with backoff, permission errors fail fast.

botocore's own retries are switched off on every client made by `make_client`, so each
HTTP attempt passes through `call` and is counted (a Cost Explorer request costs $0.01:
a hidden retry is a hidden charge). Throttling and transient errors back off
exponentially with full jitter; AccessDenied raises `PermissionDenied` naming the IAM
action that is missing, at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions
from botocore.config import Config

log = logging.getLogger("servingbench.aws")

THROTTLING = {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "RequestLimitExceeded", "LimitExceededException",
    "ProvisionedThroughputExceededException", "SlowDown", "PriorRequestNotComplete",
    "EC2ThrottledException", "BandwidthLimitExceeded",
}
TRANSIENT = {
    "InternalError", "InternalFailure", "InternalServerError", "InternalServerException",
    "ServiceUnavailable", "ServiceUnavailableException", "ServerException",
    "RequestTimeout", "RequestTimeoutException", "Unavailable",
}
DENIED = {
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException",
    "UnrecognizedClientException", "AuthFailure", "InvalidClientTokenId",
}
# IAM action prefix per botocore service name, where the two differ.
IAM_PREFIX = {"ce": "ce", "pricing": "pricing", "eks": "eks", "ec2": "ec2", "sts": "sts"}


class AwsCallError(RuntimeError):
    """An AWS call failed for good (after retries, or at once for a client error)."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class PermissionDenied(AwsCallError):
    """The credentials lack an IAM permission; `action` names it (e.g. `ce:GetCostAndUsage`)."""

    def __init__(self, action: str, code: str):
        super().__init__(
            f"permission denied: the AWS identity lacks IAM action {action!r} ({code}); "
            f"add it to the policy (see docs/iam-policy.json)",
            code,
        )
        self.action = action


def iam_action(client: Any, operation: str) -> str:
    """`ce` + `get_cost_and_usage` → `ce:GetCostAndUsage`."""
    meta = getattr(client, "meta", None)
    service = meta.service_model.service_name if meta else getattr(client, "service_name", "aws")
    prefix = IAM_PREFIX.get(service, service)
    mapping = meta.method_to_api_mapping if meta else {}
    name = mapping.get(operation) or "".join(p.capitalize() for p in operation.split("_"))
    return f"{prefix}:{name}"


def make_client(session: Any, service: str, region: str, endpoint_url: str | None = None) -> Any:
    """A boto3 client with botocore's retries off (ours count every attempt)."""
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=10, read_timeout=60)
    return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)


@dataclass
class Caller:
    """Calls AWS operations with retries, and counts and logs every attempt.

    `calls` counts attempts per IAM action (throttled ones included: AWS bills them).
    `sleep` and `rng` are injectable so tests neither wait nor flake.
    """

    max_attempts: int = 6
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    calls: Counter = field(default_factory=Counter)
    retries: int = 0

    def __call__(self, client: Any, operation: str, **params: Any) -> Any:
        action = iam_action(client, operation)
        method = getattr(client, operation)
        for attempt in range(1, self.max_attempts + 1):
            self.calls[action] += 1
            log.info("aws call %s attempt %d (total %d)", action, attempt, self.calls[action])
            try:
                return method(**params)
            except botocore.exceptions.ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in DENIED:
                    raise PermissionDenied(action, code) from None
                retryable = code in THROTTLING or code in TRANSIENT or status in (429, 500, 502, 503, 504)
                if not retryable:
                    message = exc.response.get("Error", {}).get("Message", "")
                    raise AwsCallError(f"{action} failed: {code}: {message}", code) from None
                reason = code or f"HTTP {status}"
            except (botocore.exceptions.EndpointConnectionError,
                    botocore.exceptions.ConnectionClosedError,
                    botocore.exceptions.ReadTimeoutError,
                    botocore.exceptions.ConnectTimeoutError) as exc:
                reason = type(exc).__name__
            if attempt == self.max_attempts:
                raise AwsCallError(f"{action} failed after {attempt} attempts: {reason}", reason)
            delay = self.rng.uniform(0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))
            self.retries += 1
            log.warning("aws call %s: %s, retrying in %.2fs", action, reason, delay)
            self.sleep(delay)
        raise AssertionError("unreachable")

    def total(self, action: str | None = None) -> int:
        return self.calls[action] if action else sum(self.calls.values())
