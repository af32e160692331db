"""`watch`: samples of the serving release (ranks, memory, SM clock, /metrics), judged, shown live, written
as Prometheus text; docs/watch.md."""
