"""The swap driver (resources/model_server/swap/driver.py) keeps every wait to a deadline: a
model whose engine never answers `/wake_up` (the hostile server, `--sleep-mode silence`, a
real process on 127.0.0.1) costs the request that asked for it an error within the wake
bound, and the model that was awake (a real emulator) serves again; requests whose clients
gave up while they waited are dropped before anything is sent for them, so no swap happens
that no recorded request owns. Before, a hung `/wake_up` froze every swapped model for the
rest of the run, the awake one included."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow.parquet as pq
import pytest
from servingbench.emulator.process import EmulatorProcess
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.swap.driver import Bounds, SwapDriver

from tests.support.hostile import HostileProcess

MODELS = [{"name": "a", "model": "scout", "precision": "bf16", "placement": "swapped",
           "memory_share": 0.9, "sleep_level": 1},
          {"name": "b", "model": "scout", "precision": "fp8", "placement": "swapped",
           "memory_share": 0.9, "sleep_level": 1}]
FAST = ["--time-scale", "0.0005", "--cold-start-s", "0.02", "--seed", "7"]


@pytest.fixture
def node(tmp_path):
    """(emulator serving `a` (and `b`), hostile server standing in for `b`'s engine)."""
    path = tmp_path / "models.json"
    path.write_text(json.dumps(MODELS))
    hostile = HostileProcess(tmp_path, "--sleep-mode", "silence")
    try:
        with EmulatorProcess([*FAST, "--models", str(path)]) as emu:
            yield emu, hostile
    finally:
        hostile.stop()


def _driver(tmp_path, emu, hostile, wake_s: float) -> SwapDriver:
    bounds = Bounds(sleep_s=10, wake_s=wake_s, drain_s=10, status_s=1, connect_s=5, read_s=30)
    driver = SwapDriver(MODELS, {"a": ("127.0.0.1", emu.port), "b": ("127.0.0.1", hostile.port)},
                        Events(tmp_path, "run-1"), bounds=bounds)
    driver.start()
    return driver


def _post(port: int, model: str, timeout: float = 30) -> httpx.Response | str:
    try:
        return httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=timeout,
                          json={"model": model, "prompt": "hi there", "max_tokens": 4})
    except httpx.TimeoutException:
        return "gave up"


def _until_waking_b(hostile: HostileProcess) -> None:
    """Until the driver's `/wake_up` for `b` reached the hung engine: the swap is under way
    (a wait on the driver's own progress, not a guess at how long it takes)."""
    deadline = time.monotonic() + 30
    while "/wake_up?model=b" not in hostile.calls():
        assert time.monotonic() < deadline, "the driver never asked b's engine to wake"
        time.sleep(0.02)


def _events(tmp_path) -> list[tuple[str, str]]:
    path = tmp_path / "events.parquet"
    return [(r["kind"], r["subject"]) for r in pq.read_table(path).to_pylist()] \
        if path.exists() else []


@pytest.mark.timeout(90)
def test_a_hung_wake_up_errors_within_its_bound_and_the_awake_model_keeps_serving(node,
                                                                                  tmp_path):
    emu, hostile = node
    wake_s = 1.0
    driver = _driver(tmp_path, emu, hostile, wake_s)
    try:
        assert driver.awake == "a"  # `b`'s /is_sleeping never answered: taken as asleep
        assert _post(driver.port, "a").status_code == 200
        with ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            b = pool.submit(_post, driver.port, "b")
            _until_waking_b(hostile)  # `a`'s request arrives while `b` is being woken
            a = pool.submit(_post, driver.port, "a")
            b_answer, b_after = b.result(), time.monotonic() - started
            a_answer = a.result()
        assert b_answer.status_code == 504
        assert "POST /wake_up?model=b for model b" in b_answer.json()["error"]["message"]
        assert f"no complete answer within {wake_s:g} s" in b_answer.json()["error"]["message"]
        assert b_after < wake_s + 15  # the bound, not the engine, ended the wait
        assert a_answer.status_code == 200 and a_answer.json()["model"] == "a"
        assert _post(driver.port, "a").status_code == 200
    finally:
        driver.stop()
    assert hostile.calls().count("/wake_up?model=b") == 1
    assert _events(tmp_path) == [("model_sleep", "a"), ("model_wake", "a")]


@pytest.mark.timeout(90)
def test_requests_whose_clients_gave_up_are_not_forwarded(node, tmp_path):
    emu, hostile = node
    # a wake bound far longer than the quitters wait (1 s), so they give up while it runs
    driver = _driver(tmp_path, emu, hostile, wake_s=10.0)
    try:
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(_post, driver.port, "b")    # waits for the hung wake-up
            _until_waking_b(hostile)
            # two more wait behind it and give up (the load generator's first-token timeout)
            quitters = [pool.submit(_post, driver.port, m, 1.0) for m in ("b", "a")]
            assert [q.result() for q in quitters] == ["gave up", "gave up"]
            assert first.result().status_code == 504
        deadline = time.monotonic() + 10
        while driver.dropped < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert driver.dropped == 2
        # nothing was sent for them: no second wake-up of `b`, no wake-up of `a`
        assert hostile.calls().count("/wake_up?model=b") == 1
        assert _events(tmp_path) == [("model_sleep", "a")]
        assert driver.awake is None
        assert _post(driver.port, "a").status_code == 200  # a request that waits is served
    finally:
        driver.stop()
    assert _events(tmp_path) == [("model_sleep", "a"), ("model_wake", "a")]
