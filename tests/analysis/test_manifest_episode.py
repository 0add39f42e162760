"""contract §2.1's optional episode keys (replicas, autoscaling, capacity, models, a schedule
scenario's segments and bucket_s): accepted as the spec's examples write them, checked when
present (a misspelt key or a value out of its set exits 2 naming it), absent in older ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.contract import manifest as mf

from tests.support.runbuilder import clean_run

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"


@pytest.mark.parametrize("name", ["manifest.episode.example.json", "manifest.models.example.json"])
def test_the_spec_examples_are_valid_and_round_trip(tmp_path, name):
    if not (EXAMPLES / name).exists():
        pytest.skip("shared/ is not beside this checkout")
    m = mf.load(EXAMPLES / name)
    mf.dump(m, tmp_path / "m.json")
    assert mf.load(tmp_path / "m.json") == m


EPISODE = {"replicas": {"min": 1, "max": 4, "initial": 1},
           "autoscaling": {"policy": "local", "metric": "requests_waiting", "target": 8.0,
                           "activation_target": 1.0, "scale_up_cooldown_s": 30,
                           "scale_down_cooldown_s": 300},
           "capacity": "spot",
           "models": [{"name": "a", "model": "m/a", "model_revision": None, "precision": "bf16",
                       "placement": "swapped", "memory_share": 0.5, "request_share": 0.5}]}


def test_an_older_manifest_without_them_reads_as_null():
    m = clean_run().build_manifest()
    assert all(key not in m for key in EPISODE) and mf.validate(m)
    m.update(EPISODE, scenario={"kind": "schedule", "segments": [{"duration_s": 60, "rate": 2.0}],
                                "bucket_s": 5, "shape": None, "arrival": "poisson"})
    assert mf.validate(m)["capacity"] == "spot"


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m["replicas"].update(maximum=3), "manifest.replicas: unknown key 'maximum'"),
    (lambda m: m["replicas"].update(initial=9), "manifest.replicas: expected min <= initial <= max"),
    (lambda m: m["autoscaling"].update(policy="karpenter"), "manifest.autoscaling.policy"),
    (lambda m: m["autoscaling"].update(metric="cpu"), "manifest.autoscaling.metric"),
    (lambda m: m["autoscaling"].pop("target"), "manifest.autoscaling: missing key 'target'"),
    (lambda m: m.update(capacity="reserved"), "manifest.capacity: 'reserved' is not one of"),
    (lambda m: m["models"][0].update(placement="shared"), "manifest.models[0].placement"),
    (lambda m: m["models"][0].update(memory_share=1.5), "manifest.models[0].memory_share"),
    (lambda m: m["models"].append(dict(m["models"][0])), "manifest.models[1].name: 'a' given twice"),
    (lambda m: m["scenario"]["segments"][0].update(rps=3), "segments[0]: unknown key 'rps'"),
    (lambda m: m["scenario"].update(bucket_s=0), "manifest.scenario.bucket_s: must be > 0"),
])
def test_a_bad_episode_key_exits_2_naming_it(tmp_path, capsys, edit, expected):
    run_dir = clean_run().write(tmp_path / "run")
    m = json.loads((run_dir / "manifest.json").read_text())
    m.update(json.loads(json.dumps(EPISODE)),
             scenario={"kind": "schedule", "segments": [{"duration_s": 60, "rate": 2.0}]})
    edit(m)
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert cli(["analyze", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and expected in err
