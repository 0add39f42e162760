"""Accelerators of a run (contract §1): `node_count × accelerators_per_node`.

GPUs, or Neuron chips (the seeds' table counts chips: Trainium2 × 16, Inferentia2 × 12),
and 1 for a CPU host (`local.host` is the price sheet's key for the machine that runs the
real local engine). A run's manifest records the accelerator and the count per node from
its candidate's instance type; the manifest's own `accelerators_per_node` wins; an older
manifest without it takes the table by instance type; an instance type the table does not
know leaves it unknown (null), never guessed.
"""

from __future__ import annotations

# instance type -> (accelerator, accelerators per node); the names are contract §2.1's
TABLE: dict[str, tuple[str, int]] = {
    "p5.48xlarge": ("H100", 8), "p4d.24xlarge": ("A100", 8), "g6e.48xlarge": ("L40S", 8),
    "trn2.48xlarge": ("Trainium2", 16), "inf2.48xlarge": ("Inferentia2", 12),
    "local.host": ("cpu", 1),
}
PER_NODE: dict[str, int] = {k: n for k, (_, n) in TABLE.items()}
ACCELERATORS = ("H100", "A100", "L40S", "Trainium2", "Inferentia2", "cpu")


def accelerator_of(instance_type: str | None) -> str | None:
    """The accelerator of an instance type, or None when the table does not know it."""
    found = TABLE.get(instance_type or "")
    return found[0] if found else None


def per_node_of(instance_type: str | None) -> int | None:
    """Accelerators per node of an instance type, or None when the table does not know it."""
    return PER_NODE.get(instance_type or "")


def per_node(manifest: dict) -> int | None:
    given = manifest.get("accelerators_per_node")
    if given is not None:
        return given
    return per_node_of(manifest.get("instance_type"))


def accelerators(manifest: dict) -> int | None:
    """`node_count × accelerators_per_node`, or None when either is unknown."""
    n, per = manifest.get("node_count"), per_node(manifest)
    return None if n is None or per is None else n * per
