"""Which cut requests a spot interruption cut (resources/loadgen/interrupted.py): a request
that died at or after a notice for the node of its replica (read from the run's
events.parquet, as it changes), and none other; the flag that resends them."""

from __future__ import annotations

import pyarrow as pa
from servingbench.pipelines.cli.load import config_from_args, parser
from servingbench.resources.contract.schemas import EVENTS, write_parquet
from servingbench.resources.loadgen.interrupted import Notices

T = 1_800_000_000 * 10**9


def events(run_dir, rows):
    write_parquet(pa.Table.from_pylist(
        [{"run_id": "r", "at": at, "kind": kind, "subject": subject, "value": None,
          "detail": detail} for at, kind, subject, detail in rows], schema=EVENTS),
        run_dir / "events.parquet")


def test_a_disconnect_after_its_nodes_notice_is_a_cut(tmp_path):
    events(tmp_path, [(T - 10, "replica_requested", "r0", "node-r0"),
                      (T - 10, "replica_requested", "r1", "node-r1")])
    notices = Notices(tmp_path)
    assert not notices.cut("r0", T + 5)               # no notice yet
    events(tmp_path, [(T - 10, "replica_requested", "r0", "node-r0"),
                      (T - 10, "replica_requested", "r1", "node-r1"),
                      (T, "interruption_notice", "node-r0", None)])
    assert notices.cut("r0", T) and notices.cut("r0", T + 5)   # read again: it changed
    assert not notices.cut("r0", T - 1)               # died before the notice
    assert not notices.cut("r1", T + 5)               # another node
    assert not notices.cut(None, T + 5)               # replica unknown
    assert not Notices(tmp_path / "elsewhere").cut("r0", T + 5)  # no events file
    assert not Notices(None).cut("r0", T + 5)


def test_the_flag_asks_for_resends(tmp_path):
    base = ["--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "o")]
    assert not config_from_args(parser().parse_args(base)).retry_interrupted
    assert config_from_args(parser().parse_args([*base, "--retry-interrupted"])).retry_interrupted
