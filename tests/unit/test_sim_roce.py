"""The sim's fake RoCE HCA (orchestrator/sim/node_roce.py) and the stand-in's IB transport read from it
(orchestrator/sim/standin/transport.py): NCCL's choices for the env it gets, on a Spark-shaped tree."""

from __future__ import annotations

import json

import pytest
from test_preflight_host_parse import obs, sim_pair

from orchestrator.facts.fabric import parse_infiniband
from orchestrator.preflight.checks_fabric import _mapped, roce_gid
from orchestrator.checks.verdict import Status
from orchestrator.sim import node_roce
from orchestrator.sim.standin.base import SimError
from orchestrator.sim.standin.transport import connect, roce

IFACES = {"enP7s7": "172.30.33.11", "enp1s0f0np0": "172.30.34.11"}
ROCE = {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "rocep1s0f0", "NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "INFO",
        "SIM_MEMLOCK_ASKED": "unlimited"}  # what node_roce.SIM_RUNC sets for `--ulimit memlock=-1`


def tree(tmp_path, spec: node_roce.RoceSpec, device: bool = True):
    sysfs = tmp_path / "infiniband"
    for rel, text in node_roce.files(spec).items():
        (sysfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (sysfs / rel).write_text(text)
    dev = tmp_path / "dev-infiniband"
    dev.mkdir()
    if device:
        (dev / "uverbs0").write_text("")  # a stand-in for the char device: the stand-in only looks for the name
    return str(sysfs), str(dev)


def test_a_spark_port_lists_link_local_then_mapped_gids_as_v1_v2():
    f = node_roce.files(node_roce.spark("172.30.34.11"))
    p = "rocep1s0f0/ports/1"
    assert f[f"{p}/gids/0"] == f[f"{p}/gids/1"] and f[f"{p}/gids/0"].startswith("fe80:0000:0000:0000:")
    assert [f[f"{p}/gid_attrs/types/{i}"].strip() for i in range(4)] == ["RoCE v1", "RoCE v2"] * 2
    assert f[f"{p}/gids/3"].strip() == _mapped("172.30.34.11")  # the form preflight's roce-gid expects
    assert f[f"{p}/gids/4"].strip() == node_roce.ZERO_GID and f"{p}/gid_attrs/types/4" not in f
    assert f[f"{p}/state"] == "4: ACTIVE\n"


def test_entries_are_named_for_messages():
    spec = node_roce.spark("172.30.34.11")
    assert node_roce.entry(spec, "rocep1s0f0", 0).startswith("RoCE v1 fe80") and "link-local" in \
        node_roce.entry(spec, "rocep1s0f0", 1)
    assert node_roce.entry(spec, "rocep1s0f0", 3).endswith("(IPv4-mapped)")
    assert node_roce.entry(spec, "rocep1s0f0", 9) == "no GID"


def test_valid_hca_and_gid_use_net_ib(tmp_path):
    sysfs, dev = tree(tmp_path, node_roce.spark("172.30.34.11"))
    lines = connect(ROCE, IFACES, sysfs, dev)
    assert "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:172.30.34.11<0>" in lines
    assert not any("NET/Socket" in x for x in lines)
    for hca in ("rocep", "=rocep1s0f0", "rocep1s0f0:1", "^mlx5"):
        assert roce({**ROCE, "NCCL_IB_HCA": hca}, sysfs, dev) == ("rocep1s0f0", "1"), hca


@pytest.mark.parametrize("change", [
    {"NCCL_IB_DISABLE": "1"}, {"NCCL_IB_HCA": "mlx5_0"}, {"NCCL_IB_HCA": "=rocep1s0"},
    {"NCCL_IB_HCA": "rocep1s0f0:2"}, {"NCCL_IB_HCA": "^rocep"}])
def test_disabled_or_misnamed_ib_falls_back_to_sockets(tmp_path, change):
    sysfs, dev = tree(tmp_path, node_roce.spark("172.30.34.11"))
    lines = connect({**ROCE, **change}, IFACES, sysfs, dev)
    assert "NCCL INFO NET/Socket : Using [0]enp1s0f0np0:172.30.34.11<0>" in lines
    assert not any("NET/IB : Using" in x for x in lines)


def test_no_device_or_port_down_falls_back(tmp_path):
    sysfs, dev = tree(tmp_path, node_roce.spark("172.30.34.11"), device=False)
    assert roce(ROCE, sysfs, dev) is None
    spec = node_roce.spark("172.30.34.11")
    spec.hcas["rocep1s0f0"]["1"].state = node_roce.DOWN
    sysfs, dev = tree(tmp_path / "down", spec)
    assert roce(ROCE, sysfs, dev) is None


def test_gid_index_out_of_range_or_unset_fails_init_like_nccl(tmp_path):
    sysfs, dev = tree(tmp_path, node_roce.spark("172.30.34.11"))
    for index in ("99", "7"):  # beyond the table; inside it but an unused (all-zero) slot
        with pytest.raises(SimError, match="unhandled system error"):
            connect({**ROCE, "NCCL_IB_GID_INDEX": index}, IFACES, sysfs, dev)
    # a RoCE v1 or link-local index is used by NCCL as given: preflight's roce-gid is what catches it
    assert roce({**ROCE, "NCCL_IB_GID_INDEX": "0"}, sysfs, dev) == ("rocep1s0f0", "1")


def test_too_little_locked_memory_fails_ib_set_up_like_nccl(tmp_path, monkeypatch):
    """With a host's default 8 MiB memlock and no `--ulimit memlock=-1` (no SIM_MEMLOCK_ASKED) the IB
    transport cannot register its buffers; sockets (IB disabled) need no locked memory."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (8 << 20, 8 << 20))
    sysfs, dev = tree(tmp_path, node_roce.spark("172.30.34.11"))
    env = {k: v for k, v in ROCE.items() if k != "SIM_MEMLOCK_ASKED"}
    with pytest.raises(SimError, match="ibv_reg_mr failed with error Cannot allocate memory.*memlock=-1"):
        connect(env, IFACES, sysfs, dev)
    with pytest.raises(SimError, match="ibv_reg_mr"):
        connect({**env, "SIM_MEMLOCK_ASKED": str(8 << 20)}, IFACES, sysfs, dev)
    assert "NCCL INFO Using network Socket" in connect({**env, "NCCL_IB_DISABLE": "1"}, IFACES, sysfs, dev)


def sysfs_view(spec: node_roce.RoceSpec, hca: str, index: int) -> str:
    """What preflight's `infiniband` fact script prints for this tree (the script's output, built here)."""
    f = node_roce.files(spec)
    out = f"hcas {' '.join(sorted(spec.hcas))} \nwant {hca} 1 {index}\n"
    if f"{hca}/ports/1/state" in f:
        out += f"state {f[f'{hca}/ports/1/state'].strip()}\n"
        out += f"gid {f[f'{hca}/ports/1/gids/{index}'].strip()}\n"
        out += f"type {f.get(f'{hca}/ports/1/gid_attrs/types/{index}', '').strip()}\n"
    return out


@pytest.mark.parametrize("hca,index,status,words", [
    ("rocep1s0f0", 3, "ok", "RoCE v2 0000:0000:0000:0000:0000:ffff:ac1f:140c"),
    ("rocep1s0f0", 2, "fail", "GID index 2 is RoCE v1, not RoCE v2"),
    ("rocep1s0f0", 0, "fail", "link-local"),
    ("rocep1s0f0", 1, "fail", "GID index 1 is RoCE v2 link-local fe80"),
])
def test_roce_gid_judges_every_entry_of_a_spark_port(tmp_path, hca, index, status, words):
    dep = sim_pair(tmp_path, profile="roce")
    seen = {"spark-1": {"infiniband": obs(parse_infiniband(sysfs_view(node_roce.spark("172.31.20.11"), hca, 3)))},
            "spark-2": {"infiniband": obs(parse_infiniband(sysfs_view(node_roce.spark("172.31.20.12"), hca, index)))}}
    v = roce_gid(seen, dep)
    assert v.cells["spark-2"].status == Status(status) and words in v.cells["spark-2"].value, v.cells["spark-2"]
    assert (v.failed_nodes() == ["spark-2"]) == (status == "fail")


@pytest.mark.parametrize("layout", ["container", "exec"])
def test_the_runc_wrapper_lowers_a_memlock_request_the_node_cannot_grant_and_says_what_was_asked(tmp_path, layout):
    """node_roce.RUNC_MEMLOCK as the node runs it: a real process whose hard memlock limit is a node's 8 MiB
    (lowering a hard limit needs no privilege, so this holds on a host that allows unlimited too)."""
    import resource
    import subprocess
    import sys

    hard = 8 << 20
    node_limit = lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))  # noqa: E731
    process = {"args": ["vllm"], "env": ["PATH=/usr/bin"],
               "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576},
                           {"type": "RLIMIT_MEMLOCK", "hard": 2 ** 64 - 1, "soft": 2 ** 64 - 1}]}
    doc = {"ociVersion": "1.0.2", "process": process} if layout == "container" else process
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    subprocess.run([sys.executable, "-c", node_roce.RUNC_MEMLOCK, str(path)], check=True, preexec_fn=node_limit)
    got = json.loads(path.read_text())
    proc = got["process"] if layout == "container" else got
    assert proc["rlimits"][1] == {"type": "RLIMIT_MEMLOCK", "hard": hard, "soft": hard}
    assert proc["rlimits"][0]["hard"] == 1048576  # the others untouched
    assert proc["env"] == ["PATH=/usr/bin", "SIM_MEMLOCK_ASKED=unlimited"]
