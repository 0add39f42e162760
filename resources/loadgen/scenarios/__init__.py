"""Workloads beyond fixed-length single requests: multi-turn sessions, trace replay, batch
jobs and the SLO capacity search. `spec` says what a scenario is (and validates it); the
other modules drive the steady phase of a run for one kind each (docs/workloads.md)."""
