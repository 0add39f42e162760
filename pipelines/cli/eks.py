"""`servingbench eks …`: operator commands for the eks profile.

    servingbench eks reap --cluster bench --region us-east-1 --ttl-hours 6 [--owner ID]
                          [--namespace servingbench] [--no-kubernetes]
    servingbench eks bill <run_dir>        (re)fetch a run's Cost Explorer bill

Credentials come from the usual boto3 chain (environment, profile, SSO, instance role);
none is ever printed. Exit status: 0 done, 2 bad input or AWS refused (message, no traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from botocore.exceptions import BotoCoreError
from servingbench.pipelines.cli.argtypes import non_negative
from servingbench.resources.aws.caller import AwsCallError
from servingbench.resources.contract.manifest import ManifestError
from servingbench.resources.model_server.kube.client import KubeError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench eks")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reap", help="delete this installation's node groups older than a TTL "
                       "whose run is no longer alive")
    r.add_argument("--cluster", required=True)
    r.add_argument("--region", required=True)
    r.add_argument("--ttl-hours", type=non_negative, default=6.0)
    r.add_argument("--owner", default=None,
                   help="this installation's id (default: SERVINGBENCH_EKS_OWNER)")
    r.add_argument("--heartbeat-stale-minutes", type=non_negative, default=15.0,
                   help="a node group whose heartbeat is younger than this is a live run: kept")
    r.add_argument("--namespace", default="servingbench",
                   help="where the runs' Kubernetes objects live (default servingbench)")
    r.add_argument("--no-kubernetes", action="store_true",
                   help="node groups and launch templates only (no cluster access needed)")
    r.add_argument("--endpoint-url", help=argparse.SUPPRESS)  # tests: moto
    r.add_argument("--kube-url", help=argparse.SUPPRESS)  # tests: the fake Kubernetes API
    b = sub.add_parser("bill", help="(re)fetch a run folder's Cost Explorer bill")
    b.add_argument("run_dir")
    b.add_argument("--endpoint-url", help=argparse.SUPPRESS)
    return p


def _alive():
    """The Dagster run status, where this host has a Dagster instance (DAGSTER_HOME)."""
    if not os.environ.get("DAGSTER_HOME"):
        return None
    import dagster as dg
    from servingbench.pipelines.liveness import dagster_alive

    return dagster_alive(dg.DagsterInstance.get())


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import boto3

    session = boto3.Session()
    try:
        if args.cmd == "reap":
            from servingbench.pipelines.eks_profile import EksResources, EksSettings, owner_from_env
            from servingbench.resources.cluster.eks_api import check_owner

            owner = (check_owner(args.owner, "--owner") if args.owner
                     else owner_from_env(os.environ))
            # the eks profile's own wiring: the reaper a schedule runs, from these flags
            eks = EksResources.build(EksSettings(
                cluster_name=args.cluster, region=args.region, node_role_arn="", owner=owner,
                namespace=args.namespace, endpoint_url=args.endpoint_url,
                kube_url=args.kube_url), session)
            reaper = eks.reaper(args.ttl_hours, kubernetes=not args.no_kubernetes,
                                heartbeat_stale_s=args.heartbeat_stale_minutes * 60)
            reaped = reaper.reap(alive=_alive())
            print(f"reaped {len(reaped)} resource(s)" + "".join(f"\n  {n}" for n in reaped))
        else:
            from servingbench.resources.billing.cost_explorer import CostExplorerApi
            from servingbench.resources.billing.refresh import RefreshError, refresh_bill

            try:
                report = refresh_bill(args.run_dir, CostExplorerApi(
                    session, endpoint_url=args.endpoint_url))
            except RefreshError as exc:
                print(f"servingbench eks bill: {exc}", file=sys.stderr)
                return 2
            print(f"bill written: {report.granularity}, {report.pages} page(s), "
                  f"{report.api_calls} Cost Explorer request(s) = ${report.cost_usd:.2f}"
                  + (f"\nnote: {report.note}" if report.note else ""))
    except (AwsCallError, ManifestError, ValueError, BotoCoreError, KubeError) as exc:
        print(f"servingbench eks {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0
