"""`servingbench predict`: the emulator's predictions for rows of a published-measurements
table (emulator/predict.py; EMULATED, in virtual time, no server)."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from servingbench.emulator.predict import main as predict_main

    return int(predict_main(argv) or 0)
