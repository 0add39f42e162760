"""Every image the deploy/ manifests pull is pinned by digest: a tag can be moved to other
bytes under the same name, so what ran could not be named afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PINNED = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")


def images(node) -> list[str]:
    """Every image reference in a YAML tree: `image: "repo…"` strings, and the Helm chart's
    `image: {repository, tag}` maps joined as the chart joins them."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                out.append(value)
            elif key == "image" and isinstance(value, dict) and "repository" in value:
                out.append(f"{value['repository']}:{value.get('tag', 'latest')}")
            else:
                out += images(value)
    elif isinstance(node, list):
        for item in node:
            out += images(item)
    return out


def test_every_image_in_deploy_is_pinned_by_digest():
    found = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for image in images(doc):
                found[image] = path.name
    assert len(found) >= 2, found  # the code location's image and neuron-monitor's
    unpinned = {image: where for image, where in found.items() if not PINNED.match(image)}
    assert unpinned == {}


def test_the_check_catches_a_tag():
    doc = {"spec": {"containers": [{"image": "public.ecr.aws/neuron/neuron-monitor:1.1.0"}]},
           "deployments": [{"image": {"repository": "r/sb", "tag": "0.1.0"}}]}
    assert [i for i in images(doc) if not PINNED.match(i)] == [
        "public.ecr.aws/neuron/neuron-monitor:1.1.0", "r/sb:0.1.0"]
