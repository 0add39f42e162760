"""IAM enforcement on moto's server, close enough to AWS's to prove a policy.

moto's server can authenticate every request (`INITIAL_NO_AUTH_ACTION_COUNT`, its
`/moto-api/reset-auth`) and check the caller's policies, but its check matches only the
action (and, for S3, the bucket/key ARN): it treats every other resource as `*` and
ignores the condition operators the project's policies rely on. moto's server runs in the
test process, so `enforce()` replaces that one check with `allowed()` below, which

- matches resource ARNs (EKS clusters and node groups, EC2 launch templates, FIS templates
  and experiments, S3 objects);
- evaluates StringEquals, StringLike, Null, ArnLike and ForAllValues:StringEquals against the
  request's context: `aws:RequestTag/*`, `aws:TagKeys`, `aws:ResourceTag/*` (the tags the
  resource carries in moto's backend), `s3:prefix`, `iam:PassedToService`,
  `ec2:CreateAction`;
- asks what AWS asks besides the call's own action: `iam:PassRole` for a node group's
  role, `eks:TagResource` / `ec2:CreateTags` for tags given at creation, `s3:ListBucket`
  (without a prefix) for HeadBucket, `s3:GetObject` on the source of a CopyObject.

An operator or condition key it does not know denies: a policy this cannot evaluate fails
its test rather than passing it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from collections.abc import Iterator
from urllib.parse import parse_qs, unquote, urlsplit

ACCOUNT = "123456789012"


def _list(v) -> list:
    return v if isinstance(v, list) else [v]


def _like(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _condition(op: str, key: str, want, ctx: dict[str, list[str]]) -> bool:
    have = ctx.get(key)
    wants = [str(w) for w in _list(want)]
    if op == "Null":
        return (have is None) == (wants[0].lower() == "true")
    if op.startswith("ForAllValues:"):
        inner = op.split(":", 1)[1]
        return all(_condition(inner, key, want, {key: [v]}) for v in (have or []))
    if op not in ("StringEquals", "StringLike", "ArnLike", "ArnEquals"):
        raise KeyError(f"condition operator {op!r} is not evaluated here")
    if have is None:
        return False
    match = (lambda w, v: w == v) if op in ("StringEquals", "ArnEquals") else _like
    return any(match(w, v) for v in have for w in wants)


def _statement_allows(st: dict, action: str, resource: str, ctx: dict) -> bool | None:
    """True: allows; False: denies explicitly; None: says nothing about this request."""
    if not any(_like(a, action) for a in _list(st.get("Action", []))):
        return None
    if not any(_like(r, resource) for r in _list(st.get("Resource", "*"))):
        return None
    for op, block in (st.get("Condition") or {}).items():
        for key, want in block.items():
            if not _condition(op, key, want, ctx):
                return None
    return st["Effect"] == "Allow" or False


def allowed(policies: list[dict], action: str, resource: str, ctx: dict) -> bool:
    verdicts = [_statement_allows(st, action, resource, ctx)
                for p in policies for st in _list(p["Statement"])]
    return False not in verdicts and True in verdicts


# --- the request's context -----------------------------------------------------------------
def _tags_ctx(request_tags: dict | None, resource_tags: dict | None) -> dict[str, list[str]]:
    ctx: dict[str, list[str]] = {}
    if request_tags is not None:
        ctx["aws:TagKeys"] = list(request_tags)
        ctx.update({f"aws:RequestTag/{k}": [v] for k, v in request_tags.items()})
    for k, v in (resource_tags or {}).items():
        ctx[f"aws:ResourceTag/{k}"] = [v]
    return ctx


def _eks_checks(req, region: str) -> list[tuple[str, str, dict]]:
    from moto.eks.models import eks_backends

    backend = eks_backends[req.account_id][region]
    path = urlsplit(req._path).path
    parts = [unquote(p) for p in path.strip("/").split("/")]
    method, action = req._method, req._action
    arn = f"arn:aws:eks:{region}:{req.account_id}"
    body = json.loads(req._body or b"{}") if req._body else {}

    def nodegroup(cluster: str, name: str):
        c = backend.clusters.get(cluster)
        return c.nodegroups.get(name) if c else None

    if parts[0] == "tags":
        target = unquote("/".join(parts[1:]))
        tags = None
        for c in backend.clusters.values():
            if c.arn == target:
                tags = c.tags
            for ng in c.nodegroups.values():
                if ng.arn == target:
                    tags = ng.tags
        request_tags = body.get("tags") if method == "POST" else None
        return [(action, target, _tags_ctx(request_tags, tags))]
    if parts[0] == "clusters" and len(parts) == 1:
        return [(action, f"{arn}:cluster/{body.get('name', '*')}", {})]
    cluster_arn = f"{arn}:cluster/{parts[1]}"
    if len(parts) == 2:
        return [(action, cluster_arn, {})]
    if parts[2] == "node-groups" and len(parts) == 3:
        if method == "GET":
            return [(action, cluster_arn, {})]
        name, tags = body.get("nodegroupName", ""), body.get("tags") or {}
        ng_arn = f"{arn}:nodegroup/{parts[1]}/{name}/00000000-0000-0000-0000-000000000000"
        ctx = _tags_ctx(tags, None)
        checks = [(action, cluster_arn, ctx), (action, ng_arn, ctx)]
        if tags:  # tags given at creation are authorized as a TagResource too
            checks.append(("eks:TagResource", ng_arn, ctx))
        if body.get("nodeRole"):
            checks.append(("iam:PassRole", body["nodeRole"],
                           {"iam:PassedToService": ["eks.amazonaws.com"]}))
        return checks
    ng = nodegroup(parts[1], parts[3])
    ng_arn = ng.arn if ng else f"{arn}:nodegroup/{parts[1]}/{parts[3]}/missing"
    return [(action, ng_arn, _tags_ctx(None, ng.tags if ng else {}))]


def _ec2_tag_specs(params: dict[str, list[str]]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for k, v in params.items():
        if k.startswith("TagSpecification.") and k.endswith(".Key"):
            tags[v[0]] = params.get(k[:-4] + ".Value", [""])[0]
    return tags


def _ec2_checks(req, region: str) -> list[tuple[str, str, dict]]:
    from moto.ec2.models import ec2_backends

    params = parse_qs((req._body or b"").decode(), keep_blank_values=True)
    params |= parse_qs(urlsplit(req._path).query, keep_blank_values=True)
    params |= {k: [str(x) for x in _list(v)] for k, v in (req._data or {}).items()}
    action = req._action
    lt_arn = f"arn:aws:ec2:{region}:{req.account_id}:launch-template"
    if action == "ec2:CreateLaunchTemplate":
        tags = _ec2_tag_specs(params)
        ctx = _tags_ctx(tags, None)
        checks = [(action, f"{lt_arn}/*", ctx)]
        if tags:
            checks.append(("ec2:CreateTags", f"{lt_arn}/*",
                           ctx | {"ec2:CreateAction": ["CreateLaunchTemplate"]}))
        return checks
    if action == "ec2:DeleteLaunchTemplate":
        backend = ec2_backends[req.account_id][region]
        lt_id = params.get("LaunchTemplateId", [""])[0]
        lt = backend.launch_templates.get(lt_id)
        tags = {t["key"]: t["value"] for t in lt.get_tags()} if lt else {}
        return [(action, f"{lt_arn}/{lt_id}", _tags_ctx(None, tags))]
    if action == "ec2:CreateTags":
        tags = {}
        for k, v in params.items():
            if k.startswith("Tag.") and k.endswith(".Key"):
                tags[v[0]] = params.get(k[:-4] + ".Value", [""])[0]
        return [(action, "*", _tags_ctx(tags, None))]
    return [(action, "*", {})]


def _s3_checks(req, resource: str) -> list[tuple[str, str, dict]]:
    action = req._action
    query = parse_qs(urlsplit(req._path).query, keep_blank_values=True)
    if action == "s3:HeadBucket":  # AWS authorizes HeadBucket as ListBucket, with no prefix
        return [("s3:ListBucket", resource, {})]
    if action == "s3:ListBucket":
        ctx = {"s3:prefix": query["prefix"]} if "prefix" in query else {}
        return [(action, resource, ctx)]
    checks = [(action, resource, {})]
    source = {k.lower(): v for k, v in req._headers.items()}.get("x-amz-copy-source")
    if source:
        checks.append(("s3:GetObject", f"arn:aws:s3:::{unquote(source.lstrip('/'))}", {}))
    return checks


def _fis_checks(req, region: str) -> list[tuple[str, str, dict]]:
    """FIS: a template's or experiment's ARN and tags (moto's backend); creating one is also
    authorized on the action it names and, with tags, as fis:TagResource; starting one also
    on the experiment it makes; the role it passes as iam:PassRole to FIS."""
    from moto.fis.models import fis_backends

    backend = fis_backends[req.account_id][region]
    parts = [unquote(p) for p in urlsplit(req._path).path.strip("/").split("/")]
    action = req._action
    body = json.loads(req._body or b"{}") if req._body else {}
    arn = f"arn:aws:fis:{region}:{req.account_id}"
    request_tags = body.get("tags") or None
    if action == "fis:CreateExperimentTemplate":
        ctx = _tags_ctx(request_tags, None)
        checks = [(action, f"{arn}:experiment-template/*", ctx)]
        checks += [(action, f"{arn}:action/{a['actionId']}", ctx)
                   for a in (body.get("actions") or {}).values()]
        if request_tags:
            checks.append(("fis:TagResource", f"{arn}:experiment-template/*", ctx))
        if body.get("roleArn"):
            checks.append(("iam:PassRole", body["roleArn"],
                           {"iam:PassedToService": ["fis.amazonaws.com"]}))
        return checks
    if action == "fis:StartExperiment":
        template = backend.experiment_templates.get(body.get("experimentTemplateId", ""))
        have = backend.tagger.get_tag_dict_for_resource(template.arn) if template else {}
        new = _tags_ctx(request_tags, None)
        checks = [(action, f"{arn}:experiment-template/{body.get('experimentTemplateId')}",
                   _tags_ctx(None, have)), (action, f"{arn}:experiment/*", new)]
        if request_tags:
            checks.append(("fis:TagResource", f"{arn}:experiment/*", new))
        return checks
    # one template or experiment by id: /experimentTemplates/{id}, /experiments/{id}[/...]
    kind = {"experimentTemplates": "experiment-template", "experiments": "experiment"}[parts[0]]
    found = (backend.experiment_templates if kind == "experiment-template"
             else backend.experiments).get(parts[1])
    have = backend.tagger.get_tag_dict_for_resource(found.arn) if found else {}
    return [(action, f"{arn}:{kind}/{parts[1]}", _tags_ctx(None, have))]


DENIED: list[tuple[str, str]] = []  # (action, resource) of every denial, for a test to show


def _check(self, resource: str) -> None:
    """moto's IAMRequestBase.check_action_permitted, with the evaluation above."""
    if self._action == "sts:GetCallerIdentity":  # needs no permission on AWS either
        return
    policies = []
    for p in self._access_key.collect_policies():
        doc = p if isinstance(p, str) else getattr(p, "document", None) or p.get("policy_document")
        if not isinstance(doc, str):
            from moto.iam.access_control import IAMPolicy

            doc = json.dumps(IAMPolicy(p)._policy_json)
        policies.append(json.loads(doc))
    service = self._action.split(":", 1)[0]
    if service == "s3":
        checks = _s3_checks(self, resource)
    elif service == "eks":
        checks = _eks_checks(self, self._region)
    elif service == "ec2":
        checks = _ec2_checks(self, self._region)
    elif service == "fis":
        checks = _fis_checks(self, self._region)
    else:
        checks = [(self._action, resource, {})]
    for action, res, ctx in checks:
        if not allowed(policies, action, res, ctx):
            DENIED.append((action, res))
            self._raise_access_denied()


@contextlib.contextmanager
def enforce(monkeypatch) -> Iterator[None]:
    """From here on, every request to moto's server (in this process) is authenticated and
    authorized as above; moto's own counting is restored afterwards."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import IAMRequestBase

    DENIED.clear()
    monkeypatch.setattr(IAMRequestBase, "check_action_permitted", _check)
    # moto recomputes some requests' signatures differently from botocore (a DELETE with no
    # body); the caller is still known by its access key id, which is what is tested here
    monkeypatch.setattr(IAMRequestBase, "check_signature", lambda self: None)
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setattr(ActionAuthenticatorMixin, "request_count", 0)
    try:
        yield
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")


def identity(endpoint: str, name: str, policy: dict) -> dict[str, str]:
    """An IAM user of moto's (made before enforcement starts) whose only permissions are
    `policy`; returns its credentials as environment variables."""
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="AKIAADMINSETUP000000", aws_secret_access_key="x")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-only", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
