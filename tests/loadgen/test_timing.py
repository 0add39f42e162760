"""On a fixed-timing server (TTFT 20 ms, ITL 5 ms, absolute deadlines, logged write
times) the recorded times land where the server's ground truth says, within generous
bounds (the machine is shared and noisy: these are sanity bounds, not benchmarks)."""

from __future__ import annotations

import statistics

import pytest
from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, ns, rows

# measured latencies against the server's ground truth: make test's serial pass
pytestmark = pytest.mark.serial

MS = 1_000_000


@pytest.mark.parametrize("per_chunk", [1, 4])
def test_ttft_and_itl_match_the_server_ground_truth(start_server, tmp_path, per_chunk):
    srv = start_server(ttft_ms=20, itl_ms=5)
    cfg = config(srv.base_url, concurrency=[4], requests_per_step=8, output_tokens=24,
                 headers={"X-Servingbench-Fault": f"tokens_per_chunk={per_chunk}"})
    run_load(cfg, tmp_path / "run", progress=False)
    truth = srv.truth()
    chunks: dict[str, list[dict]] = {}
    for c in sorted(rows(tmp_path / "run", "chunk_log"), key=lambda c: c["seq"]):
        chunks.setdefault(c["request_id"], []).append(c)
    per_token_itl, server_itl = [], []
    for r in rows(tmp_path / "run"):
        t = truth[r["request_id"]]
        ttft = ns(r["first_token_at"]) - ns(r["sent_at"])
        assert 20 * MS <= ttft <= 500 * MS
        # the client saw the first token no earlier than the server was due to write it and
        # not long after it wrote it (the server stamps after its write returns: when that
        # write wakes the client first, the stamp can land after the client's)
        due, written = t["chunks"][0][0], t["chunks"][0][1]
        assert ns(r["first_token_at"]) >= due - 2 * MS
        assert ns(r["first_token_at"]) - written <= 300 * MS
        mine = chunks[r["request_id"]]
        assert [c["tokens"] for c in mine] == [k for *_, k in t["chunks"]]  # exact token split
        for prev, cur in zip(mine, mine[1:], strict=False):
            per_token_itl.append((ns(cur["at"]) - ns(prev["at"])) / cur["tokens"])
        for prev, cur in zip(t["chunks"], t["chunks"][1:], strict=False):
            server_itl.append((cur[1] - prev[1]) / cur[2])
        assert r["output_tokens"] == 24 and sum(c["tokens"] for c in mine) == 24
    # the gaps the client measured are the gaps the server wrote (a busy machine can make
    # the server late, and then both see it), and those are near the configured ITL
    assert statistics.median(per_token_itl) == pytest.approx(statistics.median(server_itl),
                                                             abs=1.5 * MS)
    assert statistics.median(server_itl) == pytest.approx(5 * MS, abs=2.5 * MS)
