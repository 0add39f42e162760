"""vLLM's `vllm bench serve --save-result --save-detailed` result (one JSON file per run).

What the file keeps per request, as lists in request order (vllm/benchmarks/serve.py):
`start_times` (the client's `time.perf_counter()` at send, seconds on no wall clock),
`queue_times` (how long the request waited for the client's concurrency limit before it was
sent), `ttfts`, `itls` (the gaps between content chunks), `latencies` (send to the LAST
content chunk: the stream's close is not kept), `input_lens`, `output_lens` (the server's
`usage.completion_tokens`, else vLLM's tokenizer count), `errors` ("" when it succeeded).

So: chunk times are rebuilt from TTFT and the ITLs; `finished_at` is the last chunk (no
later time exists in the file); the run is placed on the wall clock by an anchor (`--anchor`,
else the file's `date`, which is the saving machine's local time to the second, without
its zone, taken just after the run, read as UTC). vLLM writes no version of its own into
the file; `--metadata vllm_version=X` (a documented option) does, and is read here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from servingbench.resources.peers.records import (
    NS,
    NUM,
    PeerFileError,
    PeerRequest,
    PeerRun,
    chunks_from_itl,
    need,
    seconds_ns,
)

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
               "errors")


def _load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PeerFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PeerFileError(f"{path}: unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise PeerFileError(f"{path}: not JSON, or cut short (line {exc.lineno} column "
                            f"{exc.colno}: {exc.msg})") from None
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a JSON object (vllm bench serve's result)")
    return doc


def _anchor_ns(doc: dict, path: Path, anchor_ns: int | None) -> tuple[int, str | None]:
    """The wall-clock instant of perf_counter 0, and a note on where it came from."""
    starts = doc["start_times"]
    ends = [s + lat for s, lat in zip(starts, doc["latencies"], strict=True)]
    if anchor_ns is not None:  # the first request's send instant, as the user gave it
        return anchor_ns - seconds_ns(min(starts)), None
    date = need(doc, "date", str, "result", path)
    try:
        saved = datetime.strptime(date, "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        raise PeerFileError(f"{path}: result.date: {date!r} is not vLLM's YYYYMMDD-HHMMSS") from None
    saved_ns = int(saved.timestamp()) * NS
    note = ("vllm keeps relative send times only: the run is placed so that its last chunk "
            f"falls at the file's `date` {date} read as UTC (vLLM writes the saving "
            "machine's local time, to the second, without its zone); --anchor sets the "
            "first send instant instead")
    return saved_ns - seconds_ns(max(ends)), note


def _step(doc: dict, path: Path) -> tuple[str, str, float | None]:
    conc = need(doc, "max_concurrency", int, "result", path, nullable=True)
    rate = doc.get("request_rate")
    if rate not in (None, "inf") and not isinstance(rate, NUM):
        raise PeerFileError(f"{path}: result.request_rate: expected a number or \"inf\", got "
                            f"{rate!r}")
    if rate not in (None, "inf"):
        return f"rate={rate:g}", "rate", float(rate)
    if conc is not None:
        return f"c={conc}", "concurrency", float(conc)
    # request_rate inf with no concurrency limit: every request at once
    n = len(doc["start_times"])
    return f"c={n}", "concurrency", float(n)


def read(path: Path, anchor_ns: int | None = None) -> PeerRun:
    path = Path(path)
    doc = _load(path)
    for key in PER_REQUEST:
        need(doc, key, list, "result", path)
    n = len(doc["start_times"])
    for key in PER_REQUEST + (("queue_times",) if "queue_times" in doc else ()):
        if len(doc[key]) != n:
            raise PeerFileError(f"{path}: result.{key}: {len(doc[key])} entries, but "
                                f"start_times has {n} (a cut or mixed file)")
    completed = need(doc, "completed", int, "result", path)
    version = doc.get("vllm_version")
    if version is not None and not isinstance(version, str):
        raise PeerFileError(f"{path}: result.vllm_version: expected a string")
    step, mode, target = _step(doc, path)
    for i in range(n):
        where = f"result[{i}]"
        for key in ("start_times", "ttfts", "latencies", "input_lens", "output_lens"):
            if not isinstance(doc[key][i], NUM) or isinstance(doc[key][i], bool):
                raise PeerFileError(f"{path}: {where}.{key}: expected a number, got "
                                    f"{doc[key][i]!r}")
        if not isinstance(doc["itls"][i], list) or not all(
                isinstance(x, NUM) for x in doc["itls"][i]):
            raise PeerFileError(f"{path}: {where}.itls: expected a list of numbers")
        if not isinstance(doc["errors"][i], str | None):
            raise PeerFileError(f"{path}: {where}.errors: expected a string")
    zero, note = _anchor_ns(doc, path, anchor_ns)
    requests = []
    for i in range(n):
        sent = zero + seconds_ns(doc["start_times"][i])
        ok = not doc["errors"][i]
        r = PeerRequest(step=step, load_mode=mode, target=target, request_id=f"vllm-{i}",
                        sent_ns=sent, input_tokens=int(doc["input_lens"][i]),
                        status="ok" if ok else "http_error",
                        error=None if ok else doc["errors"][i].strip().splitlines()[-1][:200])
        if "queue_times" in doc and isinstance(doc["queue_times"][i], NUM):
            r.scheduled_ns = sent - seconds_ns(doc["queue_times"][i])
        if ok:
            r.chunk_ns = chunks_from_itl(sent, doc["ttfts"][i], doc["itls"][i])
            r.first_token_ns, r.last_token_ns = r.chunk_ns[0], r.chunk_ns[-1]
            r.finished_ns = sent + seconds_ns(doc["latencies"][i])
            r.output_tokens = int(doc["output_lens"][i])
        else:
            # a failed request keeps no end time: the latest the file says is its send
            r.finished_ns = sent + seconds_ns(doc["latencies"][i])
        requests.append(r)
    notes = [note] if note else []
    notes.append("vllm keeps no stream-close time: finished_at is the last content chunk "
                 "(its `latencies`)")
    if version is None:
        notes.append("the file names no vLLM version (`--metadata vllm_version=X` adds it)")
    if "queue_times" not in doc:
        notes.append("no queue_times in the file: scheduled_at is null")
    figures = {"requests": float(n), "ok": float(completed),
               "output_tokens": float(need(doc, "total_output_tokens", int, "result", path))}
    if isinstance(doc.get("mean_ttft_ms"), NUM):
        figures["ttft_ms_mean"] = float(doc["mean_ttft_ms"])
    if isinstance(doc.get("mean_itl_ms"), NUM):
        figures["itl_ms_mean"] = float(doc["mean_itl_ms"])
    return PeerRun(
        peer="vllm", peer_version=version, files=[path], requests=requests,
        chunk_times="reconstructed_from_itl", output_tokens="usage",
        model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None,
        scenario={"input_tokens": None, "output_tokens": None, "dataset": None},
        figures={step: figures}, notes=notes)
