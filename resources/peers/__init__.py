"""Peers: other benchmark tools' results read into servingbench run folders (contract §6), and
servingbench's records written out in forms those tools read (docs/import.md).

One module per peer (`aiperf`, `guidellm`, `inference_perf`, `vllm`) turns that tool's files
into `records.PeerRun`; `records.write_run` lays the folder out. A peer is never a dependency
of servingbench: its files are read as JSON, never through its own package. Like the load
generator, this room only records: the gates and the metrics stay the analyzer's.
"""

PEERS = ("aiperf", "guidellm", "inference-perf", "vllm")


def module_for(peer: str):
    """The reader module of `peer` (one of PEERS)."""
    import importlib

    return importlib.import_module(f"servingbench.resources.peers.{peer.replace('-', '_')}")
