"""What serves the candidate's model: the `ModelServer` interface, the engine emulator (the
embedded default) and the engine as a Kubernetes Deployment (kube/)."""
