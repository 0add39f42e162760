from __future__ import annotations

import pytest
from servingbench.emulator.process import EmulatorProcess

FAST = ["--time-scale", "0.0005", "--cold-start-s", "0", "--seed", "7"]


@pytest.fixture(scope="session")
def gt_path(tmp_path_factory):
    return tmp_path_factory.mktemp("gt") / "ground_truth.jsonl"


@pytest.fixture(scope="session")
def emu(gt_path):
    """One modelled emulator for the whole session (p5.48xlarge, Scout BF16), time scaled down."""
    with EmulatorProcess([*FAST, "--ground-truth", str(gt_path)]) as e:
        yield e


@pytest.fixture(scope="session")
def fixed(tmp_path_factory):
    """A fixed-timing emulator: TTFT 20 ms, ITL 5 ms, tokens on absolute deadlines."""
    gt = tmp_path_factory.mktemp("gtf") / "gt.jsonl"
    with EmulatorProcess(["--fixed-timing", "20:5", "--cold-start-s", "0", "--seed", "3",
                          "--ground-truth", str(gt)]) as e:
        e.gt = gt
        yield e
