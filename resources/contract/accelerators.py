"""Accelerators of a run (contract §1): `node_count × accelerators_per_node`.

The manifest's own `accelerators_per_node` wins; an older manifest without it takes §1's
table by instance type; an instance type the table does not know leaves it unknown (null),
never guessed.
"""

from __future__ import annotations

# contract §1: GPUs, or Neuron chips, per node; 1 for a CPU host (`local.host` is the price
# sheet's key for the machine that runs the real local engine).
PER_NODE: dict[str, int] = {
    "p5.48xlarge": 8, "p4d.24xlarge": 8, "g6e.48xlarge": 8,
    "trn2.48xlarge": 16, "inf2.48xlarge": 12, "local.host": 1,
}


def per_node(manifest: dict) -> int | None:
    given = manifest.get("accelerators_per_node")
    if given is not None:
        return given
    return PER_NODE.get(manifest.get("instance_type") or "")


def accelerators(manifest: dict) -> int | None:
    """`node_count × accelerators_per_node`, or None when either is unknown."""
    n, per = manifest.get("node_count"), per_node(manifest)
    return None if n is None or per is None else n * per
