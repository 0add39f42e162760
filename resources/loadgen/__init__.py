"""The streaming load generator: drives an OpenAI-compatible endpoint and records.

    from servingbench.resources.loadgen import LoadConfig, run_load
    result = run_load(LoadConfig(endpoint="http://127.0.0.1:8000", model="m"), Path("run"))

The load side only records (contract §2.2/§2.3); metrics come from `servingbench.resources.analysis`.
`run_load` and `LoadResult` are imported on first use (pyarrow is heavy).
"""

from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import (
    DiskFullError,
    LoadConfigError,
    LoadError,
    RunExistsError,
)

__all__ = ["DiskFullError", "LoadConfig", "LoadConfigError", "LoadError", "LoadResult", "RunExistsError", "run_load"]


def __getattr__(name: str):
    if name in ("run_load", "LoadResult"):
        from servingbench.resources.loadgen import execute

        return getattr(execute, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
