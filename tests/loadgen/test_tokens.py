"""Token accounting with and without the server's continuous usage."""

from __future__ import annotations

from servingbench.resources.loadgen import run_load

from tests.support.loadgen import config, rows


def _chunks(run_dir) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for c in sorted(rows(run_dir, "chunk_log"), key=lambda c: (c["request_id"], c["seq"])):
        out.setdefault(c["request_id"], []).append(c["tokens"])
    return out


def test_continuous_usage_gives_exact_tokens_per_bundled_chunk(server, tmp_path):
    cfg = config(server.base_url, output_tokens=10, headers={"X-Servingbench-Fault": "tokens_per_chunk=4"})
    run_load(cfg, tmp_path / "run", progress=False)
    chunks = _chunks(tmp_path / "run")
    for r in rows(tmp_path / "run"):
        assert (r["output_tokens_source"], r["output_tokens"], r["chunks"]) == ("usage", 10, 3)
        assert chunks[r["request_id"]] == [4, 4, 2]


def test_without_continuous_usage_counts_chunks(start_server, tmp_path):
    srv = start_server("--no-continuous-usage", itl_ms=1)
    cfg = config(srv.base_url, output_tokens=10, headers={"X-Servingbench-Fault": "tokens_per_chunk=4"})
    run_load(cfg, tmp_path / "run", progress=False)
    chunks = _chunks(tmp_path / "run")
    for r in rows(tmp_path / "run"):
        # one token per content chunk: lower resolution, and said so
        assert (r["output_tokens_source"], r["output_tokens"], r["chunks"]) == ("chunks", 3, 3)
        assert chunks[r["request_id"]] == [1, 1, 1]
        assert r["input_tokens"] == 16  # still from the final usage chunk


def test_without_any_usage(start_server, tmp_path):
    srv = start_server("--no-usage", itl_ms=1)
    run_load(config(srv.base_url, output_tokens=5), tmp_path / "run", progress=False)
    for r in rows(tmp_path / "run"):
        assert (r["status"], r["output_tokens_source"], r["output_tokens"], r["input_tokens"]) == \
            ("ok", "chunks", 5, None)


def test_falls_back_when_continuous_usage_is_rejected(start_server, tmp_path):
    srv = start_server("--reject-continuous", itl_ms=1)
    result = run_load(config(srv.base_url, output_tokens=4), tmp_path / "run", progress=False)
    assert {r["status"] for r in rows(tmp_path / "run")} == {"ok"}
    assert result.n_requests == 6
    from servingbench.resources.contract import manifest as mf
    assert mf.load(tmp_path / "run" / "manifest.json")["scenario"]["stream_options"] == {"include_usage": True}
