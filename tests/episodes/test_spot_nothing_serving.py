"""A local spot run whose interruption finds no replica serving says so: the time is kept as
missed and the run fails with it named, as a spot run on EKS does when an experiment never
started (it used to go on silently uninterrupted). A real emulator replica behind real
HAProxy: the one replica is interrupted at 0 s; at 0.05 s its replacement, a new Python
process, cannot be serving yet."""

from __future__ import annotations

import time

import pytest
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.deployment import Replicated
from servingbench.resources.model_server.fleet.balancer import find_haproxy
from servingbench.resources.model_server.fleet.replicated import replicated

from tests.support.emulator import fixed_timing_args

pytestmark = pytest.mark.skipif(find_haproxy() is None,
                                reason="haproxy is not installed (make haproxy)")
RUN = "run-nothing-serving"


@pytest.mark.timeout(120)
def test_an_interruption_with_nothing_serving_fails_the_run_naming_it(tmp_path):
    run_dir = tmp_path / RUN
    run_dir.mkdir()
    m = mf.empty(RUN, "emulated", time.time_ns())
    mf.dump(m, run_dir / "manifest.json")
    plan = Replicated.of({"min": 1, "max": 1, "initial": 1},
                         interruptions={"at": [0, 0.05], "notice_s": 0.5})
    with pytest.raises(RuntimeError, match=r"spot interruptions did not all happen: no replica "
                                           r"was serving to interrupt at 0\.05 s"):
        with replicated(lambda name: fixed_timing_args(20, 5), run_dir, RUN, plan, 60) as pool:
            m["phases"]["steady"] = {"started_at": mf.format_ts(time.time_ns()), "ended_at": None}
            mf.dump(m, run_dir / "manifest.json")  # the steady phase begins: times count now
            deadline = time.monotonic() + 30
            reps = pool["replica_set"]
            while time.monotonic() < deadline and not any(
                    r.state == "stopped" for r in reps.replicas.values()):
                time.sleep(0.05)
