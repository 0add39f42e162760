"""inference-perf's report folder, with `report.request_lifecycle.per_request: true` in its
config (inference-perf 0.7; the file names are its own):

* `per_request_lifecycle_metrics.json`: a list, one entry per request, with `start_time`,
  `end_time` and, under `info.response_metrics`, the time of every streamed chunk
  (`chunk_times`) and of every output token (`output_token_times`), the client's token
  count (`output_tokens`) and the server's usage (`server_usage`); `error` when it failed.
  Every time is the client's `time.perf_counter()` in seconds: no wall clock.
* `inference-perf.partial.stage_<n>.yaml`: each stage's wall-clock `run.time.start` (to
  the millisecond) and its results, which place the stages, and so the run, in UTC.
* `config.yaml`: the load (stages at a rate, or at a concurrency with a request count).

The run is placed so that its first request starts at stage 0's wall-clock start (or at
`--anchor`); requests fall into stages by their start. The chunk log is the chunk times it
kept (`recorded`).
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path

from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.contract.yamltext import short
from servingbench.resources.peers import Peer
from servingbench.resources.peers.records import (
    NUM,
    PeerFileError,
    PeerRequest,
    PeerRun,
    count,
    dig,
    need,
    numbers,
    read_json,
    read_yaml,
    seconds_ns,
)

PER_REQUEST = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
_STAGE = re.compile(r"inference-perf\.partial\.stage_(\d+)\.yaml")
# the schema of its stage reports that this reader was written against
STAGE_SCHEMA = "0.2.1"


def _json(path: Path):
    return read_json(path, "missing (inference-perf writes it with "
                           "report.request_lifecycle.per_request: true)")


def _yaml(path: Path) -> dict:
    return read_yaml(path, "missing (inference-perf writes it with every run)")


def _stages(folder: Path, config: dict) -> list[dict]:
    """Per stage (in order): its step, and its wall-clock start in ns."""
    load = need(config, "load", dict, "config", folder / CONFIG)
    kind = need(load, "type", str, "config.load", folder / CONFIG)
    specs = need(load, "stages", list, "config.load", folder / CONFIG)
    files = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if (m := _STAGE.fullmatch(p.name)))
    if not files:
        raise PeerFileError(f"{folder}: no inference-perf.partial.stage_<n>.yaml (the stage "
                            "reports place the run on the wall clock)")
    out = []
    for n, path in files:
        doc = _yaml(path)
        schema = str(doc.get("version"))
        if schema != STAGE_SCHEMA:
            raise PeerFileError(f"{path}: version: {short(schema)}, this reader knows inference-perf's "
                                f"stage report {STAGE_SCHEMA} (inference-perf 0.7)")
        run = need(doc, "run", dict, "stage", path)
        times = need(run, "time", dict, "stage.run", path)
        start = need(times, "start", str, "stage.run.time", path)
        try:
            start_ns = parse_ts(start)
        except ValueError:
            raise PeerFileError(f"{path}: stage.run.time.start: {short(repr(start))} is not a UTC "
                                "instant") from None
        if n >= len(specs):
            raise PeerFileError(f"{path}: stage {n} is not in {CONFIG} (files of two runs?)")
        spec = specs[n]
        where = f"config.load.stages[{n}]"
        if kind == "concurrent":
            c = need(spec, "concurrency_level", int, where, folder / CONFIG)
            step = (f"c={c}", "concurrency", float(c))
        else:
            rate = need(spec, "rate", NUM, where, folder / CONFIG)
            step = (f"rate={rate:g}", "rate", float(rate))
        out.append({"n": n, "step": step, "start_ns": start_ns})
    return out


def _figures(folder: Path, stages: list[dict]) -> dict[str, dict[str, float]]:
    """inference-perf's own per-stage figures (stage_<n>_lifecycle_metrics.json)."""
    out = {}
    for s in stages:
        path = folder / f"stage_{s['n']}_lifecycle_metrics.json"
        if not path.exists():
            continue
        doc = _json(path)
        where = "stage"
        fig = {}
        ok = dig(doc, ("successes", "count"), int, where, path)
        if ok is not None:
            fig["ok"] = float(ok)
            failed = dig(doc, ("failures", "count"), int, where, path)
            if failed is not None:
                fig["requests"] = float(ok + failed)
        ttft = dig(doc, ("successes", "latency", "time_to_first_token", "mean"), NUM, where, path)
        if ttft is not None:
            fig["ttft_ms_mean"] = ttft * 1e3
        total = dig(doc, ("successes", "output_tokens", "total"), NUM, where, path)
        if total is not None:
            fig["output_tokens"] = float(total)
        out[s["step"][0]] = fig
    return out


def _request(entry, i: int, path: Path) -> tuple[float, PeerRequest, list[float]]:
    where = f"requests[{i}]"
    start = need(entry, "start_time", NUM, where, path)
    end = need(entry, "end_time", NUM, where, path)
    info = need(entry, "info", dict, where, path, nullable=True) or {}
    iwhere = f"{where}.info"
    rwhere = f"{iwhere}.response_metrics"
    resp = dig(info, ("response_metrics",), dict, iwhere, path, default={})
    times = numbers(dig(resp, ("chunk_times",), list, rwhere, path, default=[]),
                    f"{rwhere}.chunk_times", path)
    r = PeerRequest(step="", load_mode="", target=None, request_id=None)
    prompt = dig(resp, ("server_usage", "prompt_tokens"), int, rwhere, path)
    r.input_tokens = prompt if prompt is not None else dig(
        info, ("request_metrics", "text", "input_tokens"), int, iwhere, path)
    r.cached_tokens = dig(resp, ("server_usage", "prompt_tokens_details", "cached_tokens"), int,
                          rwhere, path)
    error = entry.get("error")
    if error:
        r.status = "http_error"
        r.error = short(error.get("error_msg") if isinstance(error, dict) else error, 200)
        return start, r, []
    out_usage = dig(resp, ("server_usage", "completion_tokens"), int, rwhere, path)
    r.output_tokens = out_usage if out_usage is not None else need(
        resp, "output_tokens", int, rwhere, path)
    return start, r, [start, end, *times]


def read(path: Path, anchor_ns: int | None = None) -> PeerRun:
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    per_request = folder / PER_REQUEST
    entries = _json(per_request)
    if not isinstance(entries, list):
        raise PeerFileError(f"{per_request}: expected a list of requests")
    count(entries, per_request, "requests")
    config = _yaml(folder / CONFIG)
    stages = _stages(folder, config)
    parsed = [_request(e, i, per_request) for i, e in enumerate(entries)]
    if not parsed:
        raise PeerFileError(f"{per_request}: no requests in it")
    first_perf = min(start for start, _, _ in parsed)
    zero = (anchor_ns if anchor_ns is not None else stages[0]["start_ns"]) - seconds_ns(first_perf)
    requests = []
    for i, (start, r, times) in enumerate(parsed):
        sent_ns = zero + seconds_ns(start)
        stage = max((s for s in stages if s["start_ns"] <= sent_ns + 10_000_000),
                    key=lambda s: s["start_ns"], default=stages[0])
        r.step, r.load_mode, r.target = stage["step"]
        r.request_id = f"stage{stage['n']}-{i}"
        r.sent_ns = sent_ns
        if times:
            _, end, *chunks = times
            r.finished_ns = zero + seconds_ns(end)
            r.chunk_ns = array("q", (zero + seconds_ns(t) for t in chunks))
            if r.chunk_ns:
                r.first_token_ns, r.last_token_ns = r.chunk_ns[0], r.chunk_ns[-1]
            else:
                r.status, r.error = "protocol_error", "inference-perf recorded no chunk"
        else:
            end = need(entries[i], "end_time", NUM, f"requests[{i}]", per_request)
            r.finished_ns = zero + seconds_ns(end)
        requests.append(r)
    notes = [
        "inference-perf keeps perf_counter times only: the run is placed so that its first "
        "request starts at stage 0's run.time.start (to the millisecond)"
        if anchor_ns is None else "placed by --anchor: the first request's send instant",
        "inference-perf sends no request id: ids are <stage>-<index in its file>",
        "no scheduled time per request in its file: scheduled_at is null",
        "output_tokens: the server's usage.completion_tokens where it came, else "
        "inference-perf's own count",
        f"inference-perf writes no version of its own into its reports (its stage report "
        f"schema is {STAGE_SCHEMA})",
    ]
    cfg = folder / CONFIG
    scen = {"input_tokens": dig(config, ("data", "input_distribution", "mean"), NUM, "config", cfg),
            "output_tokens": dig(config, ("data", "output_distribution", "mean"), NUM, "config",
                                 cfg),
            "dataset": dig(config, ("data", "type"), str, "config", cfg)}
    return PeerRun(peer="inference-perf", peer_version=None, files=[per_request, folder / CONFIG],
                   requests=requests, chunk_times="recorded", output_tokens="usage",
                   model=dig(config, ("server", "model_name"), str, "config", cfg), scenario=scen,
                   figures=_figures(folder, stages), notes=notes)


PLUGIN = Peer("inference-perf", read, marker=PER_REQUEST, result_is_folder=True,
              relative_clock=True)
