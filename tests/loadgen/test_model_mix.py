"""Several models behind one endpoint: the load generator names a model in every request's
body (by request_share, seeded, or in alternating bursts), records it in the request log's
`model`, and a resend names the model its first attempt named. End to end: the emulator
serving two swapped models (--models) behind the swap driver, whose events follow the
bursts."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from servingbench.emulator.process import EmulatorProcess
from servingbench.resources.loadgen import LoadConfigError, run_load
from servingbench.resources.loadgen.model_mix import ModelMix
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.swap.driver import SwapDriver

from tests.support.loadgen import config, rows

BODY = b'{"model":"scout","max_tokens":8,"stream":true,"prompt":"hi"}'


def test_bursts_alternate_in_the_order_listed():
    mix = ModelMix([["a", 0.5], ["b", 0.5]], bursts=3)
    assert [mix.pick() for _ in range(8)] == list("aaabbbaa")


def test_shares_are_drawn_seeded():
    picks = [ModelMix([["a", 0.8], ["b", 0.2]], seed=4) for _ in range(2)]
    first, second = ([m.pick() for _ in range(500)] for m in picks)
    assert first == second
    assert 300 < Counter(first)["a"] < 480   # 400 expected


def test_the_body_names_the_picked_model_and_nothing_else_changes():
    mix = ModelMix([["x/y", 1.0], ["b", 0.0]])
    body, name = mix.apply(BODY)
    assert name == "x/y" and json.loads(body) == {**json.loads(BODY), "model": "x/y"}
    assert mix.model_of(body) == "x/y"
    assert mix.apply(b'{"prompt":"no model first"}') == (b'{"prompt":"no model first"}', None)


@pytest.mark.parametrize("kw, message", [
    ({"model_mix": [["a", -1]]}, "model_mix: shares must be >= 0"),
    ({"model_mix": [["a", 1]], "model_bursts": 0}, "model_bursts: expected a positive"),
    ({"model_bursts": 2}, "model_bursts: needs model_mix"),
    ({"model_mix": [[3, 1]]}, "model_mix: every name must be"),
])
def test_a_bad_mix_is_named(kw, message):
    with pytest.raises(LoadConfigError, match=message):
        config("http://127.0.0.1:1", **kw)


def test_bursts_through_the_swap_driver_fill_the_log_and_force_swaps(tmp_path):
    models = [{"name": n, "model": "scout", "precision": p, "placement": "swapped",
               "memory_share": 0.9, "sleep_level": lvl}
              for n, p, lvl in (("big", "bf16", 1), ("small", "fp8", 2))]
    (tmp_path / "models.json").write_text(json.dumps(models))
    with EmulatorProcess(["--time-scale", "0.0005", "--cold-start-s", "0", "--seed", "3",
                          "--models", str(tmp_path / "models.json")]) as emu:
        driver = SwapDriver(models, {m["name"]: ("127.0.0.1", emu.port) for m in models},
                            Events(tmp_path / "run", "run-1"))
        port = driver.start()
        try:
            cfg = config(f"http://127.0.0.1:{port}", model="big", concurrency=[2],
                         requests_per_step=12, model_mix=[["big", 0.5], ["small", 0.5]],
                         model_bursts=4, use_tokenize=False, run_id="run-1")
            run_load(cfg, tmp_path / "run", progress=False)
        finally:
            driver.stop()
    log = rows(tmp_path / "run")
    assert {r["status"] for r in log} == {"ok"}
    assert Counter(r["model"] for r in log) == {"big": 8, "small": 4}  # bursts of 4: b, s, b
    events = pq.read_table(tmp_path / "run" / "events.parquet").to_pylist()
    kinds = [(e["kind"], e["subject"]) for e in events]
    assert kinds[:2] == [("model_sleep", "big"), ("model_wake", "small")]
    assert len(kinds) >= 4 and {k for k, _ in kinds} == {"model_sleep", "model_wake"}
