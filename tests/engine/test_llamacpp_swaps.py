"""Two models of one llama-cpp-python server (llamacpp_models, its --config_file with a
model_alias each): Gemma 3 270M at Q2_K and Q8_0, requested in alternating bursts. The
first request after a swap waits for the load the server times, so its time to first
token exceeds a warm request's of the same model by at least that load; every swap is
written as a model_load / model_sleep event. Skipped, with the reason, when the engine or
the models are not installed (`make engine`)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from servingbench.resources.model_server.local.llamacpp import engine_available

from benchmarks import swap_measure

WHY = engine_available() or next(
    (f"{f} not cached" for _, f in swap_measure.DEFAULT_MODELS
     if not (swap_measure.MODELS_DIR / f).is_file()), None)
pytestmark = [pytest.mark.skipif(WHY is not None, reason=f"real engine: {WHY}"),
              pytest.mark.slow]


# serial: two requests' measured times to first token are compared, and on a host the other
# workers keep busy a warm request's own prefill can take longer than the swapped-in one's
# (it failed once that way on a fresh clone: 1.29 s against 1.01 s, around a 0.71 s load)
@pytest.mark.serial
def test_first_request_after_a_swap_waits_for_the_load(tmp_path):
    summary, sent, rows = swap_measure.measure(rounds=1, burst=2, out=tmp_path)
    assert summary["errors"] == 0
    # start-up load of the first model, then the swap to the second: free + load
    assert [(r["kind"], r["model"]) for r in rows] == [
        ("model_load", "gemma-q2k"), ("model_sleep", "gemma-q2k"), ("model_load", "gemma-q8")]
    load = rows[-1]
    first, warm = (s for s in sent if s.model == "gemma-q8")
    assert first.index == 0 and warm.index == 1
    # the load happened inside the first request's wait for its first token
    assert first.sent_ns <= load["started_ns"] and load["ended_ns"] <= first.first_token_ns
    assert first.ttft_s - warm.ttft_s >= load["seconds"]
    events = pq.read_table(tmp_path / "events.parquet").to_pylist()
    assert [(e["kind"], e["subject"]) for e in events] == [
        (r["kind"], r["model"]) for r in rows]
    assert events[-1]["value"] == pytest.approx(load["seconds"])


def test_a_model_the_config_does_not_list_is_404(tmp_path):
    cfg = swap_measure.config_file(tmp_path / "models.json")
    server = swap_measure.start(cfg, tmp_path)
    try:
        status = swap_measure.send(server.port, "no-such-model")[3]
        assert status == 404
        assert [r["kind"] for r in swap_measure.swaps(server.port)] == ["model_load"]
    finally:
        server.stop(grace_s=10)
