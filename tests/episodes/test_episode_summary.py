"""`servingbench demo`'s lines for episodes, spot runs and several-model runs, from folders
the real analyzer analysed: each number is the analyzer's (hand-checked where the run is
hand-made: test_spot's interruptions, test_models' swaps), and every line says EMULATED or
MEASURED from the manifest's source, never measured for an emulated run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli.episode_summary import text
from servingbench.resources.analysis.analyze import analyze_run

from tests.analysis.test_models import two_models
from tests.analysis.test_spot import spot_run
from tests.support.runbuilder import synthetic_episode

pytestmark = pytest.mark.slow  # three analyses: not in `make check`


def test_episode_spot_and_models_lines(tmp_path):
    ep = synthetic_episode(tmp_path / "ep", 1500, chunks=2, length_s=240, seed=0,
                           per_replica_rps=8.0, max_replicas=4)
    spot = spot_run().write(tmp_path / "spot")
    models = two_models("swapped").write(tmp_path / "models")
    # the hand-made runs are measured-looking; the spot one says so, the others stay emulated
    m = json.loads((spot / "manifest.json").read_text())
    m["source"] = "measured"
    (spot / "manifest.json").write_text(json.dumps(m))
    for d in (ep, spot, models):
        assert analyze_run(d).exit_code == 0, d
    lines = text([str(ep), str(spot), str(models)]).splitlines()
    summary = json.loads((ep / "episode.json").read_text())
    ups = [e for e in pq.read_table(ep / "scale_events.parquet").to_pylist()
           if e["direction"] == "up"]
    assert lines[0] == (
        f"EMULATED  synthetic-episode: episode {summary['duration_s']:.0f} s, SLO attainment "
        f"{100 * summary['slo_attainment']:.1f} %, replica-hours "
        f"{summary['replica_seconds'] / 3600:.4f}, idle cost ${summary['idle_cost_usd']:,.2f}, "
        "cost per 1M output tokens over the episode "
        f"${summary['cost_per_1m_output_usd']:,.2f}")
    assert summary["idle_cost_usd"] >= 1  # shown to the cent
    scale = [ln for ln in lines if "scale-up" in ln]
    assert len(scale) == len(ups) > 0
    assert all(ln.startswith("EMULATED    scale-up") and "decision -> ready 60.00 s" in ln
               for ln in scale)  # the synthetic replica's 60 s cold start
    [sp] = [ln for ln in lines if "spot," in ln]
    # test_spot's run: two notices, 2 lost and both resent ok, replaced 6 s after the cut
    assert sp.startswith("MEASURED  ") and "2 interruption notices, requests lost 2, " \
        "recovered (resent ok) 2; recovery 6.00 s" in sp
    assert "effective discount - (no accepted on-demand run to pair with)" in sp
    big = next(ln for ln in lines if " big:" in ln)
    assert big.startswith("EMULATED") and "during swaps 0.50 s, outside 0.10 s" in big
    assert "ATTRIBUTED cost per 1M" in big and "BILLED" in big
    assert not any(ln.startswith("MEASURED") for ln in lines if "spot," not in ln)
