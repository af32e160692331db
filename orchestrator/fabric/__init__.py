"""The fabric measured: every pair's bandwidth both ways and latency (measure), the figures and the
baseline kept on the nodes (baseline), and the judgment of a new run against it (judge)."""
