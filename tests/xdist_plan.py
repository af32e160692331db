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

# seconds per file (junit times summed) from one `scripts/test` run at -n 3 on this machine, 2026-12-01;
# unlisted files weigh 0.2 s a test. Only the order matters: refresh it when a file grows a lot.
WEIGHTS: dict[str, float] = {
    "tests/integration/test_up.py": 356,
    "tests/integration/test_hardening.py": 235,
    "tests/integration/test_image_sync.py": 222,
    "tests/integration/test_releases.py": 222,
    "tests/integration/test_boot.py": 140,  # + a node rebooted alone, twice (issue 23), 2026-12-04
    "tests/integration/test_maintenance.py": 99,
    "tests/integration/test_release_guard.py": 96,
    "tests/integration/test_plan.py": 83,
    "tests/integration/test_waits.py": 68,
    "tests/integration/test_acceptance.py": 45,
    "tests/integration/test_sim_boot.py": 67,
    "tests/bench/test_bench_accuracy.py": 60,
    "tests/integration/test_preflight_host.py": 54,
    "tests/integration/test_sim_by_hand.py": 51,
    "tests/bench/test_bench_compare.py": 50,
    "tests/integration/test_preflight.py": 47,
    "tests/integration/test_preflight_model.py": 39,
    "tests/integration/test_model_pull.py": 45,
    "tests/integration/test_model_fit.py": 15,
    # files added 2026-12-07, their times from single runs on this machine (loaded), for the order only
    "tests/integration/test_engine_fingerprint.py": 200,
    "tests/integration/test_restart.py": 110,
    "tests/integration/test_supervisor.py": 280,  # four ups and recoveries on the systemd pair, 2026-12-07
    "tests/bench/test_bench_replicates.py": 90,
    "tests/integration/test_fit.py": 80,
    "tests/integration/test_fabric_test.py": 70,
    "tests/integration/test_interrupt_restore.py": 60,
    "tests/integration/test_upgrade.py": 60,
    "tests/integration/test_preflight_overlays.py": 60,
    "tests/integration/test_cluster_identity.py": 50,
    "tests/integration/test_overrides.py": 36,
    "tests/integration/test_getting_started.py": 50,  # the page run as written, one up + rollback, 2026-12-07
    "tests/integration/test_interrupt_exit_codes.py": 130,  # + bench interrupted after kept shots, 2026-12-07
    "tests/integration/test_output_levels.py": 55,  # up at -q, default, -v, 2026-12-07
    "tests/integration/test_setup.py": 30,
    "tests/integration/test_image_layers.py": 26,
    "tests/integration/test_transport.py": 37,
    "tests/bench/test_bench_protocol.py": 35,
    "tests/unit/test_render_property.py": 31,
    "tests/integration/test_preflight_vllm.py": 31,
    "tests/integration/test_sim_cluster.py": 30,
    "tests/sim/test_vllm_sim.py": 25,
    "tests/integration/test_demo.py": 24,
    "tests/integration/test_standin_oom.py": 19,
    "tests/sim/test_standin_speed.py": 18,
    "tests/bench/test_bench_discards.py": 16,
    "tests/unit/test_config_limits.py": 16,
    "tests/bench/test_bench_recipe.py": 15,
    "tests/unit/test_render_report.py": 14,
    "tests/unit/test_config_corpus.py": 13,
    "tests/integration/test_image_variants.py": 8,
    "tests/unit/test_secrets.py": 8,
    "tests/sim/test_standin_cli.py": 5,
    "tests/unit/test_cli_conventions.py": 8,
    "tests/unit/test_local_checks.py": 4,
    "tests/unit/test_preflight_vllm_unit.py": 3,
    "tests/unit/test_boot_unit.py": 2,
    "tests/unit/test_plan_hash.py": 2,
    "tests/unit/test_transport_group.py": 2,
}


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
