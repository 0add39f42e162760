"""Kubernetes side of the eks profile: manifests, a small REST client authenticated with an
STS-presigned EKS token, rollout waits, and cold-start sub-phases."""
