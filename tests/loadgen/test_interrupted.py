"""Which cut requests a spot interruption cut (resources/loadgen/interrupted.py): a request
that died at or after a notice for the node of its replica (read from the run's
events.parquet, as it changes), and none other; with the replica unknown, one that died in
the window of any notice; the flag that resends them."""

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
    assert not Notices(tmp_path / "elsewhere").cut("r0", T + 5)  # no events file
    assert not Notices(None).cut("r0", T + 5)


def test_with_the_replica_unknown_the_window_of_any_notice_counts(tmp_path):
    events(tmp_path, [(T, "interruption_notice", "ip-10-0-1-5", None),
                      (T + 120 * 10**9, "interruption", "ip-10-0-1-5", None)])
    notices = Notices(tmp_path)
    assert not notices.cut(None, T - 1)
    assert notices.cut(None, T) and notices.cut(None, T + 150 * 10**9)  # the node's 30 s after
    assert not notices.cut(None, T + 151 * 10**9)
    assert not notices.cut("pod-a", T + 5)            # a replica known but on no noticed node


def test_the_flag_asks_for_resends(tmp_path):
    base = ["--endpoint", "http://127.0.0.1:1", "--model", "m", "--out", str(tmp_path / "o")]
    assert not config_from_args(parser().parse_args(base)).retry_interrupted
    assert config_from_args(parser().parse_args([*base, "--retry-interrupted"])).retry_interrupted
