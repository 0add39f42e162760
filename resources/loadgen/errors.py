"""The load generator's user-facing errors (light: no heavy imports, for a fast CLI)."""

from __future__ import annotations


class LoadConfigError(ValueError):
    """A load configuration that cannot run; the message says which field and why."""


class LoadError(RuntimeError):
    """The run cannot start or go on (unreachable endpoint, refused auth, bad model...)."""


class LeftBehind(RuntimeError):
    """A pod reached a meeting of the pods after it closed: it runs no further step (it
    would overlap the others' next one) and keeps what it recorded (workers/podsync.py)."""


class RunExistsError(FileExistsError):
    """The run folder already holds request logs: a rerun never overwrites a run."""


class DiskFullError(RuntimeError):
    """The disk (or a quota, or a file-size limit) refused a write: the run stops, what was
    flushed before stays readable. `path` is the file that could not be written."""

    def __init__(self, path, reason: str) -> None:
        super().__init__(f"disk full: cannot write {path} ({reason})")
        self.path, self.reason = path, reason
        self.kept: dict[str, int] = {}       # records on disk, per record set
        self.unwritten: dict[str, int] = {}  # records finished after the stop, per record set
        self.manifest_kept = True  # False: the final manifest did not fit either

    def report(self, run_dir) -> str:
        """What a person needs to know: why it stopped, what is kept, what is missing."""
        kept = ", ".join(f"{n} {k}" for k, n in self.kept.items()) or "no records"
        lost = ", ".join(f"{n} {k}" for k, n in self.unwritten.items() if n)
        text = (f"{self}; the run stopped. Kept in {run_dir}: {kept} (complete batches of the "
                "partial streams; `servingbench analyze` reads them once there is room for its "
                "outputs)")
        text += f"; not written: {lost}" if lost else "; nothing finished was lost"
        if not self.manifest_kept:
            text += ("; the final manifest did not fit either: manifest.json is the one of the "
                     "last step boundary")
        return text
