"""Episodes, spot runs and several-model runs in the terminal, after `servingbench demo`:
what the analyzer wrote (contract §3.7 episode.json and scale_events.parquet, §3.8
interruptions.parquet and the spot pairs, §3.9 derived_metrics_by_model.parquet), one line
each, every line opening with EMULATED or MEASURED from the run's manifest `source`.

Per episode: SLO attainment, replica-hours, idle cost and cost per 1M output tokens over the
whole steady phase, then each scale-up's decision → ready → first-token seconds. Per spot
run: its billed cost per 1M, requests lost and recovered (resent ok), each recovery's
seconds and the effective discount beside the what-if spot discount. Per several-model run:
each model's TTFT p99 during and outside another model's swap and its attributed cost per
1M (labelled attributed) beside the node's billed cost per 1M of the step.
"""

from __future__ import annotations

import json
from pathlib import Path

from servingbench.resources.contract import run_files


def _label(manifest: dict) -> str:
    return "EMULATED" if manifest.get("source") == "emulated" else "MEASURED"


def _rows(d: Path, name: str) -> list[dict] | None:
    import pyarrow.parquet as pq

    path = d / f"{name}.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else None


def _s(v, unit: str = " s") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def _usd(v) -> str:
    if v is None:
        return "-"  # no accepted bill, or no output token to divide by
    return f"${v:,.2f}" if abs(v) >= 1 else f"${v:.4g}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def episode_lines(d: Path, m: dict) -> list[str]:
    ep = run_files.read_episode(d)
    if ep is None:
        return []
    tag, name = _label(m), m.get("candidate")
    rs = ep["replica_seconds"]
    out = [f"{tag}  {name}: episode {ep['duration_s']:.0f} s, SLO attainment "
           f"{_pct(ep['slo_attainment'])}, replica-hours "
           f"{'-' if rs is None else f'{rs / 3600:.4f}'}, idle cost {_usd(ep['idle_cost_usd'])}, "
           f"cost per 1M output tokens over the episode {_usd(ep['cost_per_1m_output_usd'])}"]
    for e in _rows(d, "scale_events") or []:
        if e["direction"] != "up":
            continue
        out.append(f"{tag}    scale-up {e['from_replicas']} -> {e['to_replicas']}: decision -> "
                   f"ready {_s(e['replica_ready_s'])} -> first token {_s(e['first_token_s'])}")
    return out


def _what_if(m: dict) -> float | None:
    prices = {b.get("basis"): b.get("hourly_usd_per_node") for b in m.get("price_bases") or []}
    od = prices.get("on_demand") or (m.get("price_basis") or {}).get("hourly_usd_per_node")
    spot = prices.get("spot")
    return None if spot is None or not od else 1 - spot / od


def _billed_per_1m(d: Path) -> float | None:
    ep = run_files.read_episode(d)
    if ep is not None:
        return ep["cost_per_1m_output_usd"]
    rows = _rows(d, "headline") or []
    return rows[0]["cost_per_1m_output_usd"] if rows else None


def spot_lines(d: Path, m: dict, pairs: list[dict]) -> list[str]:
    cuts = _rows(d, "interruptions")
    if cuts is None:
        return []
    tag, name = _label(m), m.get("candidate")
    pair = next((p for p in pairs if p["spot_run_id"] == m["run_id"]), None)
    recovery = [c["replacement_ready_s"] for c in cuts if c["replacement_ready_s"] is not None]
    what_if = pair["what_if_spot_discount"] if pair else _what_if(m)
    effective = (_pct(pair["effective_discount"]) if pair
                 else "- (no accepted on-demand run to pair with)")
    return [f"{tag}  {name}: spot, billed cost per 1M {_usd(_billed_per_1m(d))}; "
            f"{len(cuts)} interruption notices, requests lost "
            f"{sum(c['lost'] or 0 for c in cuts)}, recovered (resent ok) "
            f"{sum(c['retried_ok'] or 0 for c in cuts)}; recovery "
            f"{', '.join(f'{r:.2f} s' for r in recovery) or '-'}; effective discount "
            f"{effective} beside the what-if spot discount {_pct(what_if)} (price list)"]


def model_lines(d: Path, m: dict) -> list[str]:
    rows = _rows(d, "derived_metrics_by_model")
    if rows is None:
        return []
    tag, name = _label(m), m.get("candidate")
    billed = {r["step"]: r["cost_per_1m_output_usd"] for r in _rows(d, "cost_per_1m") or []}
    out = [f"{tag}  {name}: {len({r['model'] for r in rows})} models on one node"]
    for r in rows:
        out.append(f"{tag}    {r['step']} {r['model']}: TTFT p99 during swaps "
                   f"{_s(r['ttft_s_p99_during_swap'])}, outside {_s(r['ttft_s_p99_outside_swap'])}; "
                   f"ATTRIBUTED cost per 1M {_usd(r['attributed_cost_per_1m_output_usd'])} beside "
                   f"the node's BILLED {_usd(billed.get(r['step']))} (all models)")
    return out


def text(run_dirs: list[str]) -> str:
    """The lines of every run that has an episode, interruptions or several models ('' when
    none has)."""
    from servingbench.resources.analysis.spot import pairs_of_folders

    dirs = [Path(d) for d in run_dirs]
    pairs = pairs_of_folders(dirs, skip_broken=True).to_pylist()
    out: list[str] = []
    for d in dirs:
        m = json.loads((d / "manifest.json").read_text())
        out += episode_lines(d, m) + spot_lines(d, m, pairs) + model_lines(d, m)
    return "\n".join(out)
