"""The load generator as a Kubernetes Indexed Job (the eks profile with load pods): the Job
manifest (render.py), its lifecycle on the cluster (job.py: create, watch, read the pods
that failed, delete) and the run that collects the pods' shards from S3 and merges them
(generator.py). It composes the Kubernetes client (model_server/kube), the run store (storage)
and the load generator's shard merge; none of those knows about the others."""
