"""Other targets rendered from the same Plan as `up`: today a Kubernetes LeaderWorkerSet."""
