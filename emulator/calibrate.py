"""Fit the performance model's free figures to published measurements, and say how wrong it
stays on measurements it did not see.

The figures (engines.yaml `calibration:`, composed by engines.efficiency_of) are few and
physical: a memory and a compute efficiency per accelerator, relative kernel factors and
overheads per engine stack, an all-reduce latency per interconnect, GEMM shape constants and
Neuron's context-encoding figures per platform. The fit minimizes the squared log error of
output tokens/s, TTFT and TPOT over the table's rows (scipy's bounded least squares), with a
weak pull of every figure towards its prior so that a figure the rows cannot pin down stays
where physics put it. Each round schedules every row in virtual time once (emulator/virtual.py)
and re-times the recorded steps under candidate figures (`replay`), so the optimizer never
re-schedules; the next round schedules again with the new figures.

Cross-validation and the error table are emulator/crossval.py.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from servingbench.emulator import predict as pr
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.rows import Row, RowError
from servingbench.emulator.virtual import weighted_median

METRICS = ("tok_s", "ttft_ms", "tpot_ms")
WEIGHTS = {"tok_s": 1.0, "ttft_ms": 0.6, "tpot_ms": 0.6}
PRIOR_PULL = 0.15  # residual weight per unit of log-distance from a figure's prior


@dataclass
class Sample:
    row: Row
    curve: str
    accelerator: str
    engine: str
    published: dict[str, float]  # metric -> value
    stat: dict[str, str]  # ttft_ms/tpot_ms -> "median" | "mean" (what the source published)
    claim_kind: str = ""


def _f(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) and v > 0 else None


def _profile(row: Row) -> str:
    """The engine profile a row runs on (its band is that profile's: optimum-neuron rows are
    not NxD Inference rows though the table calls both vllm-neuron)."""
    from servingbench.emulator.engines import engine_name
    from servingbench.emulator.rows import engine_of
    return engine_name(engine_of(row)) or row.engine


KNEE = 0.95  # an open loop at this share of its curve's measured capacity or more


def _capacities(rows: list[Row], raw: list[dict[str, str]], curve) -> dict[str, float]:
    """The highest requests/s each curve measured under a closed loop or everything queued
    (its capacity as the source saw it)."""
    cap: dict[str, float] = {}
    for row, d in zip(rows, raw, strict=True):
        rps = _f(d.get("req_per_s"))
        if rps and row.load_kind in ("sweep_max", "offline", "concurrency"):
            key = curve(d)
            cap[key] = max(cap.get(key, 0.0), rps)
    return cap


def samples_of(rows: list[Row], raw: list[dict[str, str]]) -> list[Sample]:
    def curve(d):
        return "|".join(d.get(k, "") for k in (
            "source", "model", "weight_precision", "kv_cache_precision", "engine", "engine_version",
            "accelerator", "instance", "n_accel", "tp", "ep", "input_tokens", "output_tokens",
            "speculative"))
    capacity = _capacities(rows, raw, curve)
    out = []
    for row, d in zip(rows, raw, strict=True):
        pub, stat = {}, {}
        if _f(d.get("output_tok_s_total")):
            pub["tok_s"] = _f(d["output_tok_s_total"])
        for m, col in (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms")):
            med, mean = _f(d.get(f"{col}_median")), _f(d.get(f"{col}_mean"))
            if med or mean:
                pub[m], stat[m] = (med, "median") if med else (mean, "mean")
        # guidellm's throughput mode keeps as many requests in flight as its client manages
        # (Little's law on the published figures gives 1-3x the compiled batch): its TTFT is
        # that client's queue, which no server model predicts
        if row.load_kind == "sweep_max":
            pub.pop("ttft_ms", None)
        # an open loop sent at its own curve's measured capacity (guidellm's rates, chosen
        # from its throughput run) sits on the queueing knee: a few percent of capacity either
        # way is a TTFT of 0.2 s or of 20 s, an observable no model of the server pins down
        cap = capacity.get(curve(d))
        if row.load_kind == "request_rate" and cap and row.load_value >= KNEE * cap:
            pub.pop("ttft_ms", None)
        # the table fills TPOT with the source's ITL where it gave no TPOT (its notes say so):
        # a median ITL is the typical gap, not the per-request TPOT's median
        if stat.get("tpot_ms") == "median" and "median ITL" in d.get("notes", ""):
            stat["tpot_ms"] = "itl_median"
        out.append(Sample(row, curve(d), d.get("accelerator", ""), _profile(row), pub, stat,
                          d.get("claim_kind", "")))
    return out


def load_table(path) -> list[Sample]:
    import csv
    from pathlib import Path
    rows = pr.read_rows(Path(path))
    with open(path, newline="") as fh:
        raw = list(csv.DictReader(fh))
    return samples_of(rows, raw)


# --- the free figures ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    path: tuple[str, str, str]  # (section, key, figure) in calibration
    prior: float
    lo: float
    hi: float


ACC_FIGS = (("memory", 0.75, 0.15, 1.0), ("compute", 0.5, 0.03, 1.0))
KERNEL_FACTORS = (("memory", 1.0, 0.5, 1.5), ("compute", 1.0, 0.3, 2.0))
GPU_OVERHEADS = (("step_overhead_ms", 2.0, 0.01, 60.0), ("seq_overhead_us", 5.0, 0.01, 500.0),
                 ("expert_half_rows", 64.0, 1.0, 4096.0))
NEURON_OVERHEADS = (("step_overhead_ms", 2.0, 0.01, 60.0), ("layer_overhead_us", 150.0, 1.0, 5000.0),
                    ("seq_layer_overhead_us", 5.0, 0.01, 500.0),
                    ("expert_half_rows", 64.0, 1.0, 4096.0),
                    ("context_compute", 0.3, 0.01, 1.0), ("context_layer_ms", 1.0, 0.01, 100.0))
# an engine that launches every layer's kernels from Python each step (no CUDA graphs): its
# launch cost per layer, per MoE layer (eager routing waits on the device) and per sequence
# and layer; priors from the eager layer timing on an H200 (docs/calibration/measured_here)
EAGER_OVERHEADS = (("step_overhead_ms", 2.0, 0.01, 60.0), ("layer_overhead_us", 500.0, 1.0, 5000.0),
                   ("moe_layer_overhead_us", 500.0, 1.0, 10000.0),
                   ("seq_layer_overhead_us", 5.0, 0.01, 500.0),
                   ("expert_half_rows", 64.0, 1.0, 4096.0))
MASKED_ATTENTION = (("masked_attention", 0.5, 0.05, 1.0),)
FRONTEND = (("frontend_ms", 2.0, 0.01, 100.0),)
INTERCONNECT = (("allreduce_us", 10.0, 0.3, 500.0),)
PLATFORM = {"cuda": (("gemm_half_tokens", 16.0, 0.1, 4096.0), ("gemm_half_width", 32.0, 0.1, 4096.0)),
            "neuron": (("gemm_half_tokens", 16.0, 0.1, 4096.0), ("gemm_half_width", 64.0, 0.1, 4096.0))}
# per tensor-core generation (hardware.yaml `tensor_cores`): the share of the 16-bit rate a
# GEMM reaches that dequantizes its weights as it goes
TENSOR_CORES = (("dequant_compute", 0.7, 0.1, 1.0),)
REFERENCE_KERNELS = {"cuda": "vllm", "neuron": "optimum-neuron"}


def _figure_paths(s: Sample) -> list[tuple[tuple[str, str, str], float, float, float]]:
    """The figures one sample's prediction depends on (none for an unsupported row)."""
    try:
        p = pr.plan(s.row)
    except Exception:  # noqa: BLE001 - an unsupported row informs nothing
        return []
    acc = p.config.instance.accelerator
    profile = p.config.profile()
    kernels = profile.kernels
    # the API server's time per request is its server's figure (trtllm-serve's is not
    # Triton's, though both run TensorRT-LLM's kernels)
    frontend = profile.frontend or kernels
    keys = [("accelerators", acc.calibration_name, ACC_FIGS),
            ("interconnects", acc.interconnect, INTERCONNECT if acc.interconnect != "none" else ()),
            ("platforms", acc.platform, PLATFORM.get(acc.platform, ())),
            # only a row whose weights are dequantized informs (or depends on) that share
            ("tensor_cores", acc.tensor_cores,
             TENSOR_CORES if acc.tensor_cores and PerfModel(p.config).dequantizes else ()),
            ("engines", kernels, (NEURON_OVERHEADS if acc.platform != "cuda"
                                  else EAGER_OVERHEADS if profile.launch == "eager"
                                  else GPU_OVERHEADS)
             + (() if REFERENCE_KERNELS.get(acc.platform) == kernels else KERNEL_FACTORS)
             + (MASKED_ATTENTION if profile.attention == "masked_batch" else ())),
            # a harness that feeds the engine in its own process informs no API server
            ("engines", frontend, () if p.in_process else FRONTEND)]
    return [((section, key, name), prior, lo, hi)
            for section, key, table in keys for name, prior, lo, hi in table]


def figures_for(samples: list[Sample]) -> list[Figure]:
    """The figures the rows can inform: their accelerators, engine stacks, interconnects and
    platforms (each engine stack's kernel factors relative to its platform's reference)."""
    figs: list[Figure] = []
    seen = set()
    for s in samples:
        for path, prior, lo, hi in _figure_paths(s):
            if path not in seen:
                seen.add(path)
                figs.append(Figure(path, prior, lo, hi))
    return figs


def sparsity(samples: list[Sample], figs: list[Figure]) -> np.ndarray:
    """Which residual depends on which figure (the optimizer's Jacobian then costs a few
    groups of figures that share no row, not one evaluation per figure): a sample's metrics
    on its own figures, each prior-pull term on its figure."""
    index = {f.path: i for i, f in enumerate(figs)}
    rows = []
    for s in samples:
        deps = [index[p] for p, *_ in _figure_paths(s) if p in index]
        for m in METRICS:
            if m in s.published:
                row = np.zeros(len(figs), dtype=bool)
                row[deps] = True
                rows.append(row)
    return np.vstack(rows + [np.eye(len(figs), dtype=bool)])


def to_cal(figs: list[Figure], x: np.ndarray, base: dict | None = None) -> dict:
    cal = copy.deepcopy(base or {})
    for f, v in zip(figs, np.exp(x), strict=True):
        cal.setdefault(f.path[0], {}).setdefault(f.path[1], {})[f.path[2]] = float(v)
    return cal


def from_cal(figs: list[Figure], cal: dict) -> np.ndarray:
    out = []
    for f in figs:
        v = (cal.get(f.path[0]) or {}).get(f.path[1], {}).get(f.path[2], f.prior)
        out.append(math.log(min(max(v, f.lo), f.hi)))
    return np.array(out)


# --- predictions -----------------------------------------------------------------------------
@dataclass
class Traced:
    """One row's virtual-time runs, ready to re-time."""
    sample: Sample
    parts: list = field(default_factory=list)  # (count, load, trace, plan)
    status: str = "ok"


def _schedule_one(args) -> Traced:
    s, cal = args
    parts: list = []
    pred = pr.simulate(s.row, cal, parts)
    return Traced(s, parts, pred.status)


def schedule(samples: list[Sample], cal: dict, jobs: int = 1) -> list[Traced]:
    """Every sample run once in virtual time under `cal`, its steps recorded."""
    work = [(s, cal) for s in samples]
    if jobs <= 1 or len(samples) < 8:
        return [_schedule_one(w) for w in work]
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_schedule_one, work, chunksize=8))


def _ends(d: np.ndarray, rel: tuple, frontend_s: float, pace: float) -> np.ndarray:
    """Each step's end time: steps back to back, none starting before the requests that
    reached the engine before it did (their send time, or `ref` step's end, plus the API
    server's queue). A fixed point, vectorized: a release that depends on a step's end is
    recomputed until no end moves (each pass settles one more link of the chain)."""
    cum = np.cumsum(d)
    if not len(rel[0]):
        return cum
    steps, refs, offs, queued = rel
    base = offs * pace + queued * frontend_s
    absolute = refs < 0
    ends = cum
    for _ in range(200):
        release = base + np.where(absolute, 0.0, ends[np.maximum(refs, 0)])
        need = np.full(len(d), -np.inf)
        np.maximum.at(need, steps, release)
        # start_s = max(end_{s-1}, need_s): end_s = cum_s + max_{j<=s}(need_j - cum_{j-1}, 0)
        prev = np.concatenate(([0.0], cum[:-1]))
        shift = np.maximum.accumulate(np.maximum(need - prev, 0.0))
        new = cum + shift
        if np.allclose(new, ends, rtol=0, atol=1e-12):
            return new
        ends = new
    return ends


def _retime(count, load, trace, plan, cal, cache) -> tuple:
    key = id(trace)
    if key not in cache:
        f = np.array(trace.features, dtype=float)
        entries = [(i, *r) for i, reqs in enumerate(trace.release) if reqs for r in reqs]
        a = np.array(entries, dtype=float).reshape(-1, 4)
        rel = (a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2], a[:, 3])
        g = np.array(trace.groups, dtype=float)
        cache[key] = (f.T.copy(), np.array(trace.counts, dtype=float), rel, g,
                      np.array(trace.decoding, dtype=float),
                      PerfModel(plan.config, plan.kv_bytes_per_value))
    feats, counts, rel, g, dec, model = cache[key]
    model.set_efficiency(plan.config.profile().figures(plan.config.instance.accelerator, cal))
    d = counts * model.time(*feats)
    # an open loop's arrivals keep their pace relative to the engine's: re-timed at other
    # figures, the recorded batches cannot absorb a slower engine's backlog (a real
    # scheduler would batch more), so the surrogate scales the arrival times with the busy
    # time instead; the true cost of each proposal (a fresh schedule) settles the rest
    pace = float(d.sum()) / trace.busy if load.kind == "request_rate" and trace.busy else 1.0
    ends = _ends(d, rel, plan.frontend_s(model), pace)
    n, ref, off, out = g[:, 0], g[:, 1].astype(int), g[:, 2], g[:, 5]
    sent = np.where(ref >= 0, ends[np.maximum(ref, 0)], 0.0) + off * pace
    first, finish = ends[g[:, 3].astype(int)], ends[g[:, 4].astype(int)]
    ttft = first - sent
    tpot = (finish - first) / np.maximum(out - 1, 1)
    duration = float(finish.max() - sent.min())
    mask = dec > 0
    itl = weighted_median(d[mask] / counts[mask], dec[mask] * counts[mask]) if mask.any() else 0.0
    return (count, duration, float((n * out).sum()), float(n.sum()), ttft, tpot, n, itl)


def replay(traced: list[Traced], cal: dict, cache: dict) -> list[dict[str, float] | None]:
    """Each row's predicted metrics under `cal`, from its recorded schedule."""
    out = []
    for t in traced:
        if t.status != "ok" or not t.parts:
            out.append(None)
            continue
        parts = [_retime(*p, cal, cache) for p in t.parts]
        duration = max(p[1] for p in parts)
        tokens = sum(p[0] * p[2] for p in parts)
        reqs = sum(p[0] * p[3] for p in parts)
        ttft = np.concatenate([p[4] for p in parts])
        tpot = np.concatenate([p[5] for p in parts])
        w = np.concatenate([p[0] * p[6] for p in parts])
        stat = t.sample.stat
        itl = weighted_median(np.array([p[7] for p in parts]), np.array([p[0] * p[3] for p in parts]))
        out.append({
            "tok_s": tokens / duration, "req_s": reqs / duration,
            "ttft_ms": 1e3 * (weighted_median(ttft, w) if stat.get("ttft_ms") != "mean"
                              else float((ttft * w).sum() / w.sum())),
            "tpot_ms": 1e3 * (itl if stat.get("tpot_ms") == "itl_median"
                              else weighted_median(tpot, w) if stat.get("tpot_ms") != "mean"
                              else float((tpot * w).sum() / w.sum()))})
    return out


def residuals(preds, samples) -> np.ndarray:
    r = []
    for p, s in zip(preds, samples, strict=True):
        for m in METRICS:
            if m in s.published:
                r.append(WEIGHTS[m] * (math.log(max(p[m], 1e-12) / s.published[m]) if p else 3.0))
    return np.array(r)


def fit(samples: list[Sample], base: dict | None = None, rounds: int = 8,
        max_nfev: int = 30, log=None, jobs: int = 1) -> tuple[dict, list[Figure]]:
    """Figures fitted to `samples`, starting from `base` (or the priors).

    A trust region on the true cost. Each round optimizes a surrogate, the recorded schedule
    of the current figures re-timed under candidate ones, within a factor `step` of them;
    then schedules every sample under the proposal for its true cost (a schedule recorded
    under figures far from the candidate ones misleads: an open loop that a slower engine
    would batch differently, say). A proposal that lowers the true cost is taken and its
    schedule is the next surrogate; one that does not halves the step."""
    from scipy.optimize import least_squares

    figs = figures_for(samples)
    prior = np.array([math.log(f.prior) for f in figs])
    lo = np.array([math.log(f.lo) for f in figs])
    hi = np.array([math.log(f.hi) for f in figs])
    x = np.clip(from_cal(figs, base or {}), lo + 1e-9, hi - 1e-9)

    def surrogate(traced):
        cache: dict = {}

        def fun(v):
            preds = replay(traced, to_cal(figs, v, base), cache)
            return np.concatenate([residuals(preds, samples), PRIOR_PULL * (v - prior)])
        return fun

    pattern = sparsity(samples, figs)
    traced = schedule(samples, to_cal(figs, x, base), jobs)
    fun = surrogate(traced)
    cost, step = float(_robust(fun(x)).sum()), TRUST_STEP  # exact: the schedule is x's own
    if log:
        log(f"start: cost {cost:.3f}")
    for rnd in range(1, rounds + 1):
        lo_r, hi_r = np.maximum(lo, x - step), np.minimum(hi, x + step)
        # soft_l1: a row the physics cannot explain (a source's pathological run) pulls the
        # figures like a 0.3 log-error row, not without bound
        res = least_squares(fun, np.clip(x, lo_r + 1e-9, hi_r - 1e-9), bounds=(lo_r, hi_r),
                            max_nfev=max_nfev, x_scale=1.0, diff_step=0.02, loss="soft_l1",
                            f_scale=F_SCALE, jac_sparsity=pattern)
        new_traced = schedule(samples, to_cal(figs, res.x, base), jobs)
        new_fun = surrogate(new_traced)
        new_cost = float(_robust(new_fun(res.x)).sum())
        taken = new_cost < cost
        if log:
            log(f"round {rnd}: step x{math.exp(step):.2f}, cost {new_cost:.3f} "
                f"({'taken' if taken else 'not taken'})")
        if taken:
            converged = cost - new_cost < 1e-3 * cost
            x, cost, fun = res.x, new_cost, new_fun
            if converged:
                break
        else:
            step /= 2
            if step < 0.01:
                break
    return to_cal(figs, x, base), figs


TRUST_STEP = math.log(1.6)
F_SCALE = 0.3


def _robust(r: np.ndarray) -> np.ndarray:
    """scipy's soft_l1 cost of residuals r (what least_squares minimizes, times 2)."""
    z = (r / F_SCALE) ** 2
    return F_SCALE ** 2 * 2 * (np.sqrt(1 + z) - 1)


def predict_samples(samples: list[Sample], cal: dict, jobs: int = 1) -> list[dict[str, float] | None]:
    traced = schedule(samples, cal, jobs)
    return replay(traced, cal, {})



__all__ = ["RowError", "load_table", "fit", "predict_samples"]
