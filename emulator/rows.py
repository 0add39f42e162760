"""Rows of a published-measurements table (../shared/calibration/published_serving.csv's
columns) read strictly, and each row turned into what the emulator runs: a configuration per
replica, the replica count, and the load.

A row's configuration: `model` and `weight_precision` (empty: the model's native
precision), `kv_cache_precision` (empty: bf16), `engine`, `accelerator` (or `instance`),
`n_accel` chips in all, `tp` as the source counts it (GPUs: GPUs; Neuron: NeuronCores,
`cores_per_chip` a chip), `input_tokens` / `output_tokens` per request, `load_kind` and
`load_value`, `speculative` (a draft count and acceptance, or empty).

Four workload facts have no column of their own in the published table and are stated in
its notes: how many requests an offline or closed-loop run sent ("500 requests", "1000
prompts"), on Neuron the compiled batch ("compiled batch 32", "batch 8", "bs4",
"max-num-seqs 1"), a conversation dataset whose lengths vary widely around the stated
means ("ShareGPT"), and a harness that hands requests to the engine in its own process, with
no API server between them ("trtllm-bench", vLLM's throughput benchmark: `client`
in_process, where an HTTP client's requests each pass the server's frontend first). The
notes also say where a run's command turned on what the model cannot express (SGLang's
`--enable-dp-attention`): such a row is `unsupported`.
Optional columns `num_requests`, `max_num_seqs`, `dataset` and `client` give them;
where a column is absent or empty, the row's `notes` are read for them; where neither says,
the load's default applies (10 × the concurrency, 500 open-loop or 1,000 offline requests; the
batch a sibling row of the same source and configuration states, else the engine profile's;
lengths within ±10 % of the stated ones).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from servingbench.emulator import specs
from servingbench.emulator.engines import engine_name
from servingbench.emulator.specdata import SpecError

REQUIRED = ("row_id", "model", "total_params_b", "active_params_b", "weight_precision",
            "kv_cache_precision", "engine", "engine_version", "accelerator", "instance", "n_accel",
            "tp", "ep", "input_tokens", "output_tokens", "load_kind", "load_value", "speculative")
LOAD_KINDS = ("concurrency", "request_rate", "offline", "fixed_batch", "sweep_max")
MAX_TOKENS = 10_000_000
MAX_COUNT = 1_000_000


class RowError(ValueError):
    """A row that cannot be read: names the row and the column."""


@dataclass(frozen=True)
class Row:
    row_id: str
    model: str
    precision: str
    kv_precision: str
    engine: str
    accelerator: str
    instance: str
    n_accel: int
    tp: int | None
    input_tokens: int
    output_tokens: int
    load_kind: str
    load_value: float | None
    speculative: str
    num_requests: int | None
    max_num_seqs: int | None
    engine_version: str = ""
    dataset: str = ""  # "sharegpt" where the notes name it: its lengths vary around the means
    client: str = ""  # "in_process": the harness feeds the engine directly (no API server)
    server: str = ""  # the API server in front of the engine, where the notes name one
    attention_dp: bool = False  # the command the notes quote runs attention data-parallel


def _number(raw: str, row_id: str, column: str, *, integer: bool, positive: bool = True,
            limit: float = MAX_TOKENS) -> float | None:
    text = (raw or "").strip()
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        raise RowError(f"row {row_id}: column {column}: {text!r} is not a number") from None
    if not math.isfinite(v):
        raise RowError(f"row {row_id}: column {column}: {text!r} is not finite")
    if v < 0 or (positive and v == 0):
        raise RowError(f"row {row_id}: column {column}: {text!r} must be > 0")
    if v > limit:
        raise RowError(f"row {row_id}: column {column}: {text!r} is above {limit:g}")
    if integer and v != int(v):
        raise RowError(f"row {row_id}: column {column}: {text!r} is not a whole number")
    return int(v) if integer else v


NOTE_REQUESTS = re.compile(r"(\d[\d,]*)\s+(?:requests|prompts)\b", re.I)
NOTE_BATCH = re.compile(r"(?:compiled batch|max-num-seqs|\bbatch(?: size)?)\s*(\d+)|\bbs(\d+)\b", re.I)


def note_hints(notes: str) -> tuple[int | None, int | None]:
    """(requests sent, compiled batch) as a row's notes state them, else None."""
    req = NOTE_REQUESTS.search(notes or "")
    batch = NOTE_BATCH.search(notes or "")
    n = int(req.group(1).replace(",", "")) if req else None
    b = int(batch.group(1) or batch.group(2)) if batch else None
    return n, b


def note_dataset(notes: str) -> str:
    """The request dataset a row's notes name, where it shapes the lengths (ShareGPT)."""
    return "sharegpt" if re.search(r"\bsharegpt\b", notes or "", re.I) else ""


# the harnesses that feed the engine in their own process; our own (benchmarks/
# emulator_calibrate_serve.py, the rows measured here) drives transformers' manager and says
# "in-process" in its notes
IN_PROCESS = re.compile(r"\btrtllm-bench\b|\bbenchmark_throughput\b|\bvllm bench throughput\b"
                        r"|\bbench_offline_throughput\b|\bgptManagerBenchmark\b|\bin-process\b", re.I)
CLIENTS = ("in_process", "http")


def note_client(notes: str) -> str:
    """"in_process" where a row's notes name a harness that feeds the engine in its own
    process (TensorRT-LLM's trtllm-bench, vLLM's and SGLang's offline throughput scripts)."""
    return "in_process" if IN_PROCESS.search(notes or "") else ""


SERVERS = re.compile(r"\btrtllm-serve\b", re.I)


def note_server(notes: str) -> str:
    """"trtllm-serve" where a row's notes say TensorRT-LLM ran behind its own Python OpenAI
    server (not Triton's)."""
    found = SERVERS.search(notes or "")
    return found.group(0).lower() if found else ""


# SGLang's attention data parallelism: each of the TP group's ranks holds its own requests'
# KV cache, batches and prefills them by itself (prefill first per rank) and joins the others
# for the MoE layers. The model runs one scheduler over one TP group; it cannot express this,
# so such a row is `unsupported`, never predicted as plain TP (modelled as TP with unreplicated
# latent KV it put SGLang's TPOT 107 % off: docs/emulator.md)
ATTENTION_DP = re.compile(r"--enable-dp-attention\b", re.I)


def note_attention_dp(notes: str) -> bool:
    """Whether the command a row's notes quote runs attention data-parallel."""
    return bool(ATTENTION_DP.search(notes or ""))


def read_row(d: dict[str, str], index: int) -> Row:
    """One CSV row (a dict of its columns) checked; RowError names the row and column."""
    row_id = (d.get("row_id") or "").strip() or f"#{index}"
    kind = (d.get("load_kind") or "").strip()
    if kind not in LOAD_KINDS:
        raise RowError(f"row {row_id}: column load_kind: {kind!r} is not one of {', '.join(LOAD_KINDS)}")
    for col in ("total_params_b", "active_params_b"):
        _number(d.get(col, ""), row_id, col, integer=False, limit=1e5)
    n_accel = _number(d.get("n_accel", ""), row_id, "n_accel", integer=True, limit=MAX_COUNT)
    if n_accel is None:
        raise RowError(f"row {row_id}: column n_accel: empty")
    tp = _number(d.get("tp", ""), row_id, "tp", integer=True, limit=MAX_COUNT)
    _number(d.get("ep", ""), row_id, "ep", integer=True, limit=MAX_COUNT)
    tokens = []
    for col in ("input_tokens", "output_tokens"):
        v = _number(d.get(col, ""), row_id, col, integer=True)
        if v is None:
            raise RowError(f"row {row_id}: column {col}: empty")
        tokens.append(v)
    value = _number(d.get("load_value", ""), row_id, "load_value", integer=False, limit=MAX_COUNT)
    if value is None and kind in ("concurrency", "request_rate", "fixed_batch"):
        raise RowError(f"row {row_id}: column load_value: empty for load_kind {kind}")
    if kind in ("concurrency", "fixed_batch", "sweep_max") and value is not None and value != int(value):
        raise RowError(f"row {row_id}: column load_value: {value:g} is not a whole number of requests")
    requests = _number(d.get("num_requests", ""), row_id, "num_requests", integer=True, limit=MAX_COUNT)
    batch = _number(d.get("max_num_seqs", ""), row_id, "max_num_seqs", integer=True, limit=MAX_COUNT)
    notes = d.get("notes", "")
    hint_n, hint_b = note_hints(notes)
    client = (d.get("client") or "").strip().lower()
    if client and client not in CLIENTS:
        raise RowError(f"row {row_id}: column client: {client!r} is not one of {', '.join(CLIENTS)}")
    return Row(row_id, (d.get("model") or "").strip(), (d.get("weight_precision") or "").strip(),
               (d.get("kv_cache_precision") or "").strip(), (d.get("engine") or "").strip(),
               (d.get("accelerator") or "").strip(), (d.get("instance") or "").strip(),
               int(n_accel), tp, tokens[0], tokens[1], kind, value,
               (d.get("speculative") or "").strip(), requests or hint_n, batch or hint_b,
               (d.get("engine_version") or "").strip(),
               (d.get("dataset") or "").strip().lower() or note_dataset(notes),
               client or note_client(notes), note_server(notes), note_attention_dp(notes))


@dataclass(frozen=True)
class Plan:
    """What the emulator runs for a row: one replica's configuration, how many replicas
    share the load, the scheduler's limits, and the load per replica."""
    config: specs.Config
    replicas: int
    kv_bytes_per_value: float
    max_num_seqs: int
    requests: int
    speculative: tuple[int, float] | None
    in_process: bool = False  # no API server before the engine: no frontend time per request

    def frontend_s(self, model) -> float:
        """The API server's time per request before this plan's engine (a PerfModel's
        fitted figure), none where the harness feeds the engine in its own process."""
        return 0.0 if self.in_process else model.frontend_s


def speculative_of(text: str) -> tuple[int, float] | None:
    """(draft tokens, acceptance per position) from a row's `speculative` text. SGLang's
    `num-steps` is the draft's depth; its `draft tokens` count the verified slots, the
    step's own token among them (num-steps + 1 with topk 1), so num-steps wins."""
    if not text:
        return None
    steps = re.search(r"num[-_ ]steps\s*(\d+)", text, re.I)
    k = re.search(r"(\d+)\s+draft tokens|k\s*=\s*(\d+)", text, re.I)
    p = re.search(r"acceptance\s+(\d+(?:\.\d+)?)\s*%", text, re.I)
    draft = int(steps.group(1)) if steps else int(k.group(1) or k.group(2)) if k else 1
    return draft, (float(p.group(1)) / 100 if p else 0.7)


def engine_of(row: Row) -> str:
    """The engine profile of a row: its engine, except that vLLM's Neuron plugin over
    Hugging Face's optimum-neuron (named in engine_version) is a stack of its own, and
    TensorRT-LLM behind trtllm-serve (named in the notes) pays that server's time."""
    engine = row.engine or specs.DEFAULT_ENGINE
    if engine.lower() == "vllm-neuron" and "optimum" in row.engine_version.lower():
        return "optimum-neuron"
    if row.server == "trtllm-serve" and engine_name(engine) == "tensorrt-llm":
        return "trtllm-serve"
    return engine


def plan(row: Row) -> Plan:
    """The row as the emulator runs it; SpecError says why it cannot (the row is then
    `unsupported`)."""
    if specs.model_key(row.model) is None:
        raise SpecError(f"unknown model {row.model!r}")
    if row.attention_dp:
        raise SpecError("attention data parallelism (--enable-dp-attention): each rank batches "
                        "and prefills its own requests, which the model does not represent")
    arch = specs.model(row.model)
    if row.instance:
        inst = specs.instance(row.instance)
        acc = inst.accelerator
        if row.accelerator and specs.accelerator(row.accelerator).name != acc.name:
            raise SpecError(f"instance {row.instance} carries {acc.name}, not {row.accelerator}")
    elif row.accelerator:
        acc = specs.accelerator(row.accelerator)
        inst = None
    else:
        raise SpecError("no accelerator or instance")
    tp_units = row.tp or row.n_accel * acc.cores_per_chip
    chips = max(1, math.ceil(tp_units / acc.cores_per_chip))
    if row.n_accel % chips:
        raise SpecError(f"{row.n_accel} chips do not split into replicas of tp {tp_units}")
    replicas = row.n_accel // chips
    if inst is None or inst.count < chips:
        inst = specs.instance_of(acc.name, chips)
    precision = row.precision or arch.native_precision
    cfg = specs.config_of(inst, arch.name, precision, chips, engine_of(row))
    prof = cfg.profile()
    kv_dtype = row.kv_precision or prof.default_kv_dtype(precision, arch)
    kv = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}.get(kv_dtype)
    if kv is None:
        raise SpecError(f"unknown KV cache precision {row.kv_precision!r}")
    seqs = row.max_num_seqs or prof.max_num_seqs
    if row.speculative and prof.speculative_max_num_seqs and not row.max_num_seqs:
        seqs = min(seqs, prof.speculative_max_num_seqs)
    if row.load_kind == "fixed_batch":
        seqs = max(1, round(row.load_value / replicas))
    return Plan(cfg, replicas, kv, seqs, row.num_requests or 0, speculative_of(row.speculative),
                row.client == "in_process")
