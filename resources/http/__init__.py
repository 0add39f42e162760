"""HTTP reads of servers we do not control, bounded in size and time: shared by the load
generator (probe, /tokenize, /metrics) and the model servers (readiness, version)."""
