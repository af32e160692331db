"""The stand-in picks the collectives' link as Gloo and NCCL do (orchestrator/sim/standin/transport.py)."""

from __future__ import annotations

import pytest

from orchestrator.sim.standin.base import SimError
from orchestrator.sim.standin.transport import connect, interfaces, select

SPARK = {"enP7s7": "172.30.33.11", "enp1s0f0np0": "172.30.34.11", "enp1s0f1np1": "", "docker0": "172.17.0.1"}
FABRIC = {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_DISABLE": "1"}


def test_nccl_reads_prefixes_and_exclusions_gloo_exact_names():
    names = list(SPARK)
    assert select("enp1s0f", names, exact=False) == ["enp1s0f0np0", "enp1s0f1np1"]
    assert select("=enp1s0f", names, exact=False) == []
    assert select("^docker,enP", names, exact=False) == ["enp1s0f0np0", "enp1s0f1np1"]
    assert select("enp1s0f", names, exact=True) == []


def test_the_fabric_is_used_and_said_only_at_nccl_debug_info():
    assert connect(FABRIC, SPARK) == []
    lines = connect({**FABRIC, "NCCL_DEBUG": "INFO"}, SPARK)
    assert "NCCL INFO NET/Socket : Using [0]enp1s0f0np0:172.30.34.11<0>" in lines
    assert "NCCL INFO Using network Socket" in lines and not any("NET/IB" in x for x in lines)
    lines = connect({**FABRIC, "NCCL_IB_DISABLE": "0", "NCCL_DEBUG": "INFO"}, SPARK)
    assert "NCCL INFO NET/IB : No device found." in lines  # no HCA on this node: sockets, as NCCL falls back


def test_the_management_link_works_but_is_what_nccl_says_it_uses():
    env = {**FABRIC, "NCCL_SOCKET_IFNAME": "enP7s7", "GLOO_SOCKET_IFNAME": "enP7s7", "NCCL_DEBUG": "INFO"}
    assert "NCCL INFO NET/Socket : Using [0]enP7s7:172.30.33.11<0>" in connect(env, SPARK)


@pytest.mark.parametrize("gloo", ["eth0", "enp1s0f1np1", "enp1s0f"])
def test_gloo_without_an_address_on_that_exact_name_fails_at_init(gloo):
    with pytest.raises(SimError, match=f"Unable to find address for: {gloo}$"):
        connect({**FABRIC, "GLOO_SOCKET_IFNAME": gloo}, SPARK)


def test_nccl_with_no_matching_interface_fails_with_its_system_error():
    with pytest.raises(SimError, match="unhandled system error") as err:
        connect({**FABRIC, "NCCL_SOCKET_IFNAME": "ib"}, SPARK)
    assert "Bootstrap : no socket interface found" in err.value.final


def test_this_hosts_own_interfaces_are_read():
    found = interfaces()
    assert "lo" not in found and found  # some interface, with its IPv4 address or ''
