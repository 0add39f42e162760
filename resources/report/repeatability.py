"""Repeatability: when a step was run several times (several runs of one candidate), its
spread - min / median / max, and a t-based 95 % confidence interval of the mean when
n >= 3 - instead of one number.

Only valid steps count (an invalid step is never ranked, contract §3), and measured and
emulated runs are never pooled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from servingbench.resources.report.rundata import RunData

# Two-sided 95 %: the 0.975 quantile of Student's t with df = 1..30 degrees of freedom.
_T975 = (
    12.706204736174698, 4.302652729749464, 3.182446305284263, 2.7764451051977934,
    2.570581835636314, 2.4469118511449692, 2.3646242515927844, 2.306004135204166,
    2.2621571628540993, 2.2281388519649385, 2.2009851600916384, 2.1788128296672284,
    2.1603686564627917, 2.1447866879169273, 2.131449545559323, 2.1199052992210112,
    2.1098155778331806, 2.10092204024096, 2.093024054408263, 2.0859634472658364,
    2.079613844727662, 2.0738730679040147, 2.0686576104190406, 2.0638985616280205,
    2.059538552753294, 2.055529438642871, 2.0518305164802833, 2.048407141795244,
    2.045229642132703, 2.0422724563012373,
)
_Z975 = 1.959963984540054

# The figures whose spread the report shows: (column, label, source frame).
SPREAD_METRICS = (
    ("output_tok_s", "output tokens/s", "metrics"),
    ("ttft_s_p99", "p99 TTFT (s)", "metrics"),
    ("tpot_s_p99", "p99 TPOT (s)", "metrics"),
    ("cost_per_1m_output_usd", "USD per 1M output tokens", "cost"),
)


def t_975(df: int) -> float:
    """0.975 quantile of Student's t: exact table to df = 30, then the Cornish-Fisher
    expansion (Abramowitz & Stegun 26.7.5), within 1e-6 there."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


@dataclass(frozen=True)
class Spread:
    n: int
    min: float
    median: float
    max: float
    mean: float
    ci_low: float | None    # t-based 95 % CI of the mean; None when n < 3
    ci_high: float | None

    def as_dict(self) -> dict:
        return dict(n=self.n, min=self.min, median=self.median, max=self.max, mean=self.mean,
                    ci95_low=self.ci_low, ci95_high=self.ci_high)


def spread(values) -> Spread | None:
    """The spread of the non-null values; None when there is none."""
    xs = sorted(float(v) for v in values if v is not None and not pd.isna(v))
    n = len(xs)
    if n == 0:
        return None
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    mean = math.fsum(xs) / n
    low = high = None
    if n >= 3:
        sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
        half = t_975(n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    return Spread(n, xs[0], median, xs[-1], mean, low, high)


def step_spreads(runs: list[RunData]) -> pd.DataFrame:
    """One row per candidate x source x step x metric over the valid occurrences of the
    step in `runs`: candidate, source, step, metric, label, n, min, median, max, mean,
    ci95_low, ci95_high, run_ids. Steps seen in a single run are included with n = 1."""
    samples: dict[tuple, list[tuple[str, float]]] = {}
    order: dict[tuple, tuple] = {}
    for run in runs:
        if run.metrics is None:
            continue
        source = "emulated" if run.emulated else "measured"
        cost = {}
        if run.cost is not None:
            cost = dict(zip(run.cost["step"], run.cost["cost_per_1m_output_usd"], strict=True))
        for row in run.metrics.itertuples(index=False):
            if not bool(row.valid):
                continue
            for column, _, frame in SPREAD_METRICS:
                value = cost.get(row.step) if frame == "cost" else getattr(row, column)
                key = (run.candidate, source, row.step, column)
                order.setdefault(key, (run.candidate, source, row.load_mode, row.target))
                if value is not None and not pd.isna(value):
                    samples.setdefault(key, []).append((run.run_id, float(value)))
    labels = {c: label for c, label, _ in SPREAD_METRICS}
    metric_rank = {c: i for i, (c, _, _) in enumerate(SPREAD_METRICS)}
    rows = []
    for key in sorted(samples, key=lambda k: (*order[k], metric_rank[k[3]])):
        candidate, source, step, column = key
        s = spread([v for _, v in samples[key]])
        rows.append(dict(candidate=candidate, source=source, step=step, metric=column,
                         label=labels[column], **s.as_dict(),
                         run_ids=[r for r, _ in samples[key]]))
    columns = ["candidate", "source", "step", "metric", "label", "n", "min", "median", "max",
               "mean", "ci95_low", "ci95_high", "run_ids"]
    return pd.DataFrame(rows, columns=columns)
