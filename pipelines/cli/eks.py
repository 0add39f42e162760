"""`servingbench eks …`: operator commands for the eks profile.

    servingbench eks reap --cluster bench --region us-east-1 --ttl-hours 6 --node-role ARN
    servingbench eks bill <run_dir>        (re)fetch a run's Cost Explorer bill

Credentials come from the usual boto3 chain (environment, profile, SSO, instance role);
none is ever printed. Exit status: 0 done, 2 bad input or AWS refused (message, no traceback).
"""

from __future__ import annotations

import argparse
import logging
import sys

from botocore.exceptions import BotoCoreError

from resources.aws.caller import AwsCallError
from resources.contract.manifest import ManifestError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench eks")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reap", help="delete servingbench node groups older than a TTL")
    r.add_argument("--cluster", required=True)
    r.add_argument("--region", required=True)
    r.add_argument("--ttl-hours", type=float, default=6.0)
    r.add_argument("--endpoint-url", help=argparse.SUPPRESS)  # tests: moto
    b = sub.add_parser("bill", help="(re)fetch a run folder's Cost Explorer bill")
    b.add_argument("run_dir")
    b.add_argument("--endpoint-url", help=argparse.SUPPRESS)
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import boto3

    session = boto3.Session()
    try:
        if args.cmd == "reap":
            from resources.cluster.eks_api import EksCluster

            cluster = EksCluster(session, args.cluster, args.region, node_role_arn="",
                                 endpoint_url=args.endpoint_url)
            reaped = cluster.reap(args.ttl_hours * 3600)
            print(f"reaped {len(reaped)} node group(s)" + "".join(f"\n  {n}" for n in reaped))
        else:
            from resources.billing.cost_explorer import CostExplorerApi
            from resources.billing.refresh import RefreshError, refresh_bill

            try:
                report = refresh_bill(args.run_dir, CostExplorerApi(
                    session, endpoint_url=args.endpoint_url))
            except RefreshError as exc:
                print(f"servingbench eks bill: {exc}", file=sys.stderr)
                return 2
            print(f"bill written: {report.granularity}, {report.pages} page(s), "
                  f"{report.api_calls} Cost Explorer request(s) = ${report.cost_usd:.2f}"
                  + (f"\nnote: {report.note}" if report.note else ""))
    except (AwsCallError, ManifestError, ValueError, BotoCoreError) as exc:
        print(f"servingbench eks {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0
