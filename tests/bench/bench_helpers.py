"""Running the real `spark-deploy bench` CLI from the bench tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SPARK_DEPLOY = Path(sys.executable).with_name("spark-deploy")


def bench_cli(*args: str, timeout: float = 300) -> tuple[int, dict | None, str]:
    """Run the installed `spark-deploy bench` (a real process); (exit code, parsed --json output, stderr)."""
    cmd = [str(SPARK_DEPLOY), "bench", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    data = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
    return res.returncode, data, res.stderr + res.stdout
