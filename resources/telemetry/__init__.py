"""Accelerator and engine telemetry beside every step (contract §2.5): a background sampler
that reads DCGM exporter, neuron-monitor, the engine's own /metrics and the engine process's
host usage at a fixed interval and writes `telemetry.parquet`. It only records: the
per-step figures are derived by the analyzer (sql/telemetry_metrics.sql)."""

from servingbench.resources.telemetry.sampler import Sampler, sources_from

__all__ = ["Sampler", "sources_from"]
