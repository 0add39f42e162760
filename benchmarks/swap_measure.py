"""Swaps between two models of one llama-cpp-python server on this host, MEASURED:

    .venv/bin/python benchmarks/swap_measure.py [--rounds 3] [--burst 3] [--out DIR]

Gemma 3 270M at two quantizations (the GGUF files `servingbench engine prepare` caches in
~/.cache/servingbench/models) are two models of one server (llamacpp_models, llama-cpp-
python's `--config_file` with a `model_alias` each). Bursts of requests alternate between
them, one request at a time, so the first request of every burst after the first names the
model the server does not hold: the server frees the held one and loads the requested one
inside that request. Printed: each swap's seconds as the server timed them (free, load),
and the time to first token of the first request after a swap beside the warm ones (the
rest of each burst). With --out, the swaps are written as events.parquet (contract 2.6:
model_load / model_sleep, `value` the seconds, `at` the end) and the requests as
swap_requests.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from servingbench.resources.model_server.child import ChildProcess

MODELS_DIR = Path.home() / ".cache" / "servingbench" / "models"
# (model_alias, GGUF file): the same weights at two quantizations
DEFAULT_MODELS = (("gemma-q2k", "gemma-3-270m-q2_k.gguf"),
                  ("gemma-q8", "gemma-3-270m-q8_0.gguf"))
PROMPT = "Write one sentence about the sea."


@dataclass
class Sent:
    model: str
    burst: int
    index: int          # 0: the first request of its burst
    sent_ns: int
    first_token_ns: int | None
    finished_ns: int
    status: int

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_ns is None else (self.first_token_ns - self.sent_ns) / 1e9


def config_file(path: Path, models=DEFAULT_MODELS, models_dir: Path = MODELS_DIR,
                threads: int = 2, n_ctx: int = 512) -> Path:
    missing = [f for _, f in models if not (models_dir / f).is_file()]
    if missing:
        raise SystemExit(f"swap_measure: {', '.join(missing)} not in {models_dir}; run "
                         "`servingbench engine prepare` (make engine) first")
    cfg = {"host": "127.0.0.1", "port": 0,
           "models": [{"model": str(models_dir / f), "model_alias": alias, "n_ctx": n_ctx,
                       "n_threads": threads, "n_threads_batch": threads, "verbose": False}
                      for alias, f in models]}
    path.write_text(json.dumps(cfg, indent=1))
    return path


def start(config: Path, work: Path, timeout_s: float = 120.0) -> ChildProcess:
    """The server as a ChildProcess (it stops if this process dies); `.port` once ready."""
    log = open(work / "server.log", "w")  # noqa: SIM115 - kept open for the process's life
    child = ChildProcess([sys.executable, "-m",
                          "servingbench.resources.model_server.local.llamacpp_models",
                          "--config_file", str(config), "--port_file", str(work / "port")],
                         name="llama-cpp-python's server", stdout=log, stderr=subprocess.STDOUT,
                         port_file=work / "port", ready=_ready, ready_timeout_s=timeout_s,
                         poll_s=0.1, error=RuntimeError,
                         tail=lambda: (work / "server.log").read_text()[-2000:])
    child.start()
    return child


def _ready(port: int) -> bool:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/v1/models")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


def send(port: int, model: str, max_tokens: int = 8) -> tuple[int, int | None, int, int]:
    """One streamed completion: (sent_ns, first_token_ns, finished_ns, status)."""
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                       "stream": True, "temperature": 0}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    sent = time.time_ns()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                               "X-Request-ID": str(uuid.uuid4())})
    r = c.getresponse()
    first = None
    if r.status == 200:
        for line in r:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            if first is None and choice.get("text"):
                first = time.time_ns()
    else:
        r.read()
    c.close()
    return sent, first, time.time_ns(), r.status


def swaps(port: int) -> list[dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/servingbench/swaps")
    out = json.loads(c.getresponse().read())
    c.close()
    return out


def alternate(port: int, names: list[str], rounds: int, burst: int) -> list[Sent]:
    """Bursts alternating between the models, one request at a time; the first burst names
    the model the server loaded at start-up."""
    out = []
    for b in range(rounds * len(names)):
        model = names[b % len(names)]
        for i in range(burst):
            sent, first, fin, status = send(port, model)
            out.append(Sent(model, b, i, sent, first, fin, status))
    return out


def summarize(sent: list[Sent], swap_rows: list[dict]) -> dict:
    after = [s.ttft_s for s in sent if s.index == 0 and s.burst > 0 and s.ttft_s is not None]
    warm = [s.ttft_s for s in sent if s.index > 0 and s.ttft_s is not None]
    loads = [r["seconds"] for r in swap_rows if r["kind"] == "model_load"][1:]  # after start
    frees = [r["seconds"] for r in swap_rows if r["kind"] == "model_sleep"]
    med = (lambda xs: statistics.median(xs) if xs else None)  # noqa: E731
    return {"swaps": len(loads), "load_s_median": med(loads), "free_s_median": med(frees),
            "ttft_after_swap_s_median": med(after), "ttft_warm_s_median": med(warm),
            "requests": len(sent), "errors": sum(s.status != 200 for s in sent)}


def write_events(out: Path, run_id: str, swap_rows: list[dict], sent: list[Sent]) -> None:
    from servingbench.resources.model_server.fleet.events import Events

    out.mkdir(parents=True, exist_ok=True)
    ev = Events(out, run_id)
    for r in swap_rows:
        ev.add(r["kind"], r["model"], r["ended_ns"], r["seconds"],
               "llama-cpp-python frees the model" if r["kind"] == "model_sleep"
               else "loaded from its GGUF file")
    (out / "swap_requests.json").write_text(json.dumps([s.__dict__ for s in sent], indent=1))


def measure(rounds: int, burst: int, models=DEFAULT_MODELS, models_dir: Path = MODELS_DIR,
            out: Path | None = None) -> tuple[dict, list[Sent], list[dict]]:
    with tempfile.TemporaryDirectory(prefix="sb-swap-") as tmp:
        work = Path(tmp)
        server = start(config_file(work / "models.json", models, models_dir), work)
        try:
            sent = alternate(server.port, [a for a, _ in models], rounds, burst)
            rows = swaps(server.port)
        finally:
            server.stop(grace_s=10)
    if out is not None:
        write_events(out, f"swap-measure-{os.getpid()}", rows, sent)
    return summarize(sent, rows), sent, rows


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="swap_measure", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="bursts per model (default 3)")
    p.add_argument("--burst", type=int, default=3, help="requests per burst (default 3)")
    p.add_argument("--out", type=Path, default=None, help="write events.parquet here")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.burst < 2:
        print("swap_measure: --rounds must be >= 1 and --burst >= 2 (a warm request per "
              "burst)", file=sys.stderr)
        return 2
    summary, sent, rows = measure(a.rounds, a.burst, out=a.out)
    print("MEASURED on this host: llama-cpp-python, two models of one server, "
          f"{a.rounds} bursts each of {a.burst} requests, alternating")
    print(f"{'kind':<12} {'model':<10} {'seconds':>8}")
    for r in rows:
        print(f"{r['kind']:<12} {r['model']:<10} {r['seconds']:>8.3f}")
    print(f"{'model':<10} {'burst':>5} {'req':>4} {'ttft_s':>8}")
    for s in sent:
        print(f"{s.model:<10} {s.burst:>5} {s.index:>4} {_fmt(s.ttft_s):>8}"
              + ("  <- first after a swap" if s.index == 0 and s.burst > 0 else ""))
    print(f"swaps {summary['swaps']}: load median {_fmt(summary['load_s_median'])} s, "
          f"free median {_fmt(summary['free_s_median'])} s; TTFT median first after a swap "
          f"{_fmt(summary['ttft_after_swap_s_median'])} s vs warm "
          f"{_fmt(summary['ttft_warm_s_median'])} s; errors {summary['errors']}")
    return 0 if summary["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
