"""Issue 20 acceptance 4: every `setup` discovery parser on captured outputs.

sim-*: captured on a simulated Spark with the scripts of orchestrator/setup/facts.py (its RoCE HCA from
`sim up --roce`); spark-ibdev2netdev-*: real DGX Sparks, published (tests/unit/samples/README.md):
https://gitea.corredorconect.com/software-engineering/spark-vllm-docker/raw/commit/c42cc56d3400a1a6e541bdf62303025b0e1d4fa0/docs/NETWORKING.md
and https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/connect-two-sparks/README.md (step 2).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.facts.core import DRIVER, parse_framed
from orchestrator.setup import facts
from orchestrator.setup.fabric import PROBE_FACT, parse_probe

SAMPLES = Path(__file__).parent / "samples" / "setup"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_ip_addr_gives_each_link_its_ipv4_prefix_mtu_and_state():
    links = facts.parse_links(sample("sim-ip-j-addr.json"))
    assert set(links) == {"lo", "enp1s0f1np1", "enP7s7", "enp1s0f0np0", "docker0"}
    fabric = links["enp1s0f0np0"]
    assert (fabric.operstate, fabric.mtu, fabric.up) == ("UP", 1500, True)
    assert len(fabric.ipv4) == 1 and fabric.ipv4[0][1] == 24
    assert str(fabric.network(fabric.ipv4[0][0])).endswith(".0/24")
    assert links["enp1s0f1np1"].ipv4 == () and not links["enp1s0f1np1"].up  # the unplugged QSFP port
    assert links["lo"].loopback and links["lo"].ipv4 == (("127.0.0.1", 8),)


def test_ip_addr_skips_the_empty_object_of_a_vanished_link():
    assert facts.parse_links('[{}, {"ifname": "eth0", "mtu": 9000, "operstate": "UP", "addr_info": '
                             '[{"family": "inet6", "local": "fe80::1", "prefixlen": 64}]}]')["eth0"].ipv4 == ()


def test_the_default_route_names_the_management_link():
    assert facts.parse_default_route(sample("sim-ip-j-route-default.json")) == "enP7s7"
    assert facts.parse_default_route("[]") is None


def test_sysfs_speed_reads_mbit_and_none_without_carrier():
    assert facts.parse_speeds(sample("sim-speeds.txt")) == {"docker0": None, "enP7s7": 10000, "enp1s0f0np0": 10000,
                                                            "enp1s0f1np1": 10000, "lo": None}


@pytest.mark.parametrize("name", ["spark-ibdev2netdev-eugr.txt", "spark-ibdev2netdev-nvidia-playbook.txt"])
def test_real_spark_ibdev2netdev_maps_each_hca_to_its_netdev(name):
    ports = {p.hca: (p.port, p.netdev, p.up) for p in facts.parse_ibdev2netdev(sample(name))}
    assert ports == {"rocep1s0f0": ("1", "enp1s0f0np0", False), "rocep1s0f1": ("1", "enp1s0f1np1", True),
                     "roceP2p1s0f0": ("1", "enP2p1s0f0np0", False), "roceP2p1s0f1": ("1", "enP2p1s0f1np1", True)}


def test_the_sysfs_gid_table_gives_the_hca_behind_the_fabric_netdev_and_its_roce_v2_entries():
    roce = facts.parse_roce(sample("sim-roce.txt"))
    assert roce.present and [(p.hca, p.netdev, p.up) for p in roce.ports] == [("rocep1s0f0", "enp1s0f0np0", True)]
    assert [(g.index, g.type) for g in roce.gids] == [(0, "RoCE v1"), (1, "RoCE v2"), (2, "RoCE v1"), (3, "RoCE v2")]
    assert roce.gids[3].gid.startswith("0000:0000:0000:0000:0000:ffff:") and roce.gids[1].gid.startswith("fe80:")
    assert {g.netdev for g in roce.gids} == {"enp1s0f0np0"}
    assert facts.parse_roce("absent\n") == facts.Roce(False)


def test_the_roce_script_reads_a_real_sysfs_layout(tmp_path):
    """The script itself, on a tree laid out as a Spark's (unused slots have no readable type)."""
    port = tmp_path / "infiniband" / "rocep1s0f1" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    for i, (gid, kind) in enumerate([("fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7", "RoCE v1"),
                                     ("fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7", "RoCE v2"),
                                     ("0000:0000:0000:0000:0000:ffff:c0a8:640a", "RoCE v1"),
                                     ("0000:0000:0000:0000:0000:ffff:c0a8:640a", "RoCE v2")]):
        (port / "gids" / str(i)).write_text(gid + "\n")
        (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
        (port / "gid_attrs/ndevs" / str(i)).write_text("enp1s0f1np1\n")
    (port / "gids" / "4").write_text("0000:" * 7 + "0000\n")
    script = facts._ROCE.replace("/sys/class/infiniband", str(tmp_path / "infiniband"))
    roce = facts.parse_roce(subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout)
    assert [(p.hca, p.netdev, p.up) for p in roce.ports] == [("rocep1s0f1", "enp1s0f1np1", True)]
    assert [(g.index, g.type, g.gid[-9:]) for g in roce.gids][-1] == (3, "RoCE v2", "c0a8:640a")


def test_docker_info_as_the_login_user_or_why_it_is_refused():
    ok = facts.parse_docker(sample("sim-docker-permitted.txt"))
    assert ok.permitted and ok.version.startswith("20.10") and ok.driver == "overlay2"
    assert ok.nvidia == "nvidia hook /usr/local/bin/nvidia-container-runtime-hook"
    denied = facts.parse_docker(sample("sim-docker-denied.txt"))  # exit 0 and ServerErrors, as docker 20.10 says it
    assert not denied.permitted and "permission denied" in denied.error and "docker.sock" in denied.error
    old = facts.parse_docker("rc 1\nhook \nGot permission denied while trying to connect to the Docker daemon "
                             "socket at unix:///var/run/docker.sock\n")
    assert not old.permitted and old.error.startswith("Got permission denied") and old.nvidia == ""
    runtime = facts.parse_docker('rc 0\nhook \n{"ServerVersion": "28.3.3", "Driver": "overlayfs", '
                                 '"Runtimes": {"nvidia": {}, "runc": {}}}')
    assert runtime.nvidia == "nvidia runtime" and runtime.runtimes == ("nvidia", "runc")


def test_caches_gpus_user_and_earlyoom():
    assert facts.parse_hf(sample("sim-hf.txt")) == [facts.HfCache("/home/spark/.cache/huggingface", "default", 0),
                                                    facts.HfCache("/srv/hf-cache", "found", 1)]
    assert facts.parse_jit(sample("sim-jit.txt")) == [
        facts.JitCandidate("/var/cache/vllm-jit", True, True, "overlayfs"),
        facts.JitCandidate("/home/spark/.cache/vllm-jit", False, True, "overlayfs")]
    assert facts.parse_gpus(sample("sim-nvidia-smi-L.txt")) == 1
    assert facts.parse_user("spark\nspark adm sudo docker\n") == ("spark", ("spark", "adm", "sudo", "docker"))
    oom = facts.FACTS["earlyoom"].parse(sample("sim-pgrep-earlyoom.txt"))
    assert oom.running and oom.percent == 5
    with pytest.raises(ValueError):
        facts.parse_hf("")
    assert facts.parse_state_dir("user spark\nok spark:spark 755\n")[0]
    assert not facts.parse_state_dir("user nvidia\nuncreatable /var/lib root:root 755\n")[0]


def test_the_probe_lines_say_route_device_and_whether_the_address_answered():
    probes = parse_probe("10.0.0.2\tenp1s0f0np0\t1\tbash: connect: Connection refused\n"
                         "10.0.0.3\t?\t1\tbash: connect: Network is unreachable\n"
                         "10.0.0.4\tenp1s0f0np0\t124\t\n10.0.0.5\tenP7s7\t0\t\n")
    assert (probes["10.0.0.2"].reached, probes["10.0.0.2"].dev) == (True, "enp1s0f0np0")
    assert (probes["10.0.0.3"].reached, probes["10.0.0.3"].detail) == (False, "Network is unreachable")
    assert (probes["10.0.0.4"].reached, probes["10.0.0.4"].detail) == (False, "no answer within 3 s")
    assert probes["10.0.0.5"].reached and probes["10.0.0.5"].dev == "enP7s7"


def test_the_probe_script_runs_under_the_driver_and_names_the_route_device():
    """The real driver and probe script in local bash: 127.0.0.1 routes over lo; port 1 refuses."""
    argv = [PROBE_FACT.name, PROBE_FACT.script, "2", "1", "127.0.0.1"]
    out = subprocess.run(["bash", "-c", DRIVER, "bash", *argv], capture_output=True, text=True, timeout=30).stdout
    seen = parse_framed(out, {PROBE_FACT.name: PROBE_FACT})
    probe = seen["probe"].value["127.0.0.1"]
    assert probe.dev == "lo" and probe.reached and "refused" in probe.detail


def test_the_jit_script_expands_the_home_and_finds_the_parent_an_absent_dir_would_be_made_in(tmp_path):
    out = subprocess.run(["bash", "-c", facts._JIT, "jit", str(tmp_path), "~/.cache/vllm-jit"], capture_output=True,
                         text=True, check=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}).stdout
    here, home = facts.parse_jit(out)
    assert (here.path, here.exists, here.writable) == (str(tmp_path), True, True)
    assert (home.path, home.exists, home.writable) == (f"{tmp_path}/.cache/vllm-jit", False, True)
    assert here.fstype == home.fstype != ""


def test_the_rated_speed_is_the_fastest_supported_link_mode():
    """The published `ethtool swp1` output of the kernel commit that added link-mode lanes (012ce4dd3102,
    "ethtool: Extend link modes settings uAPI with lanes"), cut to the part _RATED's sed prints; a veth lists
    none; a node without ethtool says so."""
    assert facts.parse_rated(sample("ethtool-rated-kernel-lanes-commit.txt")) == {
        "lo": None, "swp1": 100000, "veth0": None}
    assert facts.parse_rated("no ethtool\n") is None
