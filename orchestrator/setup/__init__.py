"""`spark-deploy setup`: from fresh nodes to a validated inventory (issue 20).

hostkeys (fetch, fingerprint, known_hosts) -> login (a key that works, or a new one installed once with a
password) -> facts (what each node shows, read only: a command plus a pure parser) -> fabric (which
interface pair the nodes reach each other on, proven by probes) -> judge (what a person must fix) ->
document (the inventory, a comment on each value saying where it came from) -> run (the whole, in order).
"""
