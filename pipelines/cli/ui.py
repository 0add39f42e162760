"""`servingbench ui` (`make ui`): the Dagster UI on http://127.0.0.1:3000 from workspace.yaml.

Runs `dagster dev` (webserver + daemon, so schedules run) with DAGSTER_HOME defaulting to
./.dagster_home, where `servingbench demo` records its runs too; the candidates file's pool
limits are written into its dagster.yaml first (the run queue enforces them).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from servingbench.assets.pools import write_instance_config
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli.demo import dagster_home
from servingbench.pipelines.config import REPO, ConfigError
from servingbench.pipelines.profiles import Settings


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="servingbench ui", description=__doc__)
    p.add_argument("--port", type=int, default=3000)
    args = p.parse_args(argv)
    home = dagster_home()
    try:  # the pools' limits, from the candidates file, for the runs the UI launches
        write_instance_config(home, load_candidates(Settings.from_env().candidates_file))
    except ConfigError as exc:
        print(f"servingbench ui: {exc}", file=sys.stderr)
        return 2
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
