"""Accelerators per node by instance family (contract §1): what `accelerators` counts.

GPUs, or Neuron chips (the seeds' table counts chips: Trainium2 × 16, Inferentia2 × 12),
and 1 for a CPU host (this host as the engine's device). The manifest records both the
accelerator and the count; a reader of an older manifest without them looks them up here.
"""

from __future__ import annotations

# family -> (accelerator, accelerators per node); the names are contract §2.1's
FAMILIES: dict[str, tuple[str, int]] = {
    "p5": ("H100", 8),
    "p4d": ("A100", 8),
    "g6e": ("L40S", 8),
    "trn2": ("Trainium2", 16),
    "inf2": ("Inferentia2", 12),
    "local": ("cpu", 1),  # local.host: the machine that ran the engine (price_sheet_local.yaml)
}
ACCELERATORS = ("H100", "A100", "L40S", "Trainium2", "Inferentia2", "cpu")


def family(instance_type: str | None) -> str | None:
    return None if not instance_type else instance_type.split(".", 1)[0]


def accelerator(instance_type: str | None) -> str | None:
    """The accelerator of an instance type, or None when the type is not in the table."""
    found = FAMILIES.get(family(instance_type) or "")
    return found[0] if found else None


def per_node(instance_type: str | None) -> int | None:
    """Accelerators per node of an instance type, or None when the type is not in the table."""
    found = FAMILIES.get(family(instance_type) or "")
    return found[1] if found else None
