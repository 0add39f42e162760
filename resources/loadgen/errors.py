"""The load generator's user-facing errors (light: no heavy imports, for a fast CLI)."""

from __future__ import annotations


class LoadError(RuntimeError):
    """The run cannot start or go on (unreachable endpoint, refused auth, bad model...)."""


class RunExistsError(FileExistsError):
    """The run folder already holds request logs: a rerun never overwrites a run."""
