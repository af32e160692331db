"""`setup`'s pure logic: the fabric from probes, the judge's values and problems, host key trust, the
inventory document (validated before it replaces anything), and the scripts that write on a node (run in
local bash against a temporary HOME)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from orchestrator.config.source import ConfigError
from orchestrator.facts.core import Observed
from orchestrator.setup import document, hostkeys, judge, login, nodekeys
from orchestrator.setup.fabric import Candidate, Probe, candidates, choose, management_of
from orchestrator.setup.facts import (Docker, EarlyOom, Gid, HcaPort, HfCache, JitCandidate, Link, MemInfo, Roce,
                                      parse_links)

SAMPLES = Path(__file__).parent / "samples" / "setup"
GIB = 1 << 30
H1, H2 = "10.0.0.11", "10.0.0.12"
F1, F2 = "192.168.100.10", "192.168.100.11"


def links(fabric_ip: str, mtu: int = 9000) -> dict[str, Link]:
    return {"lo": Link("lo", "UNKNOWN", 65536, (("127.0.0.1", 8),), True),
            "enP7s7": Link("enP7s7", "UP", 1500, (("10.0.0.1", 24),)),
            "enp1s0f1np1": Link("enp1s0f1np1", "UP", mtu, ((fabric_ip, 24),)),
            "docker0": Link("docker0", "DOWN", 1500, (("172.17.0.1", 16),))}


def reached(dev: str = "enp1s0f1np1") -> Probe:
    return Probe("", dev, True, "TCP connect ok")


def test_candidates_leave_out_management_loopback_bridges_and_down_links():
    assert candidates("a", links(F1), "enP7s7") == [Candidate("a", "enp1s0f1np1", F1, 9000)]
    sim = parse_links((SAMPLES / "sim-ip-j-addr.json").read_text())
    assert [c.link for c in candidates("a", sim, "enP7s7")] == ["enp1s0f0np0"]
    assert management_of(None, sim, next(a for a, _ in sim["enP7s7"].ipv4)) == "enP7s7"


def test_the_fabric_is_the_pair_both_sides_reached_over_their_own_link():
    cands = {H1: candidates(H1, links(F1), "enP7s7"), H2: candidates(H2, links(F2), "enP7s7")}
    both = {H1: {F2: reached()}, H2: {F1: reached()}}
    fabric = choose(cands, both)
    assert {h: (c.link, c.addr) for h, c in fabric.chosen.items()} == {H1: ("enp1s0f1np1", F1),
                                                                       H2: ("enp1s0f1np1", F2)}
    one_way = {H1: {F2: reached()}, H2: {F1: Probe(F1, "?", False, "Network is unreachable")}}
    cut = choose(cands, one_way, names={H1: "spark-1", H2: "spark-2"})
    assert not cut.found and "  spark-2 -> 192.168.100.10 no route: Network is unreachable" in cut.tried
    via_management = {H1: {F2: reached("enP7s7")}, H2: {F1: reached()}}  # answered, but not over the fabric
    assert not choose(cands, via_management).found


def seen_of(fabric_ip: str, *, mtu: int = 9000, docker: Docker | None = None, roce: Roce | None = None,
            oom: EarlyOom = EarlyOom(False), jit: list[JitCandidate] | None = None, name: str = "",
            state: tuple | None = None) -> dict:
    values = {
        "hostname": name or f"spark-{fabric_ip[-1]}", "links": links(fabric_ip, mtu), "user": ("nvidia", ("docker",)),
        "docker": docker or Docker(True, "28.3.3", "overlayfs", ("nvidia", "runc")),
        "hf_cache": [HfCache("/home/nvidia/.cache/huggingface", "default", 2)],
        "jit_cache": jit or [JitCandidate("/var/cache/vllm-jit", False, False, "ext2/ext3"),
                             JitCandidate("/home/nvidia/.cache/vllm-jit", False, True, "ext2/ext3")],
        "meminfo": MemInfo(128 * GIB, 120 * GIB), "gpus": 1, "earlyoom": oom, "speeds": {"enp1s0f1np1": 200000},
        "roce": roce or spark_roce(fabric_ip),
        "state_dir": state or (True, "/var/lib/spark-deploy writable by nvidia (nvidia:nvidia 755)", "nvidia"),
    }
    return {k: Observed(value=v) for k, v in values.items()}


def spark_roce(ip: str, index: int = 3, hca: str = "rocep1s0f1") -> Roce:
    ll = "fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7"
    gids = [Gid(hca, "1", 0, ll, "RoCE v1", "enp1s0f1np1"), Gid(hca, "1", 1, ll, "RoCE v2", "enp1s0f1np1")]
    gids += [Gid(hca, "1", i, judge.mapped_gid(ip), "RoCE v2" if i == index else "RoCE v1", "enp1s0f1np1")
             for i in range(2, index + 1)]
    return Roce(True, (HcaPort(hca, "1", "enp1s0f1np1", True), HcaPort("rocep1s0f0", "1", "enp1s0f0np0", False)),
                tuple(gids))


def decide(s1: dict, s2: dict):
    seen = {H1: s1, H2: s2}
    cands = {h: candidates(h, seen[h]["links"].value, "enP7s7") for h in seen}
    fabric = choose(cands, {H1: {F2: reached()}, H2: {F1: reached()}})
    return judge.decide([H1, H2], seen, cands, fabric, {H1: "enP7s7", H2: "enP7s7"})


def test_a_spark_pair_decides_roce_on_the_hca_behind_the_fabric_link_at_its_roce_v2_gid():
    d = decide(seen_of(F1), seen_of(F2))
    assert d.problems == []
    assert {k: v.value for k, v in d.interconnect.items()} == {
        "socket_ifname": "enp1s0f1np1", "profile": "roce", "hca": "rocep1s0f1", "gid_index": 3}
    assert [(n.name.value, n.fabric_ip.value, n.jit_cache.value, n.env) for n in d.nodes] == [
        ("spark-0", F1, "/home/nvidia/.cache/vllm-jit", {}), ("spark-1", F2, "/home/nvidia/.cache/vllm-jit", {})]
    assert d.rows["fabric"]["spark-0"] == "enp1s0f1np1 192.168.100.10 mtu 9000 200000 Mb/s"


def test_a_gid_index_or_hca_that_differs_goes_to_that_nodes_env_and_no_hca_means_tcp():
    d = decide(seen_of(F1), seen_of(F2, roce=spark_roce(F2, index=5, hca="roceP2p1s0f1")))
    assert {k: v.value for k, v in d.nodes[1].env.items()} == {"NCCL_IB_HCA": "roceP2p1s0f1", "NCCL_IB_GID_INDEX": "5"}
    tcp = decide(seen_of(F1), seen_of(F2, roce=Roce(False)))
    assert tcp.interconnect["profile"].value == "tcp" and "hca" not in tcp.interconnect and not tcp.problems


def test_problems_name_node_fact_and_fix():
    d = decide(seen_of(F1), seen_of(F2, mtu=1500, docker=Docker(False, error="permission denied on docker.sock"),
                                    oom=EarlyOom(True, 10.0, cmdline="earlyoom -m 10")))
    said = [str(p) for p in d.problems]
    assert ("spark-1: fabric MTU: enp1s0f1np1 mtu 1500, not 9000 as on spark-0 9000; fix: `sudo ip link set dev "
            "enp1s0f1np1 mtu 9000` on spark-1") in said[-1]
    assert any(s.startswith("spark-1: docker permission: nvidia cannot use the engine (permission denied") and
               "`sudo usermod -aG docker nvidia` on spark-1" in s for s in said)
    assert any(s.startswith("spark-1: earlyoom: earlyoom kills below 12.8 GiB available") and "field note 8" in s
               for s in said)
    assert not any(p.node == "spark-0" for p in d.problems)


def test_a_state_dir_the_login_cannot_make_is_a_problem_with_the_admin_fix():
    seen = "/var/lib/spark-deploy absent, and nvidia cannot create it in /var/lib (root:root 755)"
    d = decide(seen_of(F1), seen_of(F2, state=(False, seen, "nvidia")))
    assert [str(p) for p in d.problems] == [f"spark-1: state dir: {seen}; fix: `sudo install -d -o nvidia -g nvidia "
                                            "/var/lib/spark-deploy` on spark-1 (once, as an admin), or set state_dir "
                                            "in the inventory to a directory nvidia owns"]


def test_a_jit_cache_only_on_nfs_and_a_missing_roce_v2_gid_are_problems():
    nfs = [JitCandidate("/var/cache/vllm-jit", False, True, "nfs"), JitCandidate("/home/n/.cache/vllm-jit", False,
                                                                                  True, "nfs4")]
    gids = Roce(True, (HcaPort("rocep1s0f1", "1", "enp1s0f1np1", True),),
                (Gid("rocep1s0f1", "1", 1, "fe80:0000:0000:0000:3e6d:66ff:fecc:b3b7", "RoCE v2", "enp1s0f1np1"),))
    d = decide(seen_of(F1, jit=nfs), seen_of(F2, roce=gids))
    facts = {(p.node, p.fact) for p in d.problems}
    assert facts == {("spark-0", "JIT cache"), ("spark-1", "RoCE GID")}
    assert "field note 2" in next(p.fix for p in d.problems if p.fact == "JIT cache")


def test_an_unreadable_fact_is_a_problem_and_nothing_is_decided():
    s2 = seen_of(F2)
    s2["docker"] = Observed(error="bash: docker: command not found")
    d = decide(seen_of(F1), s2)
    assert [(p.node, p.fact) for p in d.problems] == [("spark-1", "docker")] and d.nodes == []


@pytest.fixture
def host_key(tmp_path):
    private = tmp_path / "k"
    login.new_key(str(private), "test")
    return hostkeys.HostKey("10.0.0.11", 22, paramiko.Ed25519Key.from_private_key_file(str(private)))


def test_a_host_key_is_trusted_by_yes_the_pasted_fingerprint_or_a_matching_flag_and_nothing_else(host_key):
    fp = host_key.fingerprint
    assert fp.startswith("SHA256:") and len(fp) == 50
    hostkeys.confirm(host_key, {}, lambda k: "yes")
    hostkeys.confirm(host_key, {}, lambda k: fp)
    hostkeys.confirm(host_key, {"10.0.0.11": fp}, None)
    for given, ask, words in [({}, lambda k: "SHA256:" + "A" * 43, "is not its host key's"),
                              ({}, lambda k: "no", "not trusted"),
                              ({}, None, "--yes cannot trust it"),
                              ({"10.0.0.11": "SHA256:" + "B" * 43}, None, "is not the --fingerprint given")]:
        with pytest.raises(hostkeys.HostKeyRefused, match=words):
            hostkeys.confirm(host_key, given, ask)


def test_known_hosts_gets_new_keys_once_and_a_changed_key_is_refused(host_key, tmp_path):
    path = str(tmp_path / "ssh" / "known_hosts")
    assert hostkeys.known(path, host_key) is None
    assert hostkeys.write(path, [host_key]) == [host_key] and hostkeys.write(path, [host_key]) == []
    assert (tmp_path / "ssh" / "known_hosts").stat().st_mode & 0o777 == 0o600
    assert paramiko.HostKeys(path).lookup("10.0.0.11")["ssh-ed25519"].asbytes() == host_key.key.asbytes()
    other = tmp_path / "other"
    login.new_key(str(other), "x")
    changed = hostkeys.HostKey("10.0.0.11", 22, paramiko.Ed25519Key.from_private_key_file(str(other)))
    with pytest.raises(hostkeys.HostKeyRefused, match="differs from the one in"):
        hostkeys.write(path, [changed])
    assert hostkeys.HostKey("h", 2222, host_key.key).line.startswith("[h]:2222 ssh-ed25519 ")


def test_the_document_comments_every_value_validates_and_never_replaces_a_file_with_a_broken_one(tmp_path,
                                                                                                 host_key):
    kh = tmp_path / "known_hosts"
    hostkeys.write(str(kh), [host_key])
    keyfile = tmp_path / "id"
    login.new_key(str(keyfile), "t")
    d = decide(seen_of(F1), seen_of(F2))
    text = document.render(document.build(d, document.Access("lab", "nvidia", 22, str(keyfile), str(kh))))
    assert "  gid_index: 3 # /sys/class/infiniband/rocep1s0f1: the RoCE v2 GID of 192.168.100.10\n" in text
    for line in text.splitlines()[1:]:
        if ":" in line and not line.rstrip().endswith(":"):
            assert " # " in line, line  # every value says where it came from
    out = tmp_path / "inventory.yaml"
    assert document.diff(str(out), text).startswith(f"--- {out} (now)")
    document.write(str(out), text, {"HOME": str(tmp_path)})
    assert out.read_text() == text and document.diff(str(out), text) == ""
    with pytest.raises(ConfigError):
        document.write(str(out), text.replace("gid_index: 3", "gid_index: 300"), {"HOME": str(tmp_path)})
    assert out.read_text() == text and [p.name for p in tmp_path.iterdir() if p.name.startswith(".inventory")] == []


def test_a_new_key_is_0600_and_the_install_script_authorises_it_once(tmp_path):
    public = login.new_key(str(tmp_path / "keys" / "id"), "spark-deploy nvidia")
    assert (tmp_path / "keys" / "id").stat().st_mode & 0o777 == 0o600 and public.startswith("ssh-ed25519 ")
    assert login.new_key(str(tmp_path / "keys" / "id"), "again") == public  # kept, not replaced
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    (tmp_path / "home").mkdir()
    for _ in range(2):
        subprocess.run(["bash", "-c", login.INSTALL_SH, "install", public], env=env, check=True)
    auth = tmp_path / "home" / ".ssh" / "authorized_keys"
    assert auth.read_text() == public + "\n" and auth.stat().st_mode & 0o777 == 0o600


def test_node_keys_know_a_host_once_and_refuse_a_different_key_for_it(tmp_path):
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def known(addr: str, blob: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", nodekeys.KNOWN_SH, "k", addr, "ssh-ed25519", blob], env=env,
                              capture_output=True, text=True)

    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "known_hosts").write_text("spark-2,10.0.0.12,192.168.100.11 ssh-ed25519 AAAA1\n")
    assert known("192.168.100.11", "AAAA1").stdout.strip() == "known"
    assert known("192.168.100.12", "AAAA2").stdout.strip() == "added"
    refused = known("192.168.100.11", "AAAA3")
    assert refused.returncode == 3 and "holds another key for 192.168.100.11" in refused.stderr
    assert (tmp_path / ".ssh" / "known_hosts").read_text().count("\n") == 2


def test_the_inventory_records_the_links_speed_and_mtu_and_a_link_below_its_rating_is_a_warning(tmp_path, host_key):
    slow = seen_of(F2)
    slow["speeds"] = Observed(value={"enp1s0f1np1": 100000})
    rated = {"enp1s0f1np1": 200000, "enP7s7": 10000}
    d = decide({**seen_of(F1), "rated": Observed(value=rated)}, {**slow, "rated": Observed(value=rated)})
    assert d.problems == []  # said, not refused: the link still carries NCCL
    assert [str(w) for w in d.warnings] == [
        "spark-1: fabric speed: enp1s0f1np1 runs at 100000 Mb/s, rated 200000 Mb/s; fix: reseat or replace the "
        "cable on enp1s0f1np1 (`ethtool enp1s0f1np1` shows the negotiated mode); `spark-deploy fabric test` "
        "measures what it carries"]
    assert d.rows["fabric rated"] == {"spark-0": "200000 Mb/s", "spark-1": "200000 Mb/s"}
    kh = tmp_path / "known_hosts"
    hostkeys.write(str(kh), [host_key])
    text = document.render(document.build(d, document.Access("lab", "nvidia", 22, None, str(kh))))
    assert f"  fabric_ip: {F2} # enp1s0f1np1 (100000 Mb/s, mtu 9000): every other node reached it" in text


def test_a_node_without_ethtool_says_the_rating_is_not_known_and_warns_of_nothing():
    d = decide({**seen_of(F1), "rated": Observed(value=None)}, seen_of(F2))
    assert d.warnings == [] and d.rows["fabric rated"] == {
        "spark-0": "not known: ethtool is not on the node", "spark-1": "not known: the probe did not run"}
