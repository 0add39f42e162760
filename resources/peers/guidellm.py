"""guidellm's report (`guidellm benchmark run --outputs json`: `benchmarks.json`), as
guidellm 0.8 writes it (report schema `metadata.version` 2).

One entry of `benchmarks[]` per strategy it ran (synchronous, concurrent at N streams,
throughput, constant or Poisson at a rate); each keeps its requests under
`requests.successful / errored / incomplete`. Per request guidellm keeps, in Unix seconds
(floats): `info.timings.targeted_start` (when its strategy meant to send it),
`request_start`, `first_token_iteration`, `last_token_iteration`, `request_end`, and the
number of streamed iterations; not the time of each chunk. So the chunk log holds what it
kept: the first token's chunk, and one chunk at the last token's time carrying the rest
of the output (`chunk_times = first_and_last`); its ITL is then guidellm's own
`(last − first) / (output_tokens − 1)`.
"""

from __future__ import annotations

from pathlib import Path

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
    read_json,
    seconds_ns,
)

REPORT = "benchmarks.json"
SCHEMA_VERSION = 2
STATUSES = {"successful": "ok", "errored": "http_error", "incomplete": "cancelled"}


def _load(path: Path) -> tuple[Path, dict]:
    path = Path(path)
    if path.is_dir():
        path = path / REPORT
    doc = read_json(path, f"no such file (guidellm writes {REPORT} with --outputs json)")
    if not isinstance(doc, dict):
        raise PeerFileError(f"{path}: expected a JSON object (guidellm's report)")
    return path, doc


def _ns(value) -> int | None:
    return None if value is None else seconds_ns(value)


def _step(bench: dict, where: str, path: Path) -> tuple[str, str, float | None]:
    config = need(bench, "config", dict, where, path)
    strategy = need(config, "strategy", dict, f"{where}.config", path)
    kind = need(strategy, "type_", str, f"{where}.config.strategy", path)
    swhere = f"{where}.config.strategy"
    if kind == "synchronous":
        return "c=1", "concurrency", 1.0
    if kind == "concurrent":
        n = need(strategy, "streams", int, swhere, path)
        return f"c={n}", "concurrency", float(n)
    if kind in ("constant", "poisson"):
        rate = need(strategy, "rate", NUM, swhere, path)
        return f"rate={rate:g}", "rate", float(rate)
    if kind == "throughput":  # everything at once, up to max_concurrency
        n = need(strategy, "max_concurrency", int, swhere, path, nullable=True)
        return (f"c={n}", "concurrency", float(n)) if n else ("throughput", "throughput", None)
    return kind, kind, None


def _request(rec: dict, where: str, path: Path, step: tuple, status: str) -> PeerRequest:
    info = need(rec, "info", dict, where, path)
    timings = need(info, "timings", dict, f"{where}.info", path)
    twhere = f"{where}.info.timings"
    t = {key: need(timings, key, NUM, twhere, path, nullable=True)
         for key in ("targeted_start", "request_start", "first_token_iteration",
                     "last_token_iteration", "request_end", "resolve_end")}
    r = PeerRequest(step=step[0], load_mode=step[1], target=step[2],
                    request_id=need(rec, "request_id", str, where, path), status=status,
                    scheduled_ns=_ns(t["targeted_start"]), sent_ns=_ns(t["request_start"]),
                    # guidellm's own end: the backend's, else when it resolved the request
                    finished_ns=_ns(t["request_end"] if t["request_end"] is not None
                                    else t["resolve_end"]))
    inp = need(rec, "input_metrics", dict, where, path)
    out = need(rec, "output_metrics", dict, where, path)
    r.input_tokens = need(inp, "total_tokens", int, f"{where}.input_metrics", path, nullable=True)
    r.cached_tokens = dig(inp, ("cached_tokens",), int, f"{where}.input_metrics", path)
    if status != "ok":
        err = info.get("error")
        r.error = short(err, 200) if err else status
        return r
    n = need(out, "total_tokens", int, f"{where}.output_metrics", path, nullable=True)
    first, last = _ns(t["first_token_iteration"]), _ns(t["last_token_iteration"])
    if n is None:  # no usage from the server: guidellm counts one token per iteration
        n = dig(timings, ("token_iterations",), int, twhere, path) or None
    r.output_tokens = n
    if first is None or not n:
        r.status, r.error = "protocol_error", "guidellm recorded no first token"
        return r
    r.first_token_ns, r.last_token_ns = first, last if last is not None else first
    if n >= 2 and r.last_token_ns > first:
        r.chunk_ns, r.chunk_tokens = [first, r.last_token_ns], [1, n - 1]
    else:
        r.chunk_ns, r.chunk_tokens = [first], [n]
    return r


def _figures(bench: dict, where: str, path: Path) -> dict[str, float]:
    """guidellm's own means for the benchmark (its `metrics`, successful requests)."""
    fig = {}
    ttft = dig(bench, ("metrics", "time_to_first_token_ms", "successful", "mean"), NUM, where,
               path)
    if ttft is not None:
        fig["ttft_ms_mean"] = float(ttft)
    ok = dig(bench, ("metrics", "request_totals", "successful"), int, where, path)
    if ok is not None:
        fig["ok"] = float(ok)
    return fig


def read(path: Path) -> PeerRun:
    path, doc = _load(path)
    meta = need(doc, "metadata", dict, "report", path)
    schema = need(meta, "version", int, "report.metadata", path)
    if schema != SCHEMA_VERSION:
        raise PeerFileError(f"{path}: report.metadata.version: {schema}, this reader knows "
                            f"guidellm's report schema {SCHEMA_VERSION} (guidellm 0.8)")
    version = need(meta, "guidellm_version", str, "report.metadata", path)
    benches = count(need(doc, "benchmarks", list, "report", path), path, "report.benchmarks")
    requests, figures, notes, model = [], {}, [], None
    for b, bench in enumerate(benches):
        where = f"report.benchmarks[{b}]"
        step = _step(bench, where, path)
        reqs = need(bench, "requests", dict, where, path)
        for group, status in STATUSES.items():
            group_list = need(reqs, group, list, f"{where}.requests", path, nullable=True) or ()
            for i, rec in enumerate(count(group_list, path, f"{where}.requests.{group}")):
                requests.append(_request(rec, f"{where}.requests.{group}[{i}]", path, step,
                                         status))
        count(requests, path, "report.benchmarks[].requests")
        figures[step[0]] = _figures(bench, where, path)
        model = model or dig(bench, ("config", "backend", "model"), str, where, path)
        total = dig(bench, ("metrics", "request_totals", "total"), int, where, path)
        kept = sum(len(reqs.get(g) or ()) for g in STATUSES)
        if total is not None and total != kept:
            notes.append(f"step {step[0]}: guidellm kept {kept} of its {total} requests "
                         "(a sample: --sample-requests)")
    steps = [r.step for r in requests]
    if len(set(steps)) < len(benches):
        notes.append("two benchmarks of the report ran the same load; their requests share "
                     "one step")
    notes.append("guidellm keeps the first and last token times and the token count, not "
                 "each chunk's time: the chunk log has the first chunk and one chunk at the "
                 "last token carrying the rest, so ITL is guidellm's (last-first)/(tokens-1)")
    notes.append("output_tokens: the server's usage where guidellm got it, else its count "
                 "of streamed iterations")
    return PeerRun(peer="guidellm", peer_version=version, files=[path], requests=requests,
                   chunk_times="first_and_last", output_tokens="usage", model=model,
                   scenario={"input_tokens": None, "output_tokens": None, "dataset": None},
                   figures=figures, notes=notes)


PLUGIN = Peer("guidellm", read, marker=REPORT, result_is_folder=False)
