"""The fleet's pools on a PostgreSQL-backed Dagster instance, as deployed (deploy/values.yaml):
a PostgreSQL server of the test's own (a fresh cluster on a free port, stopped at the end)
holds the runs, the event log and the run queue; candidates sharing a pool take turns and
another pool's run goes beside them, exactly as on SQLite (test_fleet_pools.py)."""

from __future__ import annotations

import pytest

from tests.support.fleet import fleet_takes_turns, postgres_instance_yaml, postgres_server


@pytest.mark.slow
@pytest.mark.timeout(900)  # three full chains, two of them in turn, on a shared 2-core machine
def test_p5_runs_take_turns_on_postgres(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    with postgres_server() as db:
        (home / "dagster.yaml").write_text(postgres_instance_yaml(db))
        fleet_takes_turns(tmp_path, home, monkeypatch, capsys)
