"""The streaming load generator (issue 3): drives an OpenAI-compatible endpoint and records.

    from resources.loadgen import LoadConfig, run_load
    result = run_load(LoadConfig(endpoint="http://127.0.0.1:8000", model="m"), Path("run"))

The load side only records (SPEC §2.2/§2.3); metrics come from `resources.analysis`.
"""

from resources.loadgen.config import ConfigError, LoadConfig
from resources.loadgen.probe import LoadError
from resources.loadgen.recorder import RunExistsError
from resources.loadgen.runner import LoadResult, run_load

__all__ = ["ConfigError", "LoadConfig", "LoadError", "LoadResult", "RunExistsError", "run_load"]
