"""Every number an arrival schedule takes is finite and bounded, and what the schedule adds up
to (its length, its expected request count) is checked from its segments before anything is
provisioned: an infinite `length_s` or `peak_rate` used to pass the candidates check and hold
a paid run in its steady phase until an OOM kill or the job's max runtime, and a ramp of
10^8 levels made loading the candidates file itself take gigabytes. The send times are drawn
lazily, so no schedule holds memory in proportion to its length."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli import main as cli
from servingbench.pipelines.config import ConfigError

GOOD = ("name: c1, instance_type: p5.48xlarge, "
        "model: meta-llama/Llama-4-Scout-17B-16E-Instruct, precision: bf16, tensor_parallel: 8")
DAY = Path(__file__).resolve().parents[2] / "pipelines" / "day_load.csv"

# the schedule's keys -> the key path the message must name
BAD = {
    "length_s .inf": ("shape: spike, length_s: .inf", r"scenario\.length_s: must be a finite"),
    "length_s .nan": ("shape: spike, length_s: .nan", r"scenario\.length_s: must be a finite"),
    "peak_rate .inf": ("shape: spike, peak_rate: .inf", r"scenario\.peak_rate: must be a finite"),
    "base_rate .inf": ("shape: step, base_rate: .inf", r"scenario\.base_rate: must be a finite"),
    "peak_rate 10^9": ("shape: spike, peak_rate: 1000000000",
                       r"scenario\.peak_rate: 1000000000 is above the maximum 10,000"),
    "levels 10^8": ("shape: ramp, levels: 100000000",
                    r"scenario\.levels: 100000000 is above the maximum 10,000"),
    "length_s 10^12": ("shape: spike, length_s: 1000000000000",
                       r"scenario\.length_s: 1000000000000 is above the maximum 86,400"),
    "bucket_s .inf": ("shape: spike, bucket_s: .inf", r"scenario\.bucket_s: must be a finite"),
    "compress .inf": (f"shape: day, day_csv: {DAY}, compress: .inf",
                      r"scenario\.compress: must be a finite"),
    "compress 0.5 (a two-day day)": (f"shape: day, day_csv: {DAY}, compress: 0.5",
                                     r"scenario\.compress: the schedule lasts 172,800 s, at most"),
    "segment duration_s 1e12": ("segments: [{duration_s: 1.0e+12, rate: 10000}]",
                                r"scenario\.segments\[0\]\.duration_s: 1000000000000\.0 is above"),
    "segment rate .inf": ("segments: [{duration_s: 1, rate: .inf}]",
                          r"scenario\.segments\[0\]\.rate: must be a finite"),
    "8e8 requests": ("segments: [{duration_s: 80000, rate: 10000}]",
                     r"scenario\.segments: the schedule expects about 800,000,000 requests"),
    "a spike of 1.2e8 requests": ("shape: spike, length_s: 18000, peak_rate: 10000",
                                  r"scenario\.length_s: the schedule expects about"),
    "longer than a run may take": ("shape: spike, length_s: 20000, peak_rate: 1",
                                   r"scenario\.length_s: the schedule lasts 20,000 s; a benchmark "
                                   r"run stops at its max runtime"),
}


def _file(tmp_path: Path, schedule: str) -> Path:
    path = tmp_path / "candidates.yaml"
    path.write_text(f"candidates:\n  - {{{GOOD}, scenario: {{kind: schedule, {schedule}}}}}\n")
    return path


@pytest.mark.parametrize("case", list(BAD))
def test_the_candidates_check_names_the_schedule_key(tmp_path, case):
    schedule, message = BAD[case]
    with pytest.raises(ConfigError, match=r"candidates\.yaml: candidates\[0\]\." + message):
        load_candidates(_file(tmp_path, schedule))


@pytest.mark.parametrize("case", ["length_s .inf", "peak_rate .inf", "8e8 requests"])
def test_sweep_list_and_the_demo_exit_2_naming_the_key(tmp_path, case, capsys):
    schedule, message = BAD[case]
    path = _file(tmp_path, schedule)
    assert cli(["sweep", "list", "--candidates", str(path)]) == 2
    assert "candidates[0]." in capsys.readouterr().err
    assert cli(["demo", "--candidates", str(path), "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "candidates.yaml: candidates[0].scenario." in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # nothing started, nothing written


def _limit_memory() -> None:
    limit = 1 << 30  # far above what loading a candidates file takes (~100 MiB)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.parametrize("command", [["sweep", "list", "--candidates", "{path}"],
                                     ["run", "--candidate", "c1"]])
def test_a_ramp_of_a_hundred_million_levels_is_exit_2_before_it_expands(tmp_path, command):
    # under 1 GiB of address space: expanding 10^8 levels would need gigabytes (MemoryError,
    # a traceback) before any check ran
    path = _file(tmp_path, "shape: ramp, levels: 100000000")
    argv = [a.replace("{path}", str(path)) for a in command]
    env = {"PATH": "/usr/bin:/bin", "SERVINGBENCH_CANDIDATES": str(path),
           "SERVINGBENCH_DATA_DIR": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "dh")}
    done = subprocess.run([sys.executable, "-m", "servingbench.pipelines.cli", *argv],
                          capture_output=True, text=True, timeout=60, env=env,
                          preexec_fn=_limit_memory)
    assert done.returncode == 2, done.stderr
    assert "candidates[0].scenario.levels: 100000000 is above the maximum" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_load_flag_names_itself(tmp_path, capsys):
    from servingbench.pipelines.cli import load as load_cli

    base = ["--endpoint", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "r")]
    assert load_cli.main([*base, "--schedule", "spike:length_s=.inf"]) == 2
    assert "--schedule.length_s: must be a finite positive number, got inf" in capsys.readouterr().err
    assert load_cli.main([*base, "--schedule", "ramp:levels=100000000"]) == 2
    assert "--schedule.levels: 100000000 is above the maximum" in capsys.readouterr().err
    assert load_cli.main([*base, "--profile", "80000:10000"]) == 2
    assert "--profile.segments: the schedule expects about 800,000,000 requests" in \
        capsys.readouterr().err
    assert not (tmp_path / "r").exists()


_LAZY_PROBE = """
import json, tracemalloc
from servingbench.resources.loadgen.scenarios.schedule import plan
from servingbench.resources.loadgen.schedule import MAX_REQUESTS
from servingbench.resources.loadgen.workers.share import Share
n_sends = MAX_REQUESTS // 5
tracemalloc.start()
offsets, target, length = plan([{"duration_s": 100.0, "rate": n_sends / 100}], "poisson", seed=1)
n = sum(1 for _ in Share(1, 3).deal_lazily(offsets))
_, peak = tracemalloc.get_traced_memory()
print(json.dumps({"n_sends": n_sends, "target": target, "length": length, "n": n, "peak": peak}))
"""


def test_send_times_are_drawn_lazily_not_kept():
    from servingbench.resources.loadgen.scenarios.schedule import plan

    # a fifth of the largest schedule allowed: a list of its send times is ~6 MB of floats.
    # Measured in a process of its own: tracemalloc counts every thread's allocations, and a
    # test worker may hold another test's server threads
    out = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    got = json.loads(out.stdout)
    n_sends = got["n_sends"]
    assert got["target"] == n_sends / 100 and got["length"] == 100.0
    assert abs(got["n"] - n_sends / 3) < 0.01 * n_sends
    assert got["peak"] < 1 << 20
    offsets, _, _ = plan([{"duration_s": 100.0, "rate": n_sends / 100}], "poisson", seed=1)
    # drawn again from the seed: the same send times each time
    first = list(zip(range(1000), offsets, strict=False))
    assert first == list(zip(range(1000), offsets, strict=False))
