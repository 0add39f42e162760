"""What a finished load run returns (`run_load`, one process or several workers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LoadResult:
    run_id: str
    run_dir: Path
    source: str
    n_requests: int  # steady requests recorded
    n_warmup: int
    steps: list[dict]  # the manifest's steps[]
    statuses: dict[str, int] = field(default_factory=dict)  # steady requests per status
    prompt_token_mismatches: int = 0  # steady requests whose usage.prompt_tokens != the target
    interrupted: bool = False
    workers: list[dict] = field(default_factory=list)  # several workers: the manifest's workers[]
    ladder_stop: str | None = None  # a ladder: why it stopped at its last step

    @property
    def failed_workers(self) -> list[dict]:
        return [w for w in self.workers if w["status"] != "ok"]
