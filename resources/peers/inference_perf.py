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

import json
import re
from pathlib import Path

import yaml
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.peers.records import (
    NUM,
    PeerFileError,
    PeerRequest,
    PeerRun,
    need,
    seconds_ns,
)

PER_REQUEST = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
_STAGE = re.compile(r"inference-perf\.partial\.stage_(\d+)\.yaml")
# the schema of its stage reports that this reader was written against
STAGE_SCHEMA = "0.2.1"


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PeerFileError(f"{path}: missing (inference-perf writes it with "
                            "report.request_lifecycle.per_request: true)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PeerFileError(f"{path}: unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise PeerFileError(f"{path}: not JSON, or cut short (line {exc.lineno}: {exc.msg})") from None


def _yaml(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PeerFileError(f"{path}: missing (inference-perf writes it with every run)") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PeerFileError(f"{path}: not YAML, or cut short ({str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a mapping")
    return doc


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
            raise PeerFileError(f"{path}: version: {schema}, this reader knows inference-perf's "
                                f"stage report {STAGE_SCHEMA} (inference-perf 0.7)")
        run = need(doc, "run", dict, "stage", path)
        times = need(run, "time", dict, "stage.run", path)
        start = need(times, "start", str, "stage.run.time", path)
        try:
            start_ns = parse_ts(start)
        except ValueError:
            raise PeerFileError(f"{path}: stage.run.time.start: {start!r} is not a UTC "
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
        ok = (doc.get("successes") or {}) if isinstance(doc, dict) else {}
        fig = {}
        if isinstance(ok.get("count"), int):
            fig["ok"] = float(ok["count"])
            failed = (doc.get("failures") or {}).get("count")
            if isinstance(failed, int):
                fig["requests"] = float(ok["count"] + failed)
        ttft = ((ok.get("latency") or {}).get("time_to_first_token") or {}).get("mean")
        if isinstance(ttft, NUM):
            fig["ttft_ms_mean"] = ttft * 1e3
        total = (ok.get("output_tokens") or {}).get("total")
        if isinstance(total, NUM):
            fig["output_tokens"] = float(total)
        out[s["step"][0]] = fig
    return out


def _request(entry, i: int, path: Path) -> tuple[float, PeerRequest, list[float]]:
    where = f"requests[{i}]"
    start = need(entry, "start_time", NUM, where, path)
    end = need(entry, "end_time", NUM, where, path)
    info = need(entry, "info", dict, where, path, nullable=True) or {}
    resp = info.get("response_metrics") or {}
    times = resp.get("chunk_times") or []
    if not isinstance(times, list) or not all(isinstance(t, NUM) for t in times):
        raise PeerFileError(f"{path}: {where}.info.response_metrics.chunk_times: expected numbers")
    r = PeerRequest(step="", load_mode="", target=None, request_id=None)
    req_metrics = (info.get("request_metrics") or {}).get("text") or {}
    usage = resp.get("server_usage") or {}
    r.input_tokens = usage.get("prompt_tokens", req_metrics.get("input_tokens"))
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    r.cached_tokens = cached if isinstance(cached, int) else None
    error = entry.get("error")
    if error:
        r.status = "http_error"
        r.error = str(error.get("error_msg") if isinstance(error, dict) else error)[:200]
        return start, r, []
    out_usage = usage.get("completion_tokens")
    r.output_tokens = out_usage if isinstance(out_usage, int) else need(
        resp, "output_tokens", int, f"{where}.info.response_metrics", path)
    return start, r, [start, end, *times]


def read(path: Path, anchor_ns: int | None = None) -> PeerRun:
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    per_request = folder / PER_REQUEST
    entries = _json(per_request)
    if not isinstance(entries, list):
        raise PeerFileError(f"{per_request}: expected a list of requests")
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
            r.chunk_ns = [zero + seconds_ns(t) for t in chunks]
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
    server = config.get("server") or {}
    data = config.get("data") or {}
    scen = {"input_tokens": (data.get("input_distribution") or {}).get("mean"),
            "output_tokens": (data.get("output_distribution") or {}).get("mean"),
            "dataset": data.get("type")}
    return PeerRun(peer="inference-perf", peer_version=None, files=[per_request, folder / CONFIG],
                   requests=requests, chunk_times="recorded", output_tokens="usage",
                   model=server.get("model_name"), scenario=scen,
                   figures=_figures(folder, stages), notes=notes)
