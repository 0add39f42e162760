"""Where a candidate runs: the `Cluster` interface, this host (the embedded default), and
one EKS managed node group per run with its reaper."""
