"""Which results of a peer a folder holds (the import job reads a folder or an S3 prefix
that teams drop their peers' results into): each peer's result is recognised by the file
that peer always writes, as its file declares (`Peer.marker`)."""

from __future__ import annotations

from pathlib import Path

from servingbench.resources.peers import get, names

# peer -> (the file that marks one result, whether the result is that file's folder), as each
# peer's file declares it (`Peer.marker`, `Peer.result_is_folder`)
MARKERS = {n: (get(n).marker, get(n).result_is_folder) for n in names()}


def results_in(folder: Path, peer: str) -> list[Path]:
    """The result paths of `peer` under `folder`, sorted."""
    folder = Path(folder)
    declared = get(peer)
    found = sorted(p for p in folder.rglob(declared.marker) if p.is_file())
    return [p.parent if declared.result_is_folder else p for p in found]
