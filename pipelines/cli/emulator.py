"""`servingbench emulator`: the engine emulator's own command line. The emulator is
self-contained (it imports nothing of servingbench), so this only hands over."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from servingbench.emulator.cli import main as emulator_main

    return int(emulator_main(argv) or 0)
