"""Which results of a peer a folder holds (the import job reads a folder or an S3 prefix
that teams drop their peers' results into): each peer's result is recognised by the file
that peer always writes."""

from __future__ import annotations

from pathlib import Path

# peer -> (the file that marks one result, whether the result is that file's folder)
MARKERS = {
    "aiperf": ("profile_export.jsonl", True),
    "guidellm": ("benchmarks.json", False),
    "inference-perf": ("per_request_lifecycle_metrics.json", True),
}


def results_in(folder: Path, peer: str) -> list[Path]:
    """The result paths of `peer` under `folder`, sorted; vllm's results are its JSON files
    (`vllm bench serve` names them after the run)."""
    folder = Path(folder)
    if peer == "vllm":
        return sorted(p for p in folder.rglob("*.json") if p.is_file())
    name, is_folder = MARKERS[peer]
    found = sorted(p for p in folder.rglob(name) if p.is_file())
    return [p.parent if is_folder else p for p in found]
