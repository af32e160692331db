"""Preflight memory and fabric facts: parsers on outputs captured from real simulated nodes and from this
machine, and the judges on what those parsers return (pure: no node is contacted).

RoCE sysfs text (`IB_PRESENT`) is written from the kernel's sysfs layout, not captured: there is no RDMA
device here or in the simulation; those tests cover only the judge's logic.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fakes import deployment

from orchestrator.facts.fabric import IbState, parse_infiniband, parse_ip_addr, parse_reach
from orchestrator.preflight.checks_fabric import (
    fabric_ip,
    fabric_reach,
    match_ifname,
    mtu_parity,
    roce_gid,
    roce_hca,
    socket_ifname,
)
from orchestrator.facts.memory import GIB, EarlyOom, MemInfo, parse_earlyoom, parse_meminfo
from orchestrator.facts.replaced import parse_replaced, utilization_in
from orchestrator.preflight.checks_memory import memory_headroom
from orchestrator.facts.core import (
    DRIVER,
    FACTS,
    Observed,
    driver_args,
    parse_framed,
)
from orchestrator.checks.verdict import Status
from orchestrator.sim.faults_host import _kib
from orchestrator.sim.state import SimInputError

# `ip -j addr` on the machine running the tests (iproute2 6.1.0)
HOST_IP_ADDR = '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"::1","prefixlen":128,"scope":"host","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":2,"ifname":"ifb0","flags":["BROADCAST","NOARP"],"mtu":1500,"qdisc":"noop","operstate":"DOWN","group":"default","txqlen":32,"link_type":"ether","address":"46:3c:e0:dc:db:c7","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[]},{"ifindex":3,"ifname":"ifb1","flags":["BROADCAST","NOARP"],"mtu":1500,"qdisc":"noop","operstate":"DOWN","group":"default","txqlen":32,"link_type":"ether","address":"1e:0f:9b:a4:22:53","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[]},{"ifindex":4,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,"qdisc":"pfifo_fast","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether","address":"02:fc:00:00:00:01","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","label":"eth0","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fd00::2","prefixlen":64,"scope":"global","nodad":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":5,"ifname":"docker0","flags":["NO-CARRIER","BROADCAST","MULTICAST","UP"],"mtu":1500,"qdisc":"noqueue","operstate":"DOWN","group":"default","link_type":"ether","address":"02:42:4d:60:74:66","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"172.17.0.1","prefixlen":16,"broadcast":"172.17.255.255","scope":"global","label":"docker0","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1168,"ifname":"br-d04e74df4783","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","link_type":"ether","address":"02:42:d0:34:5b:86","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"172.28.225.1","prefixlen":24,"broadcast":"172.28.225.255","scope":"global","label":"br-d04e74df4783","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::42:d0ff:fe34:5b86","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1170,"link_index":1169,"ifname":"veth906ef2c","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","master":"br-d04e74df4783","operstate":"UP","group":"default","link_type":"ether","address":"f6:3b:1a:e2:41:6d","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":1,"addr_info":[{"family":"inet6","local":"fe80::f43b:1aff:fee2:416d","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1172,"link_index":1171,"ifname":"vethdd942f7","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","master":"br-d04e74df4783","operstate":"UP","group":"default","link_type":"ether","address":"1a:3e:7c:c6:ec:c6","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":0,"addr_info":[{"family":"inet6","local":"fe80::183e:7cff:fec6:ecc6","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1173,"ifname":"br-544b0f6e448f","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","link_type":"ether","address":"02:42:ee:22:91:63","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"172.31.20.1","prefixlen":24,"broadcast":"172.31.20.255","scope":"global","label":"br-544b0f6e448f","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::42:eeff:fe22:9163","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1175,"link_index":1174,"ifname":"veth4dd8f9b","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","master":"br-544b0f6e448f","operstate":"UP","group":"default","link_type":"ether","address":"56:54:18:29:c3:b6","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":3,"addr_info":[{"family":"inet6","local":"fe80::5454:18ff:fe29:c3b6","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1177,"link_index":1176,"ifname":"veth22d7bc2","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","master":"br-544b0f6e448f","operstate":"UP","group":"default","link_type":"ether","address":"f6:15:49:b2:8a:c5","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":2,"addr_info":[{"family":"inet6","local":"fe80::f415:49ff:feb2:8ac5","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]\n'

# `ip -j addr` on simulated node spark-2 (over SSH)
NODE_IP_ADDR = '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":2,"ifname":"docker0","flags":["NO-CARRIER","BROADCAST","MULTICAST","UP"],"mtu":1500,"qdisc":"noqueue","operstate":"DOWN","group":"default","link_type":"ether","address":"02:42:8a:87:a6:8d","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"172.17.0.1","prefixlen":16,"broadcast":"172.17.255.255","scope":"global","label":"docker0","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":1174,"link_index":1175,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","link_type":"ether","address":"02:42:ac:1f:14:0c","broadcast":"ff:ff:ff:ff:ff:ff","link_netnsid":0,"addr_info":[{"family":"inet","local":"172.31.20.12","prefixlen":24,"broadcast":"172.31.20.255","scope":"global","label":"eth0","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]\n'

# `cat /proc/meminfo` on the machine running the tests
HOST_MEMINFO = 'MemTotal:       24684084 kB\nMemFree:        22607336 kB\nMemAvailable:   23487468 kB\nBuffers:           37964 kB\nCached:           973460 kB\nSwapCached:            0 kB\nActive:           718668 kB\nInactive:         691056 kB\nActive(anon):       1688 kB\nInactive(anon):   405600 kB\nActive(file):     716980 kB\nInactive(file):   285456 kB\nUnevictable:       14112 kB\nMlocked:           13108 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\nZswap:                 0 kB\nZswapped:              0 kB\nDirty:              4084 kB\nWriteback:             0 kB\nAnonPages:        412532 kB\nMapped:           217968 kB\nShmem:              8872 kB\nKReclaimable:     184420 kB\nSlab:             232524 kB\nSReclaimable:     184420 kB\nSUnreclaim:        48104 kB\nKernelStack:        4208 kB\nPageTables:         7712 kB\nSecPageTables:         0 kB\nNFS_Unstable:          0 kB\nBounce:                0 kB\nWritebackTmp:          0 kB\nCommitLimit:    12342040 kB\nCommitted_AS:    2336136 kB\nVmallocTotal:   34359738367 kB\nVmallocUsed:       19144 kB\nVmallocChunk:          0 kB\nPercpu:             2512 kB\nAnonHugePages:         0 kB\nShmemHugePages:        0 kB\nShmemPmdMapped:        0 kB\nFileHugePages:     55296 kB\nFilePmdMapped:         0 kB\nBalloon:               0 kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\nDirectMap4k:       28672 kB\nDirectMap2M:     2068480 kB\nDirectMap1G:    25165824 kB\n'

# `cat /proc/meminfo` on simulated node spark-2
NODE_MEMINFO = 'MemTotal:       24684084 kB\nMemFree:        22614992 kB\nMemAvailable:   23495124 kB\nBuffers:           37912 kB\nCached:           973512 kB\nSwapCached:            0 kB\nActive:           718668 kB\nInactive:         677252 kB\nActive(anon):       1688 kB\nInactive(anon):   391796 kB\nActive(file):     716980 kB\nInactive(file):   285456 kB\nUnevictable:       14112 kB\nMlocked:           13108 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\nZswap:                 0 kB\nZswapped:              0 kB\nDirty:              4084 kB\nWriteback:             0 kB\nAnonPages:        398612 kB\nMapped:           219824 kB\nShmem:              8872 kB\nKReclaimable:     184420 kB\nSlab:             232524 kB\nSReclaimable:     184420 kB\nSUnreclaim:        48104 kB\nKernelStack:        4240 kB\nPageTables:         7480 kB\nSecPageTables:         0 kB\nNFS_Unstable:          0 kB\nBounce:                0 kB\nWritebackTmp:          0 kB\nCommitLimit:    12342040 kB\nCommitted_AS:    2322696 kB\nVmallocTotal:   34359738367 kB\nVmallocUsed:       19144 kB\nVmallocChunk:          0 kB\nPercpu:             2512 kB\nAnonHugePages:         0 kB\nShmemHugePages:        0 kB\nShmemPmdMapped:        0 kB\nFileHugePages:     55296 kB\nFilePmdMapped:         0 kB\nBalloon:               0 kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\nDirectMap4k:       28672 kB\nDirectMap2M:     2068480 kB\nDirectMap1G:    25165824 kB\n'

# `pgrep -a -x sshd` on spark-2: the pgrep -a line format
NODE_PGREP_SSHD = '15 sshd: /usr/sbin/sshd -D -e [listener] 0 of 10-100 startups\n165 sshd: root@notty\n'

# the fabric_reach fact's script run over SSH: from spark-2 while partitioned (a blackhole route), and from
# spark-1 to spark-2 (partitioned: no answer) and to its own IP on a closed port (refused = it answered)
REACH_BLACKHOLE = '172.31.20.11\t1\tprobe: line 1: /dev/tcp/172.31.20.11/22: Invalid argument\n'
REACH_MIXED = '172.31.20.11\t1\tprobe: line 1: /dev/tcp/172.31.20.11/2222: Connection refused\n172.31.20.12\t124\t\n'
# the infiniband fact's script on a simulated node (no RDMA devices)
IB_ABSENT = 'absent\n'


IB_PRESENT = ("hcas rocep1s0f0 rocep1s0f1 \nwant rocep1s0f0 1 3\n"
              "gid 0000:0000:0000:0000:0000:ffff:c0a8:6402\ntype RoCE v2\n")


def obs(value) -> Observed:
    return Observed(value=value)


def sim_pair(tmp_path, util: float | None = 0.3, profile: str = "tcp", ifname: str = "eth0", env2=None):
    """The unit inventory with the simulated cluster's fabric IPs (and `profile`), the sim recipe at `util`."""
    def inv(i):
        i["interconnect"] = ({"profile": "tcp", "socket_ifname": ifname} if profile == "tcp" else
                             {"profile": "roce", "hca": "rocep1s0f0", "gid_index": 3, "socket_ifname": ifname})
        i["nodes"][0]["fabric_ip"] = "172.31.20.11"
        i["nodes"][1]["fabric_ip"] = "172.31.20.12"
        if env2:
            i["nodes"][1]["env"] = env2

    def rec(r):
        if util is None:
            r["vllm"].pop("gpu_memory_utilization", None)
        else:
            r["vllm"]["gpu_memory_utilization"] = util
    return deployment(tmp_path, recipe=rec, inventory=inv)


# ---- parsers --------------------------------------------------------------------------------------
def test_ip_addr_of_a_sim_node():
    ifaces = parse_ip_addr(NODE_IP_ADDR)
    assert set(ifaces) == {"lo", "docker0", "eth0"}
    eth0 = ifaces["eth0"]
    assert (eth0.operstate, eth0.mtu, eth0.addresses, eth0.up) == ("UP", 1500, ("172.31.20.12",), True)
    assert ifaces["docker0"].operstate == "DOWN" and not ifaces["docker0"].up
    assert ifaces["lo"].up  # UNKNOWN with LOWER_UP


def test_ip_addr_of_this_machine():
    ifaces = parse_ip_addr(HOST_IP_ADDR)
    assert ifaces["eth0"].mtu == 1400 and "192.0.2.2" in ifaces["eth0"].addresses
    assert "fd00::2" in ifaces["eth0"].addresses
    assert ifaces["ifb0"].addresses == () and not ifaces["ifb0"].up
    assert "172.31.20.1" in ifaces["br-544b0f6e448f"].addresses


def test_ip_addr_skips_vanished_links_and_refuses_garbage():
    assert set(parse_ip_addr("[{}," + NODE_IP_ADDR.strip()[1:])) == {"lo", "docker0", "eth0"}
    with pytest.raises(ValueError):
        parse_ip_addr("Object \"addr\" is unknown, try \"ip help\".")


def test_meminfo_captured():
    assert parse_meminfo(NODE_MEMINFO) == MemInfo(24684084 * 1024, 23495124 * 1024)
    host = parse_meminfo(HOST_MEMINFO)
    assert host.total == 24684084 * 1024 and 0 < host.available <= host.total


def test_meminfo_without_memavailable_is_refused():
    with pytest.raises(ValueError, match="MemAvailable"):
        parse_meminfo("\n".join(l for l in NODE_MEMINFO.splitlines() if not l.startswith("MemAvailable")))


def test_earlyoom_not_running_and_pgrep_line_format():
    assert parse_earlyoom("") == EarlyOom(False)
    seen = parse_earlyoom(NODE_PGREP_SSHD)  # a real `pgrep -a` line: "PID cmdline"
    assert seen.running and seen.cmdline.startswith("sshd: /usr/sbin/sshd -D -e")
    assert seen.threshold(100 * GIB) == 10 * GIB  # earlyoom's default -m 10


@pytest.mark.parametrize("cmdline, total, want", [
    ("/usr/bin/earlyoom -r 3600 -m 5", 100 * GIB, 5 * GIB),
    ("/usr/bin/earlyoom -m10,5 --prefer ^vllm$", 100 * GIB, 10 * GIB),
    ("/usr/bin/earlyoom -M 2097152", 100 * GIB, 2 * GIB),
    ("/usr/bin/earlyoom -m 10 -M 2097152", 100 * GIB, 2 * GIB),  # the lower of the two
    ("/usr/bin/earlyoom -m 1 -M 4194304", 100 * GIB, 1 * GIB),
])
def test_earlyoom_thresholds(cmdline, total, want):
    assert parse_earlyoom(f"1234 {cmdline}\n").threshold(total) == pytest.approx(want, abs=1024)


def test_earlyoom_bad_values_refused():
    with pytest.raises(ValueError, match="-m"):
        parse_earlyoom("1234 /usr/bin/earlyoom -m lots\n")


def test_facts_run_by_the_real_driver_here():
    """The real driver script in bash on this machine: pgrep's exit 1 (no earlyoom) is a value, not an error."""
    names = ["meminfo", "earlyoom", "ip_addr"]
    facts = [FACTS[n] for n in names]
    res = subprocess.run(["bash", "-c", DRIVER, "driver", *driver_args(facts, None)], check=False, capture_output=True,
                         text=True, timeout=30)
    seen = parse_framed(res.stdout, {f.name: f for f in facts})
    assert all(seen[n].ok for n in names), {n: seen[n].error for n in names}
    assert seen["earlyoom"].code in (0, 1) and seen["earlyoom"].value.running == (seen["earlyoom"].code == 0)
    assert seen["meminfo"].value.total > 0 and "lo" in seen["ip_addr"].value


def test_reach_probe_outputs():
    assert parse_reach(REACH_BLACKHOLE)["172.31.20.11"].reached is False
    assert "Invalid argument" in parse_reach(REACH_BLACKHOLE)["172.31.20.11"].detail
    mixed = parse_reach(REACH_MIXED)
    assert mixed["172.31.20.11"].reached and "refused" in mixed["172.31.20.11"].detail
    assert not mixed["172.31.20.12"].reached and "3 s" in mixed["172.31.20.12"].detail


def test_infiniband_outputs():
    assert parse_infiniband(IB_ABSENT) == IbState(False)
    s = parse_infiniband(IB_PRESENT)
    assert (s.present, s.hcas, s.hca, s.port, s.index, s.gid_type) == (
        True, ("rocep1s0f0", "rocep1s0f1"), "rocep1s0f0", "1", "3", "RoCE v2")
    assert parse_infiniband("hcas rocep1s0f1 \nwant rocep1s0f0 1 3\n").gid is None


def test_sizes_of_the_meminfo_fault():
    assert (_kib("m", "a", "2g"), _kib("m", "a", "512M"), _kib("m", "a", "1048576")) == (2 << 20, 512 << 10, 1048576)
    with pytest.raises(SimInputError):
        _kib("meminfo", "available", "two gigs")


# ---- judges ---------------------------------------------------------------------------------------
SAMPLES = Path(__file__).parent / "samples"
# a simulated Spark's /proc/meminfo (sim-memory: 119.7 GiB, ~115.7 available idle, 4 GiB swap), idle and
# while the sim recipe (0.7) serves on it: 0.7 x 119.7 + ~20 GiB runtime taken off
SPARK_IDLE = (SAMPLES / "meminfo-sim-spark-idle.txt").read_text()
SPARK_SERVING = (SAMPLES / "meminfo-sim-spark-serving-0.7.txt").read_text()
REPLACED_HEAD = (SAMPLES / "replaced-sim-head.txt").read_text()  # the `replaced` fact on that head


def mem_seen(node1: str, node2: str, oom2: str = "", replaced2: str = "") -> dict:
    return {"spark-1": {"meminfo": obs(parse_meminfo(node1)), "earlyoom": obs(parse_earlyoom("")),
                        "replaced": obs(parse_replaced(""))},
            "spark-2": {"meminfo": obs(parse_meminfo(node2)), "earlyoom": obs(parse_earlyoom(oom2)),
                        "replaced": obs(parse_replaced(replaced2))}}


def with_line(meminfo: str, key: str, kb: int) -> str:
    return "\n".join(f"{key}:   {kb} kB" if l.startswith(key + ":") else l for l in meminfo.splitlines())


def test_the_sim_samples_are_a_spark_idle_and_serving():
    idle, serving = parse_meminfo(SPARK_IDLE), parse_meminfo(SPARK_SERVING)
    assert idle.total == serving.total == 125519872 * 1024 and idle.swap_total == 4194300 * 1024
    taken = idle.available - serving.available
    assert abs(taken - (int(0.7 * idle.total) + 20 * GIB)) < 2 * 1024 * 1024  # share + runtime, to the kB


def test_headroom_ok_then_fail_naming_both_values(tmp_path):
    v = memory_headroom(mem_seen(SPARK_IDLE, SPARK_IDLE), sim_pair(tmp_path, util=0.7))
    assert v.status == Status.OK and "earlyoom not running" in v.cells["spark-2"].value
    assert "once it serves ~11.9 GiB (runtime ~20.0 GiB)" in v.cells["spark-2"].value
    # 86 GiB free: vLLM's 83.8 GiB share fits, but leaves the OS less than the reserve
    v = memory_headroom(mem_seen(SPARK_IDLE, with_line(SPARK_IDLE, "MemAvailable", 86 << 20)),
                        sim_pair(tmp_path, util=0.7))
    assert v.failed_nodes() == ["spark-2"]
    cell = v.cells["spark-2"].value
    assert "MemAvailable 86.0 GiB" in cell and "0.7 x MemTotal 119.7 GiB = 83.8 GiB" in cell and "4.0 GiB reserve" in cell
    assert v.fix.startswith("spark-2:")
    # 2 GiB free: vLLM itself refuses (its "Free memory on device" start-up check)
    v = memory_headroom(mem_seen(SPARK_IDLE, with_line(SPARK_IDLE, "MemAvailable", 2 << 20)),
                        sim_pair(tmp_path, util=0.7))
    assert v.failed_nodes() == ["spark-2"] and "vLLM refuses to start" in v.cells["spark-2"].value
    assert "Free memory on device" in v.fix


def test_headroom_reserve_comes_from_the_recipe(tmp_path):
    """preflight.memory_reserve_gib moves the line: 115.7 GiB available - 0.7 x 119.7 GiB leaves ~31.9 GiB."""
    def with_reserve(gib):
        def rec(r):
            r["vllm"]["gpu_memory_utilization"] = 0.7
            r["preflight"] = {"memory_reserve_gib": gib}
        return deployment(tmp_path, recipe=rec, inventory=lambda i: None)
    seen = mem_seen(SPARK_IDLE, SPARK_IDLE)
    assert memory_headroom(seen, with_reserve(31)).status == Status.OK
    v = memory_headroom(seen, with_reserve(32))
    assert v.failed_nodes() == ["spark-1", "spark-2"] and "32.0 GiB reserve" in v.cells["spark-1"].value
    assert "preflight.memory_reserve_gib" in v.fix


def test_memory_reserve_is_not_part_of_the_launch(tmp_path):
    """The reserve is preflight's judgement only: the recipe digest (labels, provenance) does not move."""
    plain = deployment(tmp_path, recipe=lambda r: None, inventory=lambda i: None)
    moved = deployment(tmp_path, recipe=lambda r: r.update(preflight={"memory_reserve_gib": 8,
                                                                       "runtime_overhead_gib": 12}),
                       inventory=lambda i: None)
    assert moved.recipe.preflight.memory_reserve_gib == 8 and moved.recipe.preflight.runtime_overhead_gib == 12
    assert plain.recipe.digest() == moved.recipe.digest()


def test_headroom_uses_vllm_default_when_unset(tmp_path):
    """vLLM 0.33 defaults to 0.92: 110.1 GiB fits in 115.7, but with the runtime it exhausts memory and swap."""
    v = memory_headroom(mem_seen(SPARK_IDLE, SPARK_IDLE), sim_pair(tmp_path, util=None))
    assert v.failed_nodes() == ["spark-1", "spark-2"] and "vLLM 0.92 x" in v.cells["spark-1"].value
    assert "exhausts memory and swap" in v.cells["spark-1"].value and "OOM killer" in v.cells["spark-1"].value


def test_field_note_8_figures(tmp_path):
    """0.78 serves with ~2 GiB left (earlyoom spares it: swap is free); 0.835 does not fit with its runtime."""
    v = memory_headroom(mem_seen(SPARK_IDLE, SPARK_IDLE, "812 /usr/bin/earlyoom -r 3600\n"),
                        sim_pair(tmp_path, util=0.78))
    assert v.status == Status.OK and "once it serves ~2.3 GiB" in v.cells["spark-2"].value
    assert "earlyoom kills below 12.0 GiB with swap nearly full" in v.cells["spark-2"].value
    v = memory_headroom(mem_seen(SPARK_IDLE, SPARK_IDLE, "812 /usr/bin/earlyoom -r 3600\n"),
                        sim_pair(tmp_path, util=0.835))
    assert v.failed_nodes() == ["spark-1", "spark-2"] and "exhausts memory and swap" in v.cells["spark-2"].value


def test_headroom_under_earlyoom_threshold_warns(tmp_path):
    """With 8 GiB of swap 0.835 pages ~4.3 GiB out: -s 50 then kills (swap 47 % free), the default -s 10 not."""
    big_swap = with_line(with_line(SPARK_IDLE, "SwapTotal", 8 << 20), "SwapFree", 8 << 20)
    v = memory_headroom(mem_seen(big_swap, big_swap, "812 /usr/bin/earlyoom -r 3600 -m 10 -s 50\n"),
                        sim_pair(tmp_path, util=0.835))
    assert v.cells["spark-1"].status == Status.OK and v.cells["spark-2"].status == Status.WARN
    assert "earlyoom's 12.0 GiB threshold" in v.cells["spark-2"].value
    assert v.failed_nodes() == [] and v.failed_nodes(strict=True) == ["spark-2"]
    v = memory_headroom(mem_seen(big_swap, big_swap, "812 /usr/bin/earlyoom -r 3600\n"),
                        sim_pair(tmp_path, util=0.835))
    assert v.status == Status.OK


def test_headroom_counts_what_the_serving_release_gives_back(tmp_path):
    """The node serves this recipe at 0.7 (11.9 GiB left): an up of 0.72 is judged on the node as it will be
    once that release is stopped (add back its share and runtime), not refused on its own memory."""
    v = memory_headroom(mem_seen(SPARK_SERVING, SPARK_SERVING, replaced2=REPLACED_HEAD),
                        sim_pair(tmp_path, util=0.72))
    assert v.cells["spark-1"].status == Status.FAIL and "vLLM refuses to start" in v.cells["spark-1"].value
    assert v.cells["spark-2"].status == Status.OK
    assert "+ 103.8 GiB held by this recipe's serving containers" in v.cells["spark-2"].value
    assert "leaves 29.5 GiB" in v.cells["spark-2"].value


def test_replaced_fact_parses_the_inspect_line():
    (one,) = parse_replaced(REPLACED_HEAD)
    assert (one.name, one.serve_port, one.master_port, one.utilization) == ("sd-sim-tiny-r0", 8000, 29701, 0.7)
    assert utilization_in(["m", "--gpu-memory-utilization=0.5"]) == 0.5
    assert utilization_in(["m", "--device-memory-utilization", "0.6", "--gpu-memory-utilization", "0.4"]) == 0.4
    assert utilization_in(["m", "--port", "8000"]) == 0.92  # vLLM 0.33's default


def test_headroom_unreadable_meminfo_is_a_skip(tmp_path):
    seen = mem_seen(NODE_MEMINFO, NODE_MEMINFO)
    seen["spark-2"]["meminfo"] = Observed(error="cat: /proc/meminfo: No such file or directory")
    v = memory_headroom(seen, sim_pair(tmp_path))
    assert v.cells["spark-2"].status == Status.SKIP and "No such file" in v.cells["spark-2"].value


def ip_seen(**by_node: str) -> dict:
    return {n.replace("_", "-"): {"ip_addr": obs(parse_ip_addr(text))} for n, text in by_node.items()}


def test_fabric_ip(tmp_path):
    dep = sim_pair(tmp_path)
    node1 = NODE_IP_ADDR.replace("172.31.20.12", "172.31.20.11")
    v = fabric_ip(ip_seen(spark_1=node1, spark_2=NODE_IP_ADDR), dep)
    assert v.status == Status.OK and v.cells["spark-2"].value == "172.31.20.12 on eth0 UP mtu 1500"
    v = fabric_ip(ip_seen(spark_1=node1, spark_2=HOST_IP_ADDR), dep)
    assert v.failed_nodes() == ["spark-2"] and "172.31.20.12 is on no interface" in v.cells["spark-2"].value
    down = NODE_IP_ADDR.replace("172.17.0.1", "172.31.20.12").replace('"local":"172.31.20.12","prefixlen":24',
                                                                       '"local":"10.9.9.9","prefixlen":24')
    v = fabric_ip(ip_seen(spark_1=node1, spark_2=down), dep)
    assert v.cells["spark-2"].status == Status.FAIL and "docker0 DOWN" in v.cells["spark-2"].value


def test_socket_ifname(tmp_path):
    seen = ip_seen(spark_1=NODE_IP_ADDR, spark_2=NODE_IP_ADDR)
    assert socket_ifname(seen, sim_pair(tmp_path)).status == Status.OK
    v = socket_ifname(seen, sim_pair(tmp_path, ifname="enp1s0f0np0"))
    assert v.failed_nodes() == ["spark-1", "spark-2"]
    assert "NCCL_SOCKET_IFNAME=enp1s0f0np0 matches no interface (has lo, docker0, eth0)" in v.cells["spark-1"].value
    v = socket_ifname(seen, sim_pair(tmp_path, env2={"NCCL_SOCKET_IFNAME": "docker"}))  # per-node override
    assert v.cells["spark-1"].status == Status.OK and v.failed_nodes() == ["spark-2"]
    assert "docker0 DOWN" in v.cells["spark-2"].value


def test_match_ifname_follows_nccl_syntax():
    names = ["lo", "docker0", "eth0", "eth1", "enp1s0f0np0"]
    assert match_ifname("eth", names, exact=False) == ["eth0", "eth1"]
    assert match_ifname("=eth", names, exact=False) == []
    assert match_ifname("^docker,eth", names, exact=False) == ["enp1s0f0np0"]
    assert match_ifname("eth", names, exact=True) == []  # Gloo: exact names


def test_mtu_parity_names_both_values(tmp_path):
    host_as_2 = HOST_IP_ADDR.replace("192.0.2.2", "172.31.20.12")  # this machine's eth0: mtu 1400
    node1 = NODE_IP_ADDR.replace("172.31.20.12", "172.31.20.11")
    assert mtu_parity(ip_seen(spark_1=node1, spark_2=NODE_IP_ADDR), sim_pair(tmp_path)).status == Status.OK
    v = mtu_parity(ip_seen(spark_1=node1, spark_2=host_as_2), sim_pair(tmp_path))
    assert v.status == Status.FAIL and "spark-2" in v.failed_nodes()
    assert "spark-1: mtu 1500" in v.fix and "spark-2: mtu 1400" in v.fix


def test_fabric_reach_names_from_and_to(tmp_path):
    seen = {"spark-1": {"fabric_reach": obs(parse_reach("172.31.20.12\t124\t\n"))},
            "spark-2": {"fabric_reach": obs(parse_reach(REACH_BLACKHOLE))}}
    v = fabric_reach(seen, sim_pair(tmp_path))
    assert v.failed_nodes() == ["spark-1", "spark-2"]
    assert "spark-1 -> spark-2 (172.31.20.12)" in v.fix and "spark-2 -> spark-1 (172.31.20.11)" in v.fix
    ok = {"spark-1": {"fabric_reach": obs(parse_reach("172.31.20.12\t0\t\n"))},
          "spark-2": {"fabric_reach": obs(parse_reach(REACH_MIXED.split("\n")[0]))}}
    v = fabric_reach(ok, sim_pair(tmp_path))
    assert v.status == Status.OK and v.cells["spark-2"].value == "reaches spark-1 (172.31.20.11)"


def test_roce_checks_say_why_they_cannot_run(tmp_path):
    absent = {n: {"infiniband": obs(parse_infiniband(IB_ABSENT))} for n in ("spark-1", "spark-2")}
    for judge in (roce_hca, roce_gid):
        v = judge(absent, sim_pair(tmp_path, profile="roce"))
        assert {c.value for c in v.cells.values()} == {"no /sys/class/infiniband on this node"}
        assert v.status == Status.SKIP
        assert "profile tcp" in judge(absent, sim_pair(tmp_path)).cells["spark-1"].value


def test_roce_judges_on_sysfs_layout(tmp_path):
    """Logic only: IB_PRESENT follows the sysfs layout, it is not captured from hardware."""
    def inv(i):
        pass
    dep = deployment(tmp_path, inventory=inv)  # roce, fabric 192.168.100.1/.2, GID index 3
    present = parse_infiniband(IB_PRESENT)  # the GID of 192.168.100.2
    one = parse_infiniband(IB_PRESENT.replace("c0a8:6402", "c0a8:6401"))
    seen = {"spark-1": {"infiniband": obs(one)}, "spark-2": {"infiniband": obs(present)}}
    assert roce_hca(seen, dep).status == Status.OK and roce_gid(seen, dep).status == Status.OK
    seen["spark-2"]["infiniband"] = obs(parse_infiniband(IB_PRESENT.replace("RoCE v2", "IB/RoCE v1")))
    v = roce_gid(seen, dep)
    assert v.failed_nodes() == ["spark-2"] and "IB/RoCE v1, not RoCE v2" in v.cells["spark-2"].value
    seen["spark-2"]["infiniband"] = obs(present)
    seen["spark-1"]["infiniband"] = obs(present)  # spark-1's index points at spark-2's address
    assert roce_gid(seen, dep).cells["spark-1"].status == Status.WARN
    seen["spark-2"]["infiniband"] = obs(parse_infiniband("hcas mlx5_0 \nwant rocep1s0f0 1 3\n"))
    v = roce_hca(seen, dep)
    assert v.failed_nodes() == ["spark-2"] and "has mlx5_0" in v.cells["spark-2"].value


def test_socket_ifname_on_the_management_link_is_named_not_passed(tmp_path):
    """Captured on a two-network sim pair (`ip -j addr`): enP7s7 is the management link, enp1s0f0np0 the
    fabric holding fabric_ip, enp1s0f1np1 the unplugged port. NCCL told to use the management link works,
    over the wrong wire: a failure naming the interface it selects and the one it should."""
    one = (SAMPLES / "sim-two-networks-ip-addr-spark-1.json").read_text()
    two = (SAMPLES / "sim-two-networks-ip-addr-spark-2.json").read_text()
    seen = ip_seen(spark_1=one, spark_2=two)

    def pair(ifname):
        def inv(i):
            i["interconnect"] = {"profile": "tcp", "socket_ifname": ifname}
            i["nodes"][0]["fabric_ip"], i["nodes"][1]["fabric_ip"] = "172.30.34.11", "172.30.34.12"
        return deployment(tmp_path, inventory=inv)

    v = socket_ifname(seen, pair("enp1s0f0np0"))
    assert v.status == Status.OK and v.cells["spark-2"].value.startswith("NCCL_SOCKET_IFNAME=enp1s0f0np0: enp1s0f0np0")
    v = socket_ifname(seen, pair("enP7s7"))
    assert v.failed_nodes() == ["spark-1", "spark-2"]
    assert ("NCCL_SOCKET_IFNAME=enP7s7 selects enP7s7 (172.30.33.12), not the fabric interface enp1s0f0np0 "
            "holding fabric_ip 172.30.34.12") in v.cells["spark-2"].value
    v = socket_ifname(seen, pair("enp1s0f"))  # a prefix: NCCL takes both QSFP ports (uses the one with a cable)
    assert "NCCL_SOCKET_IFNAME" not in v.cells["spark-1"].value  # ... but Gloo wants an exact name
    assert "GLOO_SOCKET_IFNAME=enp1s0f matches no interface" in v.cells["spark-1"].value
    v = socket_ifname(seen, pair("enp1s0f1np1"))  # the unplugged port
    assert v.failed_nodes() == ["spark-1", "spark-2"] and "enp1s0f1np1 DOWN" in v.cells["spark-1"].value
    assert fabric_ip(seen, pair("enP7s7")).status == Status.OK  # the address is right; the name is not
