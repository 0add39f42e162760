"""The peers side by side against one fixed-timing ground truth (docs/import.md).

Each tool runs the same closed loop (concurrency C, N requests, 64-token prompts, T output
tokens) against its own fresh emulator in `--fixed-timing TTFT:ITL` mode, which logs when
it wrote every token (the ground truth). Per tool, three sets of figures:

* the tool's own summary (AIPerf's profile_export_aiperf.json, guidellm's benchmarks.json);
* servingbench's analyzer on the tool's records, imported with `servingbench import`;
* the ground truth of that same run: the server's own times (TTFT = first token written −
  request arrived; ITL = gaps between token writes; throughput = tokens / (last write −
  first arrival)).

And servingbench's own load generator on the same setting, analyzed the same way. The
error is each figure against its run's truth. Client-side TTFT includes the loopback and
the client's own reading, so a few tenths of a millisecond over the truth is the floor.

    .venv/bin/python benchmarks/peers_side_by_side.py [--concurrency 4] [--requests 40]
        [--output-tokens 32] [--ttft-ms 50] [--itl-ms 10] [--only servingbench,aiperf,guidellm]

Needs `make peers`. Prints a markdown table; writes benchmarks/out/peers_side_by_side.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(ROOT)]

from benchstats import pct  # noqa: E402
from servingbench.emulator.process import EmulatorProcess  # noqa: E402
from servingbench.pipelines.cli import main as cli  # noqa: E402
from servingbench.resources.analysis.analyze import analyze_run  # noqa: E402

from tests.support import peers  # noqa: E402
from tests.support.emulator import FIXED_MODEL, fixed_timing_args  # noqa: E402

INPUT_TOKENS = 64


def truth_figures(truth_file: Path, ids: set[str] | None) -> dict:
    """TTFT p50, ITL p50 and output throughput from the server's own write times."""
    rows = [json.loads(x) for x in truth_file.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["chunks"] and (ids is None or r["request_id"] in ids)]
    ttft = [(r["chunks"][0][1] - r["arrival_ns"]) / 1e6 for r in rows]
    itl = []
    for r in rows:
        w = [c[1] for c in r["chunks"]]
        itl += [(b - a) / 1e6 for a, b in zip(w, w[1:], strict=False)]
    tokens = sum(sum(c[2] for c in r["chunks"]) for r in rows)
    span_s = (max(r["chunks"][-1][1] for r in rows) - min(r["arrival_ns"] for r in rows)) / 1e9
    return {"n": len(rows), "ttft_ms_p50": pct(ttft, 0.5), "itl_ms_p50": pct(itl, 0.5),
            "output_tok_s": tokens / span_s}


def analyzed(run_dir: Path) -> dict:
    result = analyze_run(run_dir)
    if result.exit_code != 0:
        raise RuntimeError(f"analyze {run_dir}: {result.message}")
    m = result.metrics.to_pylist()[0]
    return {"n": m["n_ok"], "ttft_ms_p50": m["ttft_s_p50"] * 1e3,
            "itl_ms_p50": m["itl_s_p50"] * 1e3, "output_tok_s": m["output_tok_s"]}


def steady_ids(run_dir: Path) -> set[str]:
    import pyarrow.parquet as pq

    return set(pq.read_table(run_dir / "steady_state_request_log.parquet",
                             columns=["request_id"])["request_id"].to_pylist())


def server(tmp: Path, a) -> tuple[EmulatorProcess, Path]:
    truth = tmp / f"truth-{time.monotonic_ns()}.jsonl"
    emu = EmulatorProcess(fixed_timing_args(a.ttft_ms, a.itl_ms, truth))
    emu.start()
    return emu, truth


def run_servingbench(tmp: Path, a) -> dict:
    emu, truth = server(tmp, a)
    out = tmp / "sb-run"
    try:
        rc = cli(["load", "--endpoint", emu.base_url, "--model", FIXED_MODEL, "--out", str(out),
                  "--concurrency", str(a.concurrency), "--requests", str(a.requests),
                  "--warmup-requests", "0", "--input-tokens", str(INPUT_TOKENS),
                  "--output-tokens", str(a.output_tokens), "--no-progress"])
    finally:
        emu.stop()
    if rc != 0:
        raise RuntimeError(f"servingbench load exited {rc}")
    return {"tool": "servingbench (own load generator)", "version": "this commit",
            "peer": None, "imported": analyzed(out), "truth": truth_figures(truth, steady_ids(out))}


def run_aiperf(tmp: Path, a) -> dict:
    py = peers.python("aiperf")
    if py is None:
        raise RuntimeError("aiperf is not installed (make peers)")
    tok = peers.tokenizer(py, tmp / "tok-aiperf")
    emu, truth = server(tmp, a)
    try:
        folder = peers.run_aiperf(py, emu.base_url, tmp / "aiperf", tok,
                                  concurrency=a.concurrency, requests=a.requests, warmup=0,
                                  input_tokens=INPUT_TOKENS, output_tokens=a.output_tokens,
                                  timeout=900)
    finally:
        emu.stop()
    s = json.loads((folder / "profile_export_aiperf.json").read_text())
    own = {"n": int(s["request_count"]["avg"]), "ttft_ms_p50": s["time_to_first_token"]["p50"],
           "itl_ms_p50": s["inter_token_latency"]["p50"],
           "output_tok_s": s["output_token_throughput"]["avg"]}
    out = tmp / "aiperf-imported"
    assert cli(["import", "aiperf", str(folder), "--out", str(out)]) == 0
    return {"tool": "AIPerf", "version": s["aiperf_version"], "peer": own,
            "imported": analyzed(out), "truth": truth_figures(truth, steady_ids(out))}


def run_guidellm(tmp: Path, a) -> dict:
    py = peers.python("guidellm")
    if py is None:
        raise RuntimeError("guidellm is not installed (make peers)")
    tok = peers.tokenizer(py, tmp / "tok-guidellm", byte_level=True)
    emu, truth = server(tmp, a)
    try:
        report = peers.run_guidellm(py, emu.base_url, tmp / "guidellm", tok,
                                    concurrency=a.concurrency, requests=a.requests,
                                    input_tokens=INPUT_TOKENS, output_tokens=a.output_tokens,
                                    timeout=900)
    finally:
        emu.stop()
    doc = json.loads(report.read_text())
    m = doc["benchmarks"][0]["metrics"]
    own = {"n": m["request_totals"]["successful"],
           "ttft_ms_p50": m["time_to_first_token_ms"]["successful"]["median"],
           "itl_ms_p50": m["inter_token_latency_ms"]["successful"]["median"],
           "output_tok_s": m["output_tokens_per_second"]["successful"]["mean"]}
    out = tmp / "guidellm-imported"
    assert cli(["import", "guidellm", str(report), "--out", str(out)]) == 0
    # guidellm sends no request id of its own: its requests are every one the server saw
    return {"tool": "guidellm", "version": doc["metadata"]["guidellm_version"], "peer": own,
            "imported": analyzed(out), "truth": truth_figures(truth, None)}


def run_inference_perf(tmp: Path, a) -> dict:
    py = peers.python("inference-perf")
    if py is None:
        raise RuntimeError("inference-perf is not installed (make peers; it needs Python >= 3.12)")
    tok = peers.tokenizer(py, tmp / "tok-inference-perf")
    emu, truth = server(tmp, a)
    try:
        reports = peers.run_inference_perf(py, emu.base_url, tmp / "inference-perf", tok,
                                           concurrency=a.concurrency, requests=a.requests,
                                           input_tokens=INPUT_TOKENS,
                                           output_tokens=a.output_tokens, timeout=900)
    finally:
        emu.stop()
    ok = json.loads((reports / "stage_0_lifecycle_metrics.json").read_text())["successes"]
    own = {"n": ok["count"], "ttft_ms_p50": ok["latency"]["time_to_first_token"]["median"] * 1e3,
           "itl_ms_p50": ok["latency"]["inter_token_latency"]["median"] * 1e3,
           "output_tok_s": ok["throughput"]["output_tokens_per_sec"]}
    out = tmp / "inference-perf-imported"
    assert cli(["import", "inference-perf", str(reports), "--out", str(out)]) == 0
    # it sends no request id either: every request the server saw is the run's
    return {"tool": "inference-perf", "version": peers.VERSIONS["inference-perf"] + " (installed)",
            "peer": own, "imported": analyzed(out), "truth": truth_figures(truth, None)}


RUNNERS = {"servingbench": run_servingbench, "aiperf": run_aiperf, "guidellm": run_guidellm,
           "inference-perf": run_inference_perf}


def err(x: float | None, truth: float) -> str:
    return "—" if x is None else f"{(x - truth) / truth:+.1%}"


def table(results: list[dict]) -> str:
    head = ("| tool (version) | figures from | TTFT p50 ms | err | ITL p50 ms | err | "
            "output tok/s | err |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in results:
        t = r["truth"]
        rows = [("ground truth (server write times)", t)]
        if r["peer"]:
            rows.append((f"{r['tool']}'s own summary", r["peer"]))
        rows.append(("servingbench analyze on its records" if r["peer"] else
                     "servingbench analyze", r["imported"]))
        for label, f in rows:
            lines.append(f"| {r['tool']} {r['version']} | {label} | {f['ttft_ms_p50']:.2f} | "
                         f"{err(f['ttft_ms_p50'], t['ttft_ms_p50']) if f is not t else ''} | "
                         f"{f['itl_ms_p50']:.2f} | "
                         f"{err(f['itl_ms_p50'], t['itl_ms_p50']) if f is not t else ''} | "
                         f"{f['output_tok_s']:.1f} | "
                         f"{err(f['output_tok_s'], t['output_tok_s']) if f is not t else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--only", default=",".join(RUNNERS))
    a = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="peers-bench-") as tmp:
        for name in a.only.split(","):
            try:
                results.append(RUNNERS[name](Path(tmp), a))
            except (RuntimeError, AssertionError, subprocess.SubprocessError) as exc:
                print(f"{name}: skipped ({str(exc)[:300]})", file=sys.stderr)
    print(f"closed loop c={a.concurrency}, {a.requests} requests, {INPUT_TOKENS}-token prompts, "
          f"{a.output_tokens} output tokens; server TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms\n")
    print(table(results))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "peers_side_by_side.json").write_text(json.dumps(
        {"args": vars(a), "results": results}, indent=2))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
