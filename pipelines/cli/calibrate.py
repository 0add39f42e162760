"""`servingbench calibrate`: fit the emulator's performance model to published measurements
and print its cross-validated error (emulator/calibration_cli.py)."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from servingbench.emulator.calibration_cli import main as calibrate_main

    return int(calibrate_main(argv) or 0)
