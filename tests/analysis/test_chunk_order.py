"""chunk_gaps read in the chunk log's own order (a streaming pass) and, when the log is not
in request-then-seq order, built again by seq: the same gaps either way, and the fast way
taken for the logs this project writes."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis import chunks
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.analysis.rundir import open_run

from tests.support.runbuilder import RunBuilder, synthetic_run


def _run(tmp_path, name="run"):
    """Three requests of several chunks, a bundled one among them, after a warm-up."""
    b = RunBuilder()
    b.request("c=2", phase="warmup", sent=0, chunks=[(50, 1), (60, 1)], finished=60)
    b.request("c=2", sent=100, chunks=[(200, 1), (210, 1), (230, 2), (240, 1)], finished=240)
    b.request("c=2", sent=110, chunks=[(220, 1), (235, 3), (300, 1)], finished=300)
    b.request("c=2", sent=250, chunks=[(320, 1), (330, 1), (345, 1), (400, 1), (401, 1)],
              finished=401)
    return b.write(tmp_path / name, bill=False)


def _rewrite_chunks(run_dir, order) -> None:
    path = run_dir / "chunk_log.parquet"
    table = pq.read_table(path)
    pq.write_table(table.take(pa.array(order(table.num_rows))), path)


def _gaps(run_dir) -> tuple[str, list[tuple]]:
    with open_run(run_dir) as run:
        rows = run.con.execute("SELECT req_no, seq, tokens, outside, gap_ns, itl_s, step, ok "
                               "FROM chunk_gaps ORDER BY req_no, seq").fetchall()
        facts = run.con.execute("SELECT * FROM chunk_req ORDER BY req_no").fetchall()
        how = chunks.IN_ORDER if run.con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = 'chunk_gaps'").fetchone()[0] \
            else chunks.BY_SEQ
    return how, rows + facts


def test_a_log_in_request_order_is_read_in_one_pass(tmp_path):
    how, _ = _gaps(_run(tmp_path))
    assert how == chunks.IN_ORDER


@pytest.mark.parametrize("order", [
    pytest.param(lambda n: list(reversed(range(n))), id="reversed"),
    pytest.param(lambda n: np.random.default_rng(3).permutation(n).tolist(), id="shuffled"),
    # requests interleaved, each one's chunks still in seq order
    pytest.param(lambda n: list(range(0, n, 2)) + list(range(1, n, 2)), id="interleaved"),
])
def test_any_other_order_gives_the_same_gaps_and_metrics_by_seq(tmp_path, order):
    ordered = _run(tmp_path, "ordered")
    other = _run(tmp_path, "other")
    _rewrite_chunks(other, order)
    (how_a, a), (how_b, b) = _gaps(ordered), _gaps(other)
    assert (how_a, how_b) == (chunks.IN_ORDER, chunks.BY_SEQ)
    assert a == b
    ma, mb = analyze_run(ordered, write=False), analyze_run(other, write=False)
    assert ma.exit_code == mb.exit_code == 0, (ma.message, mb.message)
    assert ma.metrics.drop(["run_id"]).equals(mb.metrics.drop(["run_id"]))
    assert ma.gates == mb.gates


def test_a_chunk_after_a_missing_seq_takes_its_gap_from_the_chunk_before_it_by_seq(tmp_path):
    # seq 0, 1, 3: the window's lag pairs 3 with 1; the streaming pass pairs only seq - 1,
    # so the log is read again by seq, and the gap is 1's to 3's
    run_dir = _run(tmp_path)
    path = run_dir / "chunk_log.parquet"
    table = pq.read_table(path)
    seq = table.column("seq").to_pylist()
    rid = table.column("request_id").to_pylist()
    first = next(i for i in range(len(rid)) if rid[i] != rid[0])  # the first steady request
    seq = [s + 1 if i >= first + 2 and rid[i] == rid[first] else s for i, s in enumerate(seq)]
    pq.write_table(table.set_column(table.schema.get_field_index("seq"), "seq",
                                    pa.array(seq, table.schema.field("seq").type)), path)
    how, rows = _gaps(run_dir)
    assert how == chunks.BY_SEQ
    gaps = [r[4] for r in rows if len(r) == 8 and r[0] == 1]
    assert gaps == [None, 10_000_000, 20_000_000, 10_000_000]


def test_the_synthetic_night_run_is_read_in_one_pass(tmp_path):
    """The load generator, the merge of shards and the peers' imports write a request's chunks
    together in seq order; the benchmarks' synthetic runs do too, over several row groups."""
    run_dir = synthetic_run(tmp_path / "run", 3000, chunks=64, steps=(8,), batch=500)
    with open_run(run_dir) as run:
        views = {v for (v,) in run.con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        [(groups,)] = run.con.execute(
            "SELECT count(DISTINCT row_group_id) FROM parquet_metadata($p)",
            {"p": str(run_dir / "chunk_log.parquet")}).fetchall()
    assert "chunk_gaps" in views and groups > 1


def test_build_on_a_bare_connection_reports_how_it_read(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE steady AS SELECT 'a' AS request_id, 'c=1' AS step, 'ok' AS status, "
                "TIMESTAMPTZ '2026-01-01 00:00:00+00' AS sent_at, "
                "TIMESTAMPTZ '2026-01-01 00:00:01+00' AS finished_at, NULL::VARCHAR AS model")
    con.execute("CREATE TABLE chunks AS SELECT * FROM (VALUES "
                "('a', 1, TIMESTAMPTZ '2026-01-01 00:00:00.2+00', 1), "
                "('a', 0, TIMESTAMPTZ '2026-01-01 00:00:00.1+00', 1)) t(request_id, seq, \"at\", tokens)")
    assert chunks.build(con) == chunks.BY_SEQ
    assert con.execute("SELECT seq, gap_ns FROM chunk_gaps ORDER BY seq").fetchall() == [
        (0, None), (1, 100_000_000)]
