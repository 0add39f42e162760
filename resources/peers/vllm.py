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

from datetime import UTC, datetime
from pathlib import Path

from servingbench.resources.contract.yamltext import short
from servingbench.resources.peers import Peer
from servingbench.resources.peers.records import (
    NS,
    NUM,
    PeerFileError,
    PeerRequest,
    PeerRun,
    check,
    chunks_from_itl,
    count,
    dig,
    need,
    numbers,
    read_json,
    seconds_ns,
)

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
               "errors")


def _load(path: Path) -> dict:
    doc = read_json(path, "no such file")
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a JSON object (vllm bench serve's result)")
    # every answer's text, often most of the file: never read, so not kept while the
    # requests are built
    doc.pop("generated_texts", None)
    return doc


def _error_text(text: str) -> str:
    """The last line of a failed request's error (vLLM keeps the whole traceback)."""
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "vllm recorded an error without text"


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
        raise PeerFileError(f"{path}: result.date: {short(repr(date))} is not vLLM's "
                            "YYYYMMDD-HHMMSS") from None
    saved_ns = int(saved.timestamp()) * NS
    note = ("vllm keeps relative send times only: the run is placed so that its last chunk "
            f"falls at the file's `date` {date} read as UTC (vLLM writes the saving "
            "machine's local time, to the second, without its zone); --anchor sets the "
            "first send instant instead")
    return saved_ns - seconds_ns(max(ends)), note


def _step(doc: dict, path: Path) -> tuple[str, str, float | None]:
    conc = need(doc, "max_concurrency", int, "result", path, nullable=True)
    rate = doc.get("request_rate")
    if rate not in (None, "inf"):  # a number, else the error names the field
        check(rate, NUM, "result.request_rate", path)
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
    count(doc["start_times"], path, "result.start_times")
    for i in range(n):
        where = f"result[{i}]"
        for key in ("start_times", "ttfts", "latencies", "input_lens", "output_lens"):
            check(doc[key][i], NUM, f"{where}.{key}", path)
        numbers(doc["itls"][i], f"{where}.itls", path)
        check(doc["errors"][i], str, f"{where}.errors", path, nullable=True)
        if "queue_times" in doc:
            check(doc["queue_times"][i], NUM, f"{where}.queue_times", path, nullable=True)
    zero, note = _anchor_ns(doc, path, anchor_ns)
    requests = []
    for i in range(n):
        sent = zero + seconds_ns(doc["start_times"][i])
        ok = not doc["errors"][i]
        r = PeerRequest(step=step, load_mode=mode, target=target, request_id=f"vllm-{i}",
                        sent_ns=sent, input_tokens=int(doc["input_lens"][i]),
                        status="ok" if ok else "http_error",
                        error=None if ok else _error_text(doc["errors"][i]))
        if doc.get("queue_times") and doc["queue_times"][i] is not None:
            r.scheduled_ns = sent - seconds_ns(doc["queue_times"][i])
        itls, doc["itls"][i] = doc["itls"][i], None  # freed as its chunk times are made
        if ok:
            r.chunk_ns = chunks_from_itl(sent, doc["ttfts"][i], itls)
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
    for key, figure in (("mean_ttft_ms", "ttft_ms_mean"), ("mean_itl_ms", "itl_ms_mean")):
        if (value := dig(doc, (key,), NUM, "result", path)) is not None:
            figures[figure] = float(value)
    return PeerRun(
        peer="vllm", peer_version=version, files=[path], requests=requests,
        chunk_times="reconstructed_from_itl", output_tokens="usage",
        model=dig(doc, ("model_id",), str, "result", path),
        scenario={"input_tokens": None, "output_tokens": None, "dataset": None},
        figures={step: figures}, notes=notes)


# `vllm bench serve` names its result file after the run: every JSON file is one
PLUGIN = Peer("vllm", read, marker="*.json", result_is_folder=False, relative_clock=True)
