"""`servingbench ui` (`make ui`): the Dagster UI on http://127.0.0.1:3000 from workspace.yaml.

Runs `dagster dev` (webserver + daemon, so schedules run) with DAGSTER_HOME defaulting to
./.dagster_home, where `servingbench demo` records its runs too.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from servingbench.pipelines.cli.demo import dagster_home
from servingbench.pipelines.config import REPO


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="servingbench ui", description=__doc__)
    p.add_argument("--port", type=int, default=3000)
    args = p.parse_args(argv)
    home = dagster_home()
    print(f"Dagster UI: http://127.0.0.1:{args.port}  (DAGSTER_HOME={home}; Ctrl-C stops it)",
          flush=True)
    os.chdir(REPO)
    # `dagster dev` started from a script ignores SIGINT/SIGTERM inherited as ignored
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    dagster = str(Path(sys.executable).parent / "dagster")
    os.execv(dagster, [dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                       "-p", str(args.port)])
    return 0
