"""The load generator freezes what is alive at each step boundary and gives it back at the
end of the run: a step's collections never walk the set-up's objects, and a process that
goes on after a run (Dagster, a test session) gets its collector back whole."""

from __future__ import annotations

import gc

from servingbench.resources.loadgen import gcpolicy, run_load

from tests.support.loadgen import config


def test_a_step_boundary_freezes_what_is_alive_and_the_run_end_unfreezes_it():
    gc.unfreeze()
    setup = [[i] for i in range(1000)]  # tracked containers made during set-up
    gcpolicy.between_steps()
    frozen = gc.get_freeze_count()
    assert frozen >= len(setup)
    gcpolicy.run_ended()
    assert gc.get_freeze_count() == 0


def test_a_run_freezes_at_each_step_boundary_and_leaves_nothing_frozen(server, tmp_path,
                                                                       monkeypatch):
    frozen_at: list[int] = []
    freeze = gcpolicy.between_steps

    def watched() -> None:
        freeze()
        frozen_at.append(gc.get_freeze_count())

    monkeypatch.setattr(gcpolicy, "between_steps", watched)
    gc.unfreeze()
    cfg = config(server.base_url, concurrency=[1, 2], requests_per_step=2)
    run_load(cfg, tmp_path / "run", progress=False)
    # the two steps and the end (no warm-up here), each with the set-up's objects frozen
    assert len(frozen_at) == 3 and all(n > 1000 for n in frozen_at)
    assert gc.get_freeze_count() == 0


def test_a_finished_request_leaves_no_cycle_for_the_collector(server, tmp_path):
    """Each exchange and its HTTP parser point at each other; the connection cuts that when
    the exchange ends, so a request's objects go by reference counting, not by a collection
    (a dozen objects a request were left to the collector before, and at c=256 it walked
    them every few milliseconds). Two runs, 40 and 200 requests: what a run's set-up and
    end leave aside, the difference is what the requests left."""
    unreachable = []
    for n in (40, 200):
        cfg = config(server.base_url, concurrency=[8], requests_per_step=n, input_tokens=8,
                     output_tokens=4)
        gc.collect()
        gc.disable()
        try:
            run_load(cfg, tmp_path / f"run{n}", progress=False)
            unreachable.append(gc.collect())
        finally:
            gc.enable()
    per_request = (unreachable[1] - unreachable[0]) / 160
    assert per_request < 1, unreachable  # ~19 a request while the cycle stood
