"""Fleet-scale helpers: small candidates files with pools, and the provision → teardown
interval each run folder records."""

from __future__ import annotations

import json
from pathlib import Path

from servingbench.resources.contract.timestamps import parse_ts

REPO = Path(__file__).resolve().parents[2]
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def candidates_file(tmp_path: Path, types: dict[str, str], pools: str | None = None,
                    requests: int = 4, extra: dict[str, str] | None = None) -> Path:
    """A candidates file: name -> instance type, a short load, `pools` as YAML flow text."""
    lines = [f"pools: {pools}"] if pools is not None else []
    lines.append("candidates:")
    for name, itype in types.items():
        more = f", {extra[name]}" if extra and name in extra else ""
        lines.append(
            f"  - {{name: {name}, instance_type: {itype}, model: {SCOUT}, precision: bf16, "
            "tensor_parallel: 8, scenario: {input_tokens: 64, output_tokens: 16, dataset: null}, "
            f"load: {{concurrency: [2], requests_per_step: {requests}, warmup_requests: 1}}, "
            f"price: {{sheet: {REPO / 'pipelines' / 'price_sheet.yaml'}}}{more}}}")
    path = tmp_path / "c.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def intervals(runs_dir: Path) -> dict[str, tuple[int, int]]:
    """candidate -> (provision started, teardown done) in epoch ns: the manifest's provision
    phase and the release stamped in pool.json after teardown."""
    out = {}
    for run_dir in sorted(Path(runs_dir).iterdir()):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        pool = json.loads((run_dir / "pool.json").read_text())
        out[manifest["candidate"]] = (parse_ts(manifest["phases"]["provision"]["started_at"]),
                                      parse_ts(pool["released_at"]))
    return out
