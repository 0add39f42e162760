"""A FIS experiment whose start fails on every tick of the schedule is one error, counted,
not a new line every `poll_s` for the rest of the run (a run of hours polled every 5 s used
to pile up thousands of copies in its failure message)."""

from __future__ import annotations

from servingbench.resources.cluster.fis import FisInterruptions
from servingbench.resources.contract import manifest as mf
from servingbench.resources.model_server.kube.spot import SpotInterrupter

from tests.support.eks.aws import OWNER, REGION

RUN = "20261129T020000Z-p5.48xlarge-scout-bf16-spot"
FIS_ROLE = "arn:aws:iam::123456789012:role/sb-fis"
T0 = 1_800_000_000 * 10**9


def test_a_start_failing_on_every_tick_is_one_error(moto, tmp_path):
    endpoint, session = moto
    fis = FisInterruptions(session, REGION, role_arn=FIS_ROLE, owner=OWNER, endpoint_url=endpoint)
    m = mf.empty(RUN, "measured", T0 - 60 * 10**9)
    m["phases"]["steady"] = {"started_at": mf.format_ts(T0), "ended_at": None}
    mf.dump(m, tmp_path / "manifest.json")
    schedule = SpotInterrupter(fis, RUN, tmp_path, [1.0], poll_s=3600, clock=lambda: T0 + 5 * 10**9)
    with schedule.running():
        fis.delete(schedule.template_id)       # the template is gone: every start fails
        for _ in range(5):
            assert schedule.tick() == []
    (error,) = schedule.errors
    assert error.startswith("starting a FIS experiment: ") and error.endswith("(5 tries)")
