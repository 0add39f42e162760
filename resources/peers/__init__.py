"""Peers: other benchmark tools' results read into servingbench run folders (contract §6), and
servingbench's records written out in forms those tools read (docs/import.md).

A peer is one file here: `<peer>.py` turns that tool's files into `records.PeerRun` with its
`read(path)` and ends with `PLUGIN = Peer(...)`: the peer's name as `servingbench import` and
the import job spell it, its reader, how its results are recognised in a folder, and whether
its times need an anchor. The package finds the files (`names`, `get`); `run_writer.write_run`
lays the folder out. A peer is never a dependency of servingbench: its files are read as
JSON, never through its own package. Like the load generator, this room only records: the
gates and the metrics stay the analyzer's. Discovery runs on the first call, so importing
`records` or `export` reads no peer's file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from servingbench.resources.contract.discovery import plugins

# the package's modules that are not a peer's file
HELPERS = frozenset({"discover", "export", "records", "run_writer"})


@dataclass(frozen=True)
class Peer:
    """What a peer's file declares."""

    name: str  # as `servingbench import PEER` and the import job's `peer` spell it
    read: Callable  # read(path[, anchor_ns]) -> records.PeerRun
    marker: str  # the file (a glob) that marks one result in a folder of results
    result_is_folder: bool  # whether that result is the marker's folder (else the file)
    # the peer's files keep only a monotonic clock: `read` takes `anchor_ns`, the instant its
    # first request was sent (`servingbench import --anchor`), to place them in UTC
    relative_clock: bool = False


def discover_peers(package: ModuleType) -> dict[str, Peer]:
    """Every peer `package`'s files declare, by name. A file without `PLUGIN = Peer(...)`, or
    a name another file took, is an ImportError naming the file."""
    found: dict[str, tuple[Peer, str]] = {}
    for peer, _, where in plugins(package.__path__, package.__name__,
                                  lambda v: isinstance(v, Peer), "Peer(...)", HELPERS):
        if peer.name in found:
            raise ImportError(f"{where}: peer {peer.name!r} is already declared in "
                              f"{found[peer.name][1]}")
        found[peer.name] = (peer, where)
    return {name: peer for name, (peer, _) in sorted(found.items())}


_FOUND: dict[str, Peer] | None = None


def _peers() -> dict[str, Peer]:
    global _FOUND
    if _FOUND is None:
        _FOUND = discover_peers(importlib.import_module(__name__))
    return _FOUND


def names() -> tuple[str, ...]:
    """Every peer's name, sorted."""
    return tuple(_peers())


def get(name: str) -> Peer:
    """The peer named `name`; ValueError naming it and the peers there are otherwise."""
    peer = _peers().get(name)
    if peer is None:
        raise ValueError(f"peer {name!r}: expected one of {', '.join(names())}")
    return peer
