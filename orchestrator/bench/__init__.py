"""`spark-deploy bench`: the field's measuring protocol (field notes 14-21) as a command.

client (streamed requests, timed per chunk) -> shot (one measured request with its /metrics deltas and
discard rules) -> runner (shots per profile and concurrency) -> stats (median, spread, acceptance,
saturation) -> render/report (terminal table, JSON, chart). ceiling reads safetensors headers (note 18).
"""
