"""The stand-in's start and first-run counts: kept in a file, and a file they cannot keep is said at once."""
from __future__ import annotations

import pytest

from orchestrator.sim.standin.base import SimError
from orchestrator.sim.standin.crash_loop import CRASH, count_start
from orchestrator.sim.standin.speed import FirstRunFast


def test_the_crash_loop_counts_starts_in_its_file(tmp_path):
    env = {"SIM_FAULT_CRASH_AFTER_STARTS": "1", "SIM_FAULT_START_STATE": str(tmp_path / "starts")}
    count_start(env, 0)  # the first start serves
    with pytest.raises(SimError, match=CRASH):
        count_start(env, 0)
    assert (tmp_path / "starts").read_text() == "2"


@pytest.mark.parametrize("make", [
    lambda path: count_start({"SIM_FAULT_CRASH_AFTER_STARTS": "1", "SIM_FAULT_START_STATE": path}, 0),
    lambda path: FirstRunFast.from_env({"SIM_FAULT_FIRST_RUN_FAST": "2", "SIM_FAULT_FIRST_RUN_STATE": path}),
], ids=["crash-loop", "first-run-fast"])
def test_a_count_it_cannot_keep_is_the_fault_misconfigured(tmp_path, make):
    where = str(tmp_path / "no-such-dir" / "count")
    with pytest.raises(SimError, match="cannot keep its count in " + where):
        make(where)
