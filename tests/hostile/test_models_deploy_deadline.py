"""The eks several-models deployment (kube/models_deploy.py) waits for each model's `/health`
and puts a swapped model to sleep through the bounded control client: against the hostile
server (a real process on 127.0.0.1) answering them with `100 Continue` every 0.3 s, or not
at all, each wait ends at its deadline with a RolloutError. With a plain httpx client (a
per-read timeout of the rollout timeout, 3600 s) a 1 s wait was still running after 6 s."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
import pytest
from servingbench.resources.model_server.fleet.events import Events
from servingbench.resources.model_server.kube import models_deploy
from servingbench.resources.model_server.kube.client import RolloutError

from tests.support.hostile import HostileProcess


@dataclass
class Server:
    """What models_deploy asks of the KubeModelServer: its rollout timeout, poll and clock."""

    timeout_s: float = 1.0
    poll_s: float = 0.1
    clock: object = field(default=time.time_ns)


@pytest.fixture(params=["continue_loop", "silence"])
def hostile(request, tmp_path):
    h = HostileProcess(tmp_path, "--sleep-mode", request.param)
    yield h
    h.stop()


@pytest.mark.timeout(60)
def test_waiting_for_health_ends_at_the_rollout_timeout(hostile):
    server = Server(timeout_s=1.0)
    started = time.monotonic()
    with httpx.Client(timeout=3600, trust_env=False) as http, \
            pytest.raises(RolloutError, match=r"/health not reachable within 1s"):
        models_deploy._wait(http, server, f"{hostile.base_url}/health")
    assert time.monotonic() - started < 1.0 + 10  # the deadline ended it, not the server
    assert "/health" in hostile.calls()


@pytest.mark.timeout(60)
def test_putting_a_model_to_sleep_ends_at_its_deadline(hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(models_deploy, "SLEEP_DEADLINE_S", 1.0)
    events = Events(tmp_path, "run-1")
    model = {"name": "m-one", "sleep_level": 2}
    with httpx.Client(timeout=3600, trust_env=False) as http, \
            pytest.raises(RolloutError, match=r"model m-one: POST /sleep\?level=2: .*no complete "
                                              r"answer within 1 s"):
        models_deploy._sleep(http, Server(), events, model, ("127.0.0.1", hostile.port))
    assert hostile.calls() == ["/sleep?level=2"]
    assert events.rows == []  # no sleep is recorded that did not happen
