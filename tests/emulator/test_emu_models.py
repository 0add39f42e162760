"""Several models in one emulator process (`--models`, emulator/modelset.py), EMULATED, and the
swap driver in front of it (resources/model_server/swap/driver.py): vLLM's sleep-mode endpoints,
a sleeping model refusing requests, resident models sharing the accelerator's compute, and
the driver putting the awake model to sleep and waking the requested one, each written as
an event."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.emulator import specs
from servingbench.emulator.cli import main as emulator_main
from servingbench.emulator.fit import fit_of
from servingbench.emulator.modelset import ModelSet
from servingbench.emulator.process import EmulatorProcess
from servingbench.emulator.server import Options
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.swap.driver import SwapDriver, load_events

SWAPPED = [{"name": "a", "model": "scout", "precision": "bf16", "placement": "swapped",
            "memory_share": 0.9, "sleep_level": 1},
           {"name": "b", "model": "scout", "precision": "fp8", "placement": "swapped",
            "memory_share": 0.9, "sleep_level": 2}]
FAST = ["--time-scale", "0.0005", "--cold-start-s", "0.02", "--seed", "7"]


@pytest.fixture
def swapped(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps(SWAPPED))
    with EmulatorProcess([*FAST, "--models", str(path)]) as e:
        yield e


def _complete(base: str, model: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/completions", timeout=30,
                      json={"model": model, "prompt": "hello there", "max_tokens": 4})


def test_sleep_mode_endpoints_as_vllm_serves_them(swapped):
    base = swapped.base_url
    assert httpx.get(f"{base}/is_sleeping?model=a").json() == {"is_sleeping": False}
    assert httpx.get(f"{base}/is_sleeping?model=b").json() == {"is_sleeping": True}
    asleep = _complete(base, "b")
    assert asleep.status_code == 503 and "sleeping" in asleep.text
    assert _complete(base, "a").status_code == 200
    assert httpx.post(f"{base}/sleep?level=1&model=a", timeout=30).status_code == 200
    assert httpx.post(f"{base}/wake_up?model=b", timeout=30).status_code == 200
    assert httpx.get(f"{base}/is_sleeping?model=a").json() == {"is_sleeping": True}
    assert _complete(base, "b").json()["model"] == "b"
    assert _complete(base, "a").status_code == 503
    # a sleep-mode call must say which engine of the process it means
    assert httpx.post(f"{base}/sleep?level=1", timeout=30).status_code == 400
    assert httpx.post(f"{base}/sleep?level=3&model=b", timeout=30).status_code == 400
    status = httpx.get(f"{base}/servingbench/status").json()
    assert status["emulated"] is True
    assert [(s["what"], s["model"], s["level"]) for s in status["sleeps"]] == [
        ("sleep", "a", 1), ("wake_up", "b", 2)]
    assert all(s["seconds"] > 0 for s in status["sleeps"])
    assert {c["id"] for c in httpx.get(f"{base}/v1/models").json()["data"]} == {"a", "b"}


def test_resident_models_share_the_accelerator():
    cfg = specs.config("p5.48xlarge", "scout", "bf16")
    resident = [{**m, "placement": "resident", "memory_share": 0.45, "sleep_level": None}
                for m in SWAPPED]
    loop = asyncio.new_event_loop()
    try:
        ms = ModelSet(Options(cfg, fit_of(cfg)), loop, resident)
        a, b = ms.models["a"], ms.models["b"]
        assert b.app.engine.slowdown() == 1.0          # a idle: b has the accelerator alone
        a.app.engine.idle = False                        # a computing a step
        assert b.app.engine.slowdown() == 2.0
        assert a.app.engine.slowdown() == 1.0            # b idle
        a.asleep = True                                  # a sleeping model computes nothing
        assert b.app.engine.slowdown() == 1.0
        # each model's KV cache is what its share leaves after its weights
        assert a.app.opts.fit.capacity_gb == pytest.approx(0.45 * fit_of(cfg).capacity_gb)
        ms.close()
    finally:
        loop.close()


def test_a_model_that_does_not_fit_its_share_refuses_to_start(tmp_path, capsys):
    path = tmp_path / "models.json"
    path.write_text(json.dumps([{**SWAPPED[0], "memory_share": 0.3}, SWAPPED[1]]))
    assert emulator_main(["--models", str(path), "--port", "0"]) == 3
    assert "model 'a' does not fit its memory_share 0.3" in capsys.readouterr().err


def test_a_bad_models_file_exits_2(tmp_path, capsys):
    path = tmp_path / "models.json"
    path.write_text(json.dumps([{**SWAPPED[0], "placement": "pinned"}, SWAPPED[1]]))
    assert emulator_main(["--models", str(path)]) == 2
    assert "[0].placement: 'pinned' is not resident or swapped" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["a/b", "../x", "-a", "", 5, "a&model=b"])
def test_a_model_name_that_is_no_served_name_exits_2_naming_it(tmp_path, capsys, name):
    # the name becomes each model's ground-truth file name (a '/' ended in a traceback from
    # pathlib) and a `?model=` query value
    path = tmp_path / "models.json"
    path.write_text(json.dumps([{**SWAPPED[0], "name": name}, SWAPPED[1]]))
    code = emulator_main(["--models", str(path), "--port", "0", "--ground-truth",
                          str(tmp_path / "gt.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "[0].name:" in err and "not a served model name" in err
    assert "Traceback" not in err


def test_the_swap_driver_sleeps_the_awake_model_and_wakes_the_requested_one(swapped, tmp_path):
    events = Events(tmp_path, "run-1")
    load_events(events, httpx.get(f"{swapped.base_url}/servingbench/status").json())
    driver = SwapDriver(SWAPPED, {m["name"]: ("127.0.0.1", swapped.port) for m in SWAPPED},
                        events)
    port = driver.start()
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as client:  # one keep-alive connection
            for model in ("a", "a", "b", "b", "a"):
                with client.stream("POST", "/v1/completions",
                                   json={"model": model, "prompt": "hi", "max_tokens": 5,
                                         "stream": True}) as r:
                    assert r.status_code == 200
                    lines = [x for x in r.iter_lines() if x.startswith("data: {")]
                    assert lines and all(json.loads(x[6:])["model"] == model for x in lines)
        # requests for both at once: each waits for its model, none reaches a sleeping one
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda m: _complete(base, m).status_code, "abab" * 3))
        assert codes == [200] * 12
    finally:
        driver.stop()
    rows = pq.read_table(tmp_path / "events.parquet").to_pylist()
    kinds = [(r["kind"], r["subject"]) for r in rows]
    assert sorted(kinds[:2]) == [("model_load", "a"), ("model_load", "b")]
    assert kinds[2:6] == [("model_sleep", "a"), ("model_wake", "b"),
                          ("model_sleep", "b"), ("model_wake", "a")]
    assert [r["detail"] for r in rows[2:4]] == ["level 1", "level 2"]
    assert all(r["value"] > 0 for r in rows[2:])
    # a sleep and the wake-up after it alternate: never two models awake at once
    swaps = [k for k, _ in kinds[2:]]
    assert swaps == ["model_sleep", "model_wake"] * (len(swaps) // 2)
    assert driver.swaps == len(swaps) // 2
