"""The `servingbench` command: a thin dispatcher.

Each subcommand is one module of this package and exposes ``main(argv) -> int``;
modules are imported lazily so `servingbench --help` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("servingbench.pipelines.cli.analyze", "run the gates and metric SQL on a run folder"),
    "load": ("servingbench.pipelines.cli.load", "drive an OpenAI-compatible endpoint, write a run folder"),
    "loadpod": ("servingbench.pipelines.cli.loadpod", "one pod of the load Job: load as worker pod-<index>, "
                "upload its shards to S3"),
    "emulator": ("servingbench.pipelines.cli.emulator", "serve the local engine emulator (EMULATED numbers)"),
    "predict": ("servingbench.pipelines.cli.predict", "the emulator's predictions for rows of a "
                "published-measurements table (EMULATED, virtual time)"),
    "calibrate": ("servingbench.pipelines.cli.calibrate", "fit the emulator to published measurements, "
                  "print its cross-validated error"),
    "demo": ("servingbench.pipelines.cli.demo", "run the chain on the embedded default and print the headline "
             "(--real: llama.cpp on this host)"),
    "run": ("servingbench.pipelines.cli.run", "benchmark one candidate with the profile of SERVINGBENCH_PROFILE"),
    "sweep": ("servingbench.pipelines.cli.sweep", "list a sweep's combinations and the ones the fit check "
              "skips"),
    "ui": ("servingbench.pipelines.cli.ui", "start the Dagster UI on 127.0.0.1"),
    "eks": ("servingbench.pipelines.cli.eks", "reap expired node groups / refetch a run's bill (eks)"),
    "report": ("servingbench.pipelines.cli.report", "write HTML reports of run folders"),
    "publish": ("servingbench.pipelines.cli.publish", "copy a run folder to s3://…/runs/<run_id>, marker last "
                "(a rerun completes a partial publish)"),
    "engine": ("servingbench.pipelines.cli.engine", "the real local engine: prepare derived models, status"),
    "import": ("servingbench.pipelines.cli.peer_import", "another tool's result (aiperf, guidellm, "
               "inference-perf, vllm) as a run folder"),
    "export": ("servingbench.pipelines.cli.peer_export", "a run folder's records in a peer's format "
               "(aiperf, csv)"),
}


def _usage() -> str:
    lines = ["usage: servingbench <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines.append("\n`servingbench <command> --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"servingbench: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if name == "analyze" and not {"-h", "--help"} & set(rest):
        # Great Expectations takes seconds to import and the gates need it: start it on a
        # thread before anything else is imported (the command's own modules, pandas,
        # DuckDB), so it overlaps them and the DuckDB work that comes before the gates
        from servingbench.resources.analysis import gx

        gx.preload()
    module = importlib.import_module(COMMANDS[name][0])
    try:
        rc = int(module.main(rest) or 0)
    except BrokenPipeError:
        # the reader went away (`servingbench sweep list | head`): what it read was all it
        # wanted; point stdout at /dev/null so the interpreter's final flush raises nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if argv is None and name in QUICK_EXIT:
        _quick_exit(rc)
    return rc


# Commands that, run as the process itself, leave without the interpreter's teardown: their
# work is closed and written when main returns (the analyzer removes its DuckDB scratch
# itself), and tearing down the modules Great Expectations and pandas bring took ~0.6 s of
# a 4-5 s `servingbench analyze` (docs/performance.md). Never when main() is called in-process.
QUICK_EXIT = frozenset({"analyze"})


def _quick_exit(rc: int) -> None:
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
