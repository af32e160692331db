"""`up`'s terminal output at the three levels, through the real command line on the simulated pair: by default
preflight's ~30 check lines are one summary on its end line; `-v` prints each of them (as many as the
summary counts); `-q` prints only the result."""

from __future__ import annotations

import re

import pytest

from deploy_helpers import spark_deploy

pytestmark = pytest.mark.integration

CHECK_LINE = re.compile(r"^  (\S+): (ok|skip|warn|fail)\b.* — ")


def _phase(stdout: str, phase: str) -> list[str]:
    """The lines from `→ phase` to its `✓ phase` end line, both included."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"→ {phase}"))
    end = next(i for i in range(start, len(lines)) if re.match(rf"^[✓✗] {phase} ", lines[i]))
    return lines[start:end + 1]


def test_up_sums_up_its_checks_by_default_says_each_with_v_and_only_the_result_with_q(pair):
    inventory = pair.inventory_path
    served = spark_deploy("up", pair.recipe_path, "-i", inventory, timeout=600)
    assert served.returncode == 0, served.stdout + served.stderr

    plain = spark_deploy("up", pair.recipe_path, "-i", inventory)  # already serving: connect, lock, preflight
    assert plain.returncode == 0 and "already serving" in plain.stdout, plain.stdout + plain.stderr
    preflight = _phase(plain.stdout, "preflight")
    summary = re.search(r"— (\d+) checks(?:: | ok)(?:(\d+) ok)?", preflight[-1])
    assert summary, preflight
    total = int(summary.group(1))
    ok = int(summary.group(2) or total)
    assert total >= 20, preflight[-1]
    assert not [line for line in preflight if CHECK_LINE.match(line) and CHECK_LINE.match(line).group(2) == "ok"]
    assert len(preflight) <= 2 + (total - ok), preflight  # the start, the end, a line per check not ok at most

    verbose = spark_deploy("up", pair.recipe_path, "-i", inventory, "-v")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    each = [line for line in _phase(verbose.stdout, "preflight") if CHECK_LINE.match(line)]
    assert len(each) == total and sum(1 for line in each if CHECK_LINE.match(line).group(2) == "ok") == ok, each
    assert _phase(verbose.stdout, "preflight")[-1].split("— ", 1)[1] == preflight[-1].split("— ", 1)[1]

    quiet = spark_deploy("up", pair.recipe_path, "-i", inventory, "-q")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout.splitlines() == [line for line in plain.stdout.splitlines()
                                         if line.startswith("already serving")], quiet.stdout
    assert quiet.stderr == "", quiet.stderr
