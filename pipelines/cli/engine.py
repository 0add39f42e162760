"""`servingbench engine`: the real local engine (llama.cpp's server, installed by `make engine`).

    servingbench engine status     # is the engine installed, which models are in the cache
    servingbench engine prepare    # build every derived (requantized) model of the real candidates
"""

from __future__ import annotations

import argparse
import sys

from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.config import REAL_FILE, ConfigError


def main(argv: list[str]) -> int:
    from servingbench.resources.model_server.local.llamacpp import (
        EngineNotInstalled,
        engine_available,
        engine_version,
        file_sha256,
        model_file_for,
        models_dir,
    )

    ap = argparse.ArgumentParser(prog="servingbench engine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["status", "prepare"])
    ap.add_argument("--candidates", default=str(REAL_FILE))
    args = ap.parse_args(argv)
    if args.command == "status":
        why = engine_available()
        print(f"llama-cpp-python {engine_version() or 'not installed'}; "
              f"{'ready' if why is None else why}")
        for path in sorted(models_dir().glob("*.gguf")):
            print(f"  {path.name}  {path.stat().st_size / 2**20:.1f} MiB")
        return 0 if why is None else 1
    try:
        candidates = load_candidates(args.candidates)
        for c in candidates:
            if c.engine == "llama.cpp" and c.llamacpp.requantize_from:
                path = model_file_for(c)
                print(f"[engine] {c.name}: {path} (sha256 {file_sha256(path)[:12]}…)")
    except (ConfigError, EngineNotInstalled) as exc:
        print(f"servingbench engine: {exc}", file=sys.stderr)
        return 2
    return 0
