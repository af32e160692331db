"""Issue 18 acceptance 4: RoCE on the simulated Spark.

`sim fault NODE roce` gives a node the HCA a Spark shows (rocep1s0f0 port 1: index 0/1 the link-local GID
as RoCE v1/v2, 2/3 the fabric IP as RoCE v1/v2; orchestrator/sim/node_roce.py) and breaks it the ways a
real one breaks. preflight's roce-hca and roce-gid pass on the Spark's HCA at index 3 and fail naming node,
HCA, index and what the entry is; `up` on profile roce shows NCCL's `NET/IB : Using` line on every node,
and with the HCA check skipped, an NCCL_IB_HCA that matches nothing (NCCL falls back to sockets, serves,
and says so in one INFO line) fails up's log check naming the nodes, and the release before serves again.
"""

from __future__ import annotations


import pytest

from deploy_helpers import inventory_variant, node_docker, plan_names, spark_deploy
from orchestrator.sim import node_roce
import cli_json

pytestmark = pytest.mark.integration


def roce_inventory(cluster, dest, **link) -> str:
    """The cluster's inventory on profile roce (the Spark's HCA and GID index unless `link` says else)."""
    return inventory_variant(cluster, dest, **{"profile": "roce", "hca": node_roce.SPARK_HCA,
                                               "gid_index": node_roce.SPARK_GID_INDEX, **link})


def roce_checks(cluster, inventory: str) -> tuple[int, dict]:
    r = spark_deploy("preflight", cluster.recipe_path, "-i", inventory, "--only", "roce-hca", "--only", "roce-gid",
                     "--json")
    assert r.stdout.startswith("{"), r.stderr
    return r.returncode, {c["name"]: c for c in cli_json.result(r.stdout)["checks"]}


def cells(check: dict) -> dict[str, tuple[str, str]]:
    return {node: (c["status"], c["value"]) for node, c in check["per_node"].items()}


def test_the_checks_pass_on_a_sparks_hca_and_fail_naming_node_hca_index_and_entry(roce_pair, tmp_path):
    cluster = roce_pair
    mapped = {n.name: node_roce.gid_text(n.fabric_ip) for n in cluster.nodes()}

    code, checks = roce_checks(cluster, roce_inventory(cluster, tmp_path / "good.yaml"))
    assert code == 0, checks
    assert cells(checks["roce-hca"]) == {n: ("ok", "rocep1s0f0 port 1 ACTIVE") for n in mapped}
    assert cells(checks["roce-gid"]) == {n: ("ok", f"rocep1s0f0 GID index 3 RoCE v2 {gid}") for n, gid in mapped.items()}

    # index 2: the fabric IP, but RoCE v1 (the first IPv4 entry `show_gids` lists)
    code, checks = roce_checks(cluster, roce_inventory(cluster, tmp_path / "v1.yaml", gid_index=2))
    assert code == 1
    for node, (status, value) in cells(checks["roce-gid"]).items():
        assert status == "fail" and value == f"rocep1s0f0 GID index 2 is RoCE v1, not RoCE v2 ({mapped[node]})"
    assert "spark-1, spark-2: NCCL_IB_GID_INDEX must point at the RoCE v2 GID" in checks["roce-gid"]["fix"]

    # index 1: RoCE v2, but the link-local fe80 GID (no route to the peer's fabric IP)
    code, checks = roce_checks(cluster, roce_inventory(cluster, tmp_path / "ll.yaml", gid_index=1))
    assert code == 1
    for node, (status, value) in cells(checks["roce-gid"]).items():
        ip = next(n.fabric_ip for n in cluster.nodes() if n.name == node)
        assert status == "fail" and value.startswith("rocep1s0f0 GID index 1 is RoCE v2 link-local fe80:"), value
        assert value.endswith(f"not the fabric IP {ip}"), value

    # a wrong HCA name: roce-hca names it and what the node has; roce-gid has nothing to look at
    code, checks = roce_checks(cluster, roce_inventory(cluster, tmp_path / "hca.yaml", hca="mlx5_0"))
    assert code == 1
    assert cells(checks["roce-hca"]) == {n: ("fail", "mlx5_0 port 1 absent (has rocep1s0f0)") for n in mapped}
    assert {s for s, _ in cells(checks["roce-gid"]).values()} == {"skip"}

    # spark-2's port down, then its fabric port without an IPv4 address (no IPv4-mapped GIDs at all)
    good = roce_inventory(cluster, tmp_path / "good.yaml")
    cluster.fault(2, "roce", port="down")
    code, checks = roce_checks(cluster, good)
    assert code == 1
    assert cells(checks["roce-hca"]) == {"spark-1": ("ok", "rocep1s0f0 port 1 ACTIVE"),
                                         "spark-2": ("fail", "rocep1s0f0 port 1 is DOWN, not ACTIVE")}
    cluster.fault(2, "roce", ipv4="no")
    code, checks = roce_checks(cluster, good)
    assert code == 1
    assert cells(checks["roce-gid"])["spark-2"] == ("fail", "rocep1s0f0 GID index 3 is empty")
    assert cells(checks["roce-gid"])["spark-1"][0] == "ok"


def up_json(recipe, inventory: str, *extra: str):
    r = spark_deploy("up", recipe, "-i", inventory, "--json", *extra, timeout=600)
    return r, cli_json.result(r.stdout)  # the stream's envelope (validated): its result, with its ok


def serving_release(inventory: str) -> int:
    hist = spark_deploy("history", "-i", inventory, "--json")
    assert hist.returncode == 0, hist.stderr
    (serving,) = [x["id"] for x in cli_json.result(hist.stdout) if x["serving"]]
    return serving


def test_up_on_roce_takes_net_ib_and_a_socket_fallback_fails_naming_the_nodes(roce_pair, tmp_path):
    cluster = roce_pair
    good = roce_inventory(cluster, tmp_path / "good.yaml")
    r, final = up_json(cluster.recipe_path, good)
    assert r.returncode == 0, r.stderr + r.stdout
    link = next(e for e in final["expectations"] if e["name"] == "nccl-transport")
    assert link["status"] == "ok" and link["per_node"] == {n: "NET/IB [0]rocep1s0f0:1/RoCE" for n in ("spark-1", "spark-2")}
    for node, name in plan_names(cluster, cluster.recipe_path, good).items():
        log = node_docker(cluster, node, "logs", name, check=True)
        out = log.stdout + log.stderr
        assert "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:" in out, out[-2000:]
        assert "NCCL INFO Using network IB" in out
        assert "SIM_MEMLOCK_ASKED=unlimited" in node_docker(cluster, node, "exec", name, "env", check=True).stdout
    first = serving_release(good)

    # an HCA name that matches no port on either node (the check that would say so left out): NCCL falls
    # back to sockets and vLLM serves, so only the transport line tells; up fails naming both nodes
    wrong = roce_inventory(cluster, tmp_path / "wrong.yaml", hca="mlx5_0")
    r, final = up_json(cluster.recipe_path, wrong, "--skip-check", "roce-hca")
    assert r.returncode == 1, r.stdout
    assert final["ok"] is False
    text = r.stdout + r.stderr
    assert "profile roce, but NCCL fell back to sockets on spark-1, spark-2" in text, text[-3000:]
    assert "spark-2: NET/Socket [0]enp1s0f0np0:" in text
    assert serving_release(good) == first  # nothing lost: the release before serves again
    status = spark_deploy("status", "-i", good, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
