"""`spark-deploy maintenance begin|verify|end`: a baseline of every node before a window, a drift report
after it, and the serving release brought back through the normal rollback.

    begin  -> preflight, the facts per node and the serving release written to every node (window/baseline.py,
              window/store.py); optionally the release stopped, kept (stop.py)
    verify -> the same facts now, compared with the baseline (diff.py, pure), and what that means
    end    -> verify, a `rollback` to the baseline's release when it no longer serves, the window closed
"""
