"""Several replicas of one engine on this host: HAProxy in front (balancer.py), the replicas
it routes to (replicas.py), the `local` autoscaling rule (autoscale_rule.py, KEDA/HPA's) and
its loop (autoscale_loop.py), the pool's summed /metrics (summed_metrics.py), the run's
events.parquet (events.py), and the deployment that puts them together (replicated.py)."""
