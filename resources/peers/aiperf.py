"""AIPerf's artifact folder (`aiperf profile --artifact-dir DIR`), as AIPerf 0.13 writes it.

* `profile_export.jsonl`, one line per request: `metadata` holds wall-clock ns
  (`credit_issued_ns` when the rate limiter released it, `request_start_ns`,
  `request_end_ns`), the phase (`warmup`/`profiling`) and the `X-Request-ID` it sent;
  `metrics` holds `time_to_first_token` and `inter_chunk_latency` (ms, the gaps between
  content chunks), token counts, and `error` when it failed.
* `profile_export_raw.jsonl` (`--export-level raw` only): every SSE message with its
  `perf_ns`, so the chunk times are AIPerf's own, not rebuilt from its gaps.
* `profile_export_aiperf.json`: the summary, AIPerf's version and the phases' settings
  (closed loop at a concurrency, or an arrival rate).

`request_start_ns` is a wall clock read next to the `start_perf_ns` of the raw record:
a raw chunk's time is `request_start_ns + (perf_ns - start_perf_ns)`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from servingbench.resources.contract.yamltext import short
from servingbench.resources.peers import Peer, records
from servingbench.resources.peers.records import (
    NUM,
    PeerFileError,
    PeerRequest,
    PeerRun,
    chunks_from_itl,
    dig,
    need,
    numbers,
)

RECORDS = "profile_export.jsonl"
RAW = "profile_export_raw.jsonl"
SUMMARY = "profile_export_aiperf.json"
RATE_TYPES = ("poisson", "constant", "gamma", "user_centric")


def read_json(path: Path) -> dict:
    doc = records.read_json(path, "missing (AIPerf writes it with every run)")
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a JSON object")
    return doc


def read_jsonl(path: Path) -> list[dict]:
    return records.read_jsonl(path, "missing (AIPerf writes it with every run)")


def _folder(path: Path) -> Path:
    path = Path(path)
    if path.is_dir():
        return path
    if path.name == RECORDS:
        return path.parent
    raise PeerFileError(f"{path}: expected AIPerf's artifact folder or its {RECORDS}")


def _steps(summary: dict, path: Path) -> dict[str, tuple[str, str, float | None, bool]]:
    """phase name -> (step, load_mode, target, is_warmup), from the run's own settings."""
    config = need(summary, "input_config", dict, "summary", path)
    phases = need(config, "phases", list, "summary.input_config", path)
    out = {}
    for i, ph in enumerate(phases):
        where = f"summary.input_config.phases[{i}]"
        name = need(ph, "name", str, where, path)
        kind = need(ph, "type", str, where, path)
        warmup = ph.get("kind") == "warmup"
        if kind == "concurrency":
            c = need(ph, "concurrency", int, where, path)
            out[name] = (f"c={c}", "concurrency", float(c), warmup)
        elif kind in RATE_TYPES:
            rate = need(ph, "rate", NUM, where, path)
            out[name] = (f"rate={rate:g}", "rate", float(rate), warmup)
        else:  # a replayed schedule: neither a concurrency nor a rate to hold it against
            out[name] = (kind, kind, None, warmup)
    return out


def _metric(metrics: dict, name: str, path: Path, where: str, kind=NUM):
    m = metrics.get(name)
    if m is None:
        return None
    value = need(m, "value", kind, f"{where}.metrics.{name}", path)
    return value


def _raw_chunks(raw: list[dict], path: Path) -> dict[str, list[tuple[int, str | None]]]:
    """request id -> (wall-clock ns, kind) of every SSE message that carried output text;
    kind `reasoning` for a reasoning delta, else None (an answer)."""
    out = {}
    for n, rec in enumerate(raw, 1):
        where = f"line {n}"
        md = need(rec, "metadata", dict, where, path)
        rid = need(md, "x_request_id", str, f"{where}.metadata", path)
        start_wall = need(md, "request_start_ns", int, f"{where}.metadata", path)
        start_perf = need(rec, "start_perf_ns", int, where, path)
        times = []
        for j, resp in enumerate(need(rec, "responses", list, where, path)):
            perf = need(resp, "perf_ns", int, f"{where}.responses[{j}]", path)
            if kind := _carries_text(resp):
                times.append((start_wall + (perf - start_perf),
                              "reasoning" if kind == "reasoning" else None))
        out[rid] = times
    return out


def _carries_text(resp: dict) -> str | None:
    """`answer` or `reasoning` when the message carried output text, else None. A packet
    that is not an SSE data message with JSON choices carries none."""
    packets = resp.get("packets")
    for packet in packets if isinstance(packets, list) else ():
        if not isinstance(packet, dict) or packet.get("name") != "data":
            continue
        value = packet.get("value")
        if not isinstance(value, str) or records.mf._depth(value) > records.MAX_DEPTH:
            continue
        try:
            data = json.loads(value)
        except ValueError:
            continue
        choices = data.get("choices") if isinstance(data, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if choice.get("text") or delta.get("content"):
                return "answer"
            if delta.get("reasoning_content") or delta.get("reasoning"):
                return "reasoning"
    return None


def _version(summary: dict, raw: list[dict], folder: Path) -> str:
    version = need(summary, "aiperf_version", str, "summary", folder / SUMMARY)
    for n, rec in enumerate(raw, 1):
        agent = dig(rec, ("request_headers", "User-Agent"), str, f"line {n}", folder / RAW,
                    default="")
        if agent.startswith("aiperf/") and agent[len("aiperf/"):] != version:
            raise PeerFileError(
                f"{folder / RAW}: line {n}: request_headers.User-Agent says {agent}, but "
                f"{SUMMARY} says aiperf_version {version} (files of two AIPerf versions)")
    return version


def _request(rec: dict, n: int, path: Path, steps: dict, chunks: dict | None) -> PeerRequest:
    where = f"line {n}"
    md = need(rec, "metadata", dict, where, path)
    mwhere = f"{where}.metadata"
    phase_name = need(md, "phase_name", str, mwhere, path)
    if phase_name not in steps:
        raise PeerFileError(f"{path}: {mwhere}.phase_name: {short(repr(phase_name))} is not a phase of "
                            f"{SUMMARY} (records of another run?)")
    step, mode, target, _ = steps[phase_name]
    bench_phase = need(md, "benchmark_phase", str, mwhere, path)
    metrics = need(rec, "metrics", dict, where, path)
    r = PeerRequest(step=step, load_mode=mode, target=target,
                    phase="warmup" if bench_phase == "warmup" else "steady",
                    request_id=need(md, "x_request_id", str, mwhere, path),
                    scheduled_ns=need(md, "credit_issued_ns", int, mwhere, path, nullable=True),
                    sent_ns=need(md, "request_start_ns", int, mwhere, path),
                    finished_ns=need(md, "request_end_ns", int, mwhere, path))
    # the server's prompt count where AIPerf kept it, else AIPerf's own (its tokenizer)
    for name in ("usage_prompt_tokens", "input_sequence_length"):
        if (value := _metric(metrics, name, path, where)) is not None:
            r.input_tokens = int(value)
            break
    cached = _metric(metrics, "usage_prompt_cache_read_tokens", path, where)
    r.cached_tokens = int(cached) if cached is not None else None
    error = rec.get("error")
    if md.get("was_cancelled"):
        r.status, r.error = "cancelled", "cancelled by AIPerf"
    elif error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        r.status = "http_error" if isinstance(code, int) and code >= 400 else "protocol_error"
        r.http_status = code if isinstance(code, int) else None
        msg = error.get("message") if isinstance(error, dict) else str(error)
        r.error = short(msg, 200) if msg else None
    ttft = _metric(metrics, "time_to_first_token", path, where)
    if r.status != "ok":
        return r
    if ttft is None:
        r.status, r.error = "protocol_error", "AIPerf recorded no first token"
        return r
    usage_out = _metric(metrics, "usage_completion_tokens", path, where)
    osl = _metric(metrics, "output_sequence_length", path, where)
    r.output_tokens = int(usage_out) if usage_out is not None else (
        int(osl) if osl is not None else None)
    if chunks is not None:
        if r.request_id not in chunks:
            raise PeerFileError(f"{path.parent / RAW}: no raw record for request "
                                f"{r.request_id} of {path.name} (a cut or mixed file)")
        r.chunk_ns = [at for at, _ in chunks[r.request_id]]
        kinds = [kind for _, kind in chunks[r.request_id]]
        r.chunk_kinds = kinds if any(kinds) else None
    else:
        gaps = numbers(_metric(metrics, "inter_chunk_latency", path, where, kind=list) or [],
                       f"{where}.metrics.inter_chunk_latency.value", path)
        r.chunk_ns = chunks_from_itl(r.sent_ns, ttft / 1e3, [g / 1e3 for g in gaps])
    if r.chunk_ns:
        r.first_token_ns, r.last_token_ns = r.chunk_ns[0], r.chunk_ns[-1]
    return r


PHASE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


def _figures(folder: Path, summary: dict, steps: dict) -> dict[str, dict[str, float]]:
    """AIPerf's own figures per profiling phase (its per-phase summary files)."""
    out = {}
    profiling = [name for name, (*_, warmup) in steps.items() if not warmup]
    for name in profiling:
        step = steps[name][0]
        # the name comes from the file: it names a folder only when it is a plain name
        # (`../../x` would read a summary from outside the results)
        per_phase = (folder / "phases" / name / SUMMARY
                     if isinstance(name, str) and PHASE_NAME.fullmatch(name) else None)
        # the top summary is the profiling phase's when there is only one
        doc = read_json(per_phase) if per_phase is not None and per_phase.exists() else (
            summary if len(profiling) == 1 else None)
        if doc is None:
            continue
        fig = {}
        # request_count counts AIPerf's successful requests, completed_request_count all
        for key, figure in (("request_count", "ok"), ("completed_request_count", "requests"),
                            ("total_output_tokens", "output_tokens"),
                            ("time_to_first_token", "ttft_ms_mean"),
                            ("inter_chunk_latency", "itl_ms_mean")):
            avg = dig(doc, (key, "avg"), NUM, "summary", per_phase)
            if avg is not None:
                fig[figure] = float(avg)
        out[step] = fig
    return out


def read(path: Path) -> PeerRun:
    folder = _folder(path)
    records_path = folder / RECORDS
    if not records_path.exists():
        raise PeerFileError(f"{records_path}: missing (run AIPerf with --export-level "
                            "records or raw)")
    summary = read_json(folder / SUMMARY)
    raw = read_jsonl(folder / RAW) if (folder / RAW).exists() else []
    version = _version(summary, raw, folder)
    steps = _steps(summary, folder / SUMMARY)
    chunks = _raw_chunks(raw, folder / RAW) if raw else None
    records = read_jsonl(records_path)
    requests = [_request(rec, n, records_path, steps, chunks) for n, rec in enumerate(records, 1)]
    files = [records_path, folder / SUMMARY] + ([folder / RAW] if raw else [])
    notes = []
    if chunks is None:
        notes.append("no profile_export_raw.jsonl: chunk times are rebuilt from AIPerf's "
                     "time_to_first_token and inter_chunk_latency (--export-level raw keeps "
                     "its own)")
    if isinstance(summary.get("producer"), str):
        notes.append(f"{SUMMARY} says: {short(summary['producer'], 200)}")
    notes.append("output_tokens: the server's usage.completion_tokens where AIPerf recorded "
                 "it, else AIPerf's output_sequence_length (its own tokenizer)")
    config = summary.get("input_config") or {}
    model = None
    try:
        model = config["models"]["items"][0]["name"]
    except (KeyError, IndexError, TypeError):
        pass
    return PeerRun(peer="aiperf", peer_version=version, files=files, requests=requests,
                   chunk_times="recorded" if chunks is not None else "reconstructed_from_itl",
                   output_tokens="usage", model=model,
                   scenario=_scenario(config), figures=_figures(folder, summary, steps),
                   notes=notes)


def _scenario(config: dict) -> dict:
    try:
        prompts = config["datasets"][0]["prompts"]
        return {"input_tokens": prompts["isl"]["mean"], "output_tokens": prompts["osl"]["mean"],
                "dataset": None}
    except (KeyError, IndexError, TypeError):
        return {"input_tokens": None, "output_tokens": None, "dataset": None}


PLUGIN = Peer("aiperf", read, marker=RECORDS, result_is_folder=True)
