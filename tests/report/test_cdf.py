"""The CDF queries on a tiny hand-computed run (contract §3 ITL and TTFT definitions)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from servingbench.resources.contract.schemas import CHUNK_LOG, OPTIONAL_CHUNK_COLUMNS, REQUEST_LOG
from servingbench.resources.report import cdf
from servingbench.resources.report.rundata import RunData

from tests.support.runbuilder import S


def _requests(rows: list[dict]) -> pa.Table:
    full = []
    for r in rows:
        base = {f.name: None for f in REQUEST_LOG}
        base.update(run_id="r", load_mode="concurrency", target=1.0, output_tokens_source="usage")
        base.update(r)
        full.append(base)
    cols = {}
    for f in REQUEST_LOG:
        values = [r[f.name] for r in full]
        cols[f.name] = (pa.array(values, pa.int64()).cast(f.type)
                        if pa.types.is_timestamp(f.type) else pa.array(values, f.type))
    return pa.table(cols)


def _chunks(rows: list[tuple]) -> pa.Table:
    rid, seq, at, tok = zip(*rows, strict=True)
    return pa.Table.from_arrays(
        [pa.array(["r"] * len(rows)), pa.array(rid), pa.array(seq, pa.int64()),
         pa.array([a * S for a in at], pa.int64()).cast(CHUNK_LOG.field("at").type),
         pa.array(tok, pa.int64())],
        # a chunk log as written before the optional `kind` column: the CDFs read it as answers
        schema=pa.schema([f for f in CHUNK_LOG if f.name not in OPTIONAL_CHUNK_COLUMNS]))


def _run() -> RunData:
    # a: sent 100, chunks 110 (1 tok), 116 (1 tok), 126 (2 tok)  -> TTFT 10, ITL 6 x1, 5 x2
    # b: sent 200, chunks 203, 207 (1 tok)                         -> TTFT 3,  ITL 4 x1
    # w: a warm-up request, x: a failed one - neither counts
    reqs = _requests([
        dict(request_id="a", phase="steady", step="c=1", sent_at=100 * S,
             first_token_at=110 * S, status="ok"),
        dict(request_id="b", phase="steady", step="c=1", sent_at=200 * S,
             first_token_at=203 * S, status="ok"),
        dict(request_id="x", phase="steady", step="c=1", sent_at=300 * S,
             first_token_at=301 * S, status="timeout"),
        dict(request_id="w", phase="warmup", step="c=1", sent_at=1 * S,
             first_token_at=2 * S, status="ok"),
    ])
    chunks = _chunks([("a", 0, 110, 1), ("a", 1, 116, 1), ("a", 2, 126, 2),
                      ("b", 0, 203, 1), ("b", 1, 207, 1),
                      ("x", 0, 301, 1), ("x", 1, 350, 1), ("w", 0, 2, 1), ("w", 1, 90, 1)])
    return RunData(run_dir=None, manifest={}, gates=None, metrics=None, cost=None,
                   headline=None, requests=reqs, chunks=chunks)


def test_ttft_cdf_is_one_sample_per_ok_steady_request():
    x, y = cdf.ttft_cdf(_run())["c=1"]
    assert x.tolist() == [3.0, 10.0]
    assert y.tolist() == [0.5, 1.0]


def test_itl_cdf_is_per_token_and_token_weighted():
    x, y = cdf.itl_cdf(_run())["c=1"]
    # samples: 4 (w1), 5 (w2), 6 (w1) -> cumulative token shares 1/4, 3/4, 4/4
    assert x.tolist() == [4.0, 5.0, 6.0]
    assert np.allclose(y, [0.25, 0.75, 1.0])


def test_cdf_is_thinned_but_keeps_both_tails(monkeypatch):
    monkeypatch.setattr(cdf, "MAX_POINTS", 2)
    x, y = cdf.itl_cdf(_run())["c=1"]
    assert x.tolist() == [4.0, 6.0] and y.tolist() == [0.25, 1.0]
