"""Issue 18 acceptance 3: the two networks of a Spark on the simulated cluster.

Each node has a management link (`enP7s7`: the controller's SSH, the default route) and a QSFP fabric
(`enp1s0f0np0`, and `enp1s0f1np1` unplugged) that only the nodes reach; `sim up` writes the inventory with
fabric_ip and NCCL/Gloo on the fabric. The preflight fabric checks pass on it and fail, naming node and
interface, when NCCL is pointed at the management link; a fabric-only partition fails `up` naming the
fabric while the controller still reaches both nodes; the stand-in fails as Gloo does when its interface
does not exist.
"""

from __future__ import annotations

import json

import pytest
from ruamel.yaml import YAML

from deploy_helpers import assert_up_refuses, inventory_variant, our_containers, spark_deploy
from orchestrator.sim.state import FABRIC_IFACE, FABRIC_IFACE_2, MGMT_IFACE
import cli_json

pytestmark = pytest.mark.integration

FABRIC_CHECKS = ("fabric-ip", "socket-ifname", "mtu-parity", "fabric-reach")


def preflight(cluster, inventory, *checks: str) -> tuple[int, dict]:
    args = ["preflight", cluster.recipe_path, "-i", inventory, "--json"]
    for name in checks:
        args += ["--only", name]
    res = spark_deploy(*args, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, {c["name"]: c for c in cli_json.result(res.stdout)["checks"]}


def addresses(cluster, node: int) -> dict[str, str]:
    out = json.loads(cluster.exec(node, ["ip", "-j", "addr"]).stdout)
    return {e["ifname"]: next((a["local"] for a in e.get("addr_info", []) if a.get("family") == "inet"), "")
            for e in out if e.get("ifname")}


def test_a_spark_has_a_management_link_and_a_fabric_the_controller_cannot_use(pair):
    for info in pair.nodes():
        links = addresses(pair, info.index)
        assert links[MGMT_IFACE] == info.ip and links[FABRIC_IFACE] == info.fabric_ip, links
        assert links[FABRIC_IFACE_2] == "" and "eth0" not in links and "eth1" not in links, links
        route = pair.exec(info.index, ["ip", "route", "show", "default"]).stdout
        assert f"dev {MGMT_IFACE}" in route, route
        port2 = json.loads(pair.exec(info.index, ["ip", "-j", "link", "show", FABRIC_IFACE_2]).stdout)[0]
        assert "NO-CARRIER" in port2["flags"], port2  # the second QSFP port: no cable
    doc = YAML(typ="safe").load(pair.inventory_path.read_text())
    assert doc["interconnect"]["socket_ifname"] == FABRIC_IFACE
    assert [(n["address"], n["fabric_ip"]) for n in doc["nodes"]] == [(n.ip, n.fabric_ip) for n in pair.nodes()]
    # node to node over the fabric: sshd answers with the host key the nodes trust (an image copy's path)
    spark2 = pair.node(2)
    assert pair.exec(1, ["ssh", "-o", "BatchMode=yes", spark2.fabric_ip, "hostname"]).stdout.strip() == "spark-2"
    # the controller has no path to the fabric: no address of this host is on it
    local = pair.client.networks.get(pair.info()["fabric_network"]).attrs["Options"]
    assert local.get("com.docker.network.bridge.inhibit_ipv4") == "true", local


def test_fabric_checks_pass_on_the_fabric_and_fail_on_the_management_link(pair, tmp_path):
    code, checks = preflight(pair, pair.inventory_path, *FABRIC_CHECKS)
    assert code == 0, json.dumps(checks, indent=1)
    for name in FABRIC_CHECKS:
        assert {n: c["status"] for n, c in checks[name]["per_node"].items()} == {"spark-1": "ok", "spark-2": "ok"}
    assert FABRIC_IFACE in checks["fabric-ip"]["per_node"]["spark-2"]["value"]

    wrong = inventory_variant(pair, tmp_path / "mgmt.yaml", socket_ifname=MGMT_IFACE)
    code, checks = preflight(pair, wrong, *FABRIC_CHECKS)
    verdict = checks["socket-ifname"]
    assert code == 1 and verdict["status"] == "fail", verdict
    for info in pair.nodes():
        cell = verdict["per_node"][info.name]["value"]
        assert verdict["per_node"][info.name]["status"] == "fail", verdict
        assert f"NCCL_SOCKET_IFNAME={MGMT_IFACE} selects {MGMT_IFACE} ({info.ip})" in cell, cell
        assert f"not the fabric interface {FABRIC_IFACE} holding fabric_ip {info.fabric_ip}" in cell, cell
    assert "spark-1" in verdict["fix"] and "spark-2" in verdict["fix"], verdict
    assert {n for n, c in checks.items() if c["status"] == "fail"} == {"socket-ifname"}
    before = our_containers(pair)
    up = spark_deploy("up", pair.recipe_path, "-i", wrong, timeout=180)
    assert up.returncode == 1 and "during preflight" in up.stderr and "socket-ifname" in up.stderr, up.stderr
    assert MGMT_IFACE in up.stderr and our_containers(pair) == before


def test_a_fabric_only_partition_fails_up_naming_the_fabric_while_the_controller_reaches_both(pair):
    pair.fault("spark-2", "partition", net="fabric")
    try:
        code, checks = preflight(pair, pair.inventory_path, "fabric-reach")
        assert {n: c["status"] for n, c in checks["reachable"]["per_node"].items()} == \
            {"spark-1": "ok", "spark-2": "ok"}, checks["reachable"]  # the controller: over management
        assert code == 1 and checks["fabric-reach"]["status"] == "fail"
        assert f"cannot reach spark-2 ({pair.node(2).fabric_ip})" in \
            checks["fabric-reach"]["per_node"]["spark-1"]["value"]
        assert_up_refuses(pair, pair.recipe_path, "fabric-reach", "spark-2", "the fabric path is cut")
    finally:
        pair.fault("spark-2", "heal")


def test_a_management_only_partition_cuts_the_controller_not_the_fabric(pair):
    pair.fault("spark-2", "partition", net="management")
    try:
        # over the fabric spark-1 still reaches spark-2's sshd; the controller does not
        res = pair.exec(1, ["timeout", "5", "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=4",
                            pair.node(2).fabric_ip, "hostname"], check=False)
        assert res.stdout.strip() == "spark-2", res
        code, checks = preflight(pair, pair.inventory_path, "docker")
        cells = checks["reachable"]["per_node"]
        assert code == 1 and cells["spark-2"]["status"] == "fail" and cells["spark-1"]["status"] == "ok", cells
    finally:
        pair.fault("spark-2", "heal")


def test_a_gloo_interface_the_node_lacks_fails_the_engine_as_gloo_does(pair, tmp_path):
    """With the check skipped, the stand-in fails at init as Gloo does (`Unable to find address for`) and
    `up` names the node and the message; the unplugged second port is no better (no address)."""
    wrong = inventory_variant(pair, tmp_path / "port2.yaml", socket_ifname=FABRIC_IFACE_2)
    code, checks = preflight(pair, wrong, "socket-ifname")
    cell = checks["socket-ifname"]["per_node"]["spark-1"]["value"]
    assert code == 1 and f"{FABRIC_IFACE_2} DOWN" in cell, cell
    before = our_containers(pair)
    up = spark_deploy("up", pair.recipe_path, "-i", wrong, "--skip-check", "socket-ifname", timeout=180)
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"Unable to find address for: {FABRIC_IFACE_2}" in up.stderr, up.stderr
    assert "spark-1" in up.stderr or "spark-2" in up.stderr, up.stderr
    assert our_containers(pair) == before
