"""The simulated cluster itself: images, SSH trust, inner Docker, the fake model, faults, teardown."""

from __future__ import annotations

import shlex
import shutil
import socket
import time

import docker.errors
import fabric
import paramiko
import pytest

from deploy_helpers import MODEL_ROOT, blobs_on
from orchestrator.sim import fake_model, images
from orchestrator.sim import reset as sim_reset
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.state import FABRIC_IFACE, LABEL, NodeInfo, SimError

pytestmark = pytest.mark.integration

GPU_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm",
             "--format=csv,noheader,nounits"]


def ssh(cluster: SimCluster, node: NodeInfo, known_hosts: str | None = None) -> paramiko.SSHClient:
    """A paramiko client that trusts only the given known_hosts file (RejectPolicy for the rest)."""
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts or str(cluster.known_hosts_path))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(node.ip, port=22, username="root", key_filename=str(cluster.key_path),
                   look_for_keys=False, allow_agent=False, timeout=30, banner_timeout=30, auth_timeout=30)
    return client


def run(client: paramiko.SSHClient, argv: list[str], timeout: float = 180) -> tuple[int, str, str]:
    _, stdout, stderr = client.exec_command(shlex.join(argv), timeout=timeout)
    code = stdout.channel.recv_exit_status()
    return code, stdout.read().decode(), stderr.read().decode()


def ssh_run(cluster: SimCluster, node: NodeInfo, argv: list[str]) -> tuple[int, str, str]:
    client = ssh(cluster, node)
    try:
        return run(client, argv)
    finally:
        client.close()


def can_connect(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2):
            return True
    except OSError:
        return False


TCP_PROBE = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n"
             "except OSError as e:\n"
             "    print(e); sys.exit(1)\n")


# ---- images -----------------------------------------------------------------------------------
def test_images_are_cached_by_their_inputs(docker_client, sim_images, monkeypatch, tmp_path):
    assert images.node_spec().base_tag.split(":")[0] == "spark-deploy-sim/node-base"
    assert any(t.startswith("spark-deploy-sim/node:") for t in sim_images.node.tags)
    assert images.VLLM_REFERENCE_TAG in sim_images.vllm.tags
    assert sim_images.vllm.attrs["Config"]["Entrypoint"] == ["vllm", "serve"]
    # freeze the stand-in package (it may be edited while this runs), then: no debootstrap, and a pure hit
    frozen = tmp_path / "standin"
    shutil.copytree(images.vllm_sim_source(), frozen, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("SPARK_DEPLOY_SIM_VLLM_SIM", str(frozen))

    def no_debootstrap(*a, **k):
        raise AssertionError("a cached build must not debootstrap")

    monkeypatch.setattr(images, "_build_base", no_debootstrap)
    first = images.ensure_images(docker_client)
    t0 = time.monotonic()
    again = images.ensure_images(docker_client)
    assert time.monotonic() - t0 < 5
    assert again.built == []
    assert again.node.id == first.node.id == sim_images.node.id and again.vllm.id == first.vllm.id
    assert images.vllm_spec().tag in again.vllm.tags


def test_image_tag_follows_vllm_sim_content_but_not_the_mirror(tmp_path, monkeypatch):
    before = images.vllm_spec()
    alt = tmp_path / "standin"
    shutil.copytree(images.vllm_sim_source(), alt, ignore=shutil.ignore_patterns("__pycache__"))
    (alt / "base.py").write_bytes((alt / "base.py").read_bytes() + b"\n# changed\n")
    monkeypatch.setenv("SPARK_DEPLOY_SIM_VLLM_SIM", str(alt))
    after = images.vllm_spec()
    assert after.tag != before.tag
    assert after.base_tag == before.base_tag  # only the cheap top layer is redone
    node_tag = images.node_spec().tag
    monkeypatch.setattr(images, "apt_mirror", lambda: "http://mirror.invalid/debian")
    assert images.node_spec().tag == node_tag  # the mirror is where bytes come from, not an input


# ---- bring-up, SSH trust ------------------------------------------------------------------------
def test_two_nodes_up_with_ssh_through_known_hosts_only(pair, tmp_path):
    from orchestrator.config.load import load_deployment

    cluster = pair
    n1, n2 = cluster.nodes()
    assert (n1.name, n2.name) == ("spark-1", "spark-2")
    assert n1.ip.endswith(".11") and n2.ip.endswith(".12")
    # the lead's models parse what `up` wrote
    dep = load_deployment(cluster.recipe_path, cluster.inventory_path)
    assert [n.address for n in dep.inventory.nodes] == [n1.ip, n2.ip]
    assert dep.recipe.image.id == cluster.info()["images"]["vllm"]

    for node in (n1, n2):
        code, out, _ = ssh_run(cluster, node, ["hostname"])
        assert (code, out.strip()) == (0, node.name)

    conn = fabric.Connection(host=n2.ip, user="root", port=22, connect_timeout=10, connect_kwargs={
        "key_filename": str(cluster.key_path), "look_for_keys": False, "allow_agent": False})
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    conn.client.load_host_keys(str(cluster.known_hosts_path))
    try:
        assert conn.run("hostname", hide=True, in_stream=False).stdout.strip() == "spark-2"
    finally:
        conn.close()

    # sshd offers public-key auth only (no passwords, no keyboard-interactive)
    transport = paramiko.Transport((n1.ip, 22))
    try:
        transport.start_client(timeout=10)
        assert cluster.known_hosts_path.read_text().count(transport.get_remote_server_key().get_base64()) == 1
        with pytest.raises(paramiko.BadAuthenticationType) as info:
            transport.auth_none("root")
        assert info.value.allowed_types == ["publickey"]
    finally:
        transport.close()

    # node-to-node SSH with the key and known_hosts installed in the nodes (no TOFU either)
    code, out, err = ssh_run(cluster, n1, ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                                           "spark-2", "hostname"])
    assert (code, out.strip()) == (0, "spark-2"), err

    # a host missing from known_hosts is refused by RejectPolicy
    partial = tmp_path / "known_hosts.only-1"
    partial.write_text("".join(line + "\n" for line in cluster.known_hosts_path.read_text().splitlines()
                               if line.startswith(n1.ip + " ")))
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        ssh(cluster, n2, known_hosts=str(partial))

    # a node whose host key changed is refused too
    cluster.exec(n2.index, ["sh", "-c", "rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub && "
                                        "ssh-keygen -A >/dev/null"])
    cluster.fault(n2.index, "stop-sshd")
    cluster.fault(n2.index, "start-sshd")
    try:
        with pytest.raises(paramiko.BadHostKeyException):
            ssh(cluster, n2)
        ssh(cluster, n1).close()  # the other node is unaffected
    finally:
        sim_reset.restore_ssh(cluster, n2)  # the shared cluster's host key as it was made
    ssh(cluster, n2).close()


# ---- images on nodes, GPU stand-ins, the model -------------------------------------------------------
def test_image_only_on_node1_and_gpu_run_works(bare_peer, sim_images):
    cluster = bare_peer
    n1, n2 = cluster.nodes()
    image_id = cluster.info()["images"]["vllm"]  # not sim_images': vllm_sim.py may have changed since
    assert image_id.startswith("sha256:")
    code, out, _ = ssh_run(cluster, n1, ["docker", "image", "inspect", "--format",
                                         "{{.Id}} {{json .RepoDigests}}", "vllm-sim:latest"])
    assert (code, out.split()) == (0, [image_id, "[]"])  # same ID after save|load, no RepoDigests
    code, out, err = ssh_run(cluster, n1, ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3",
                                           image_id, "-c", "print(6 * 7)"])
    assert (code, out.strip()) == (0, "42"), err
    code, out, err = ssh_run(cluster, n1, ["docker", "run", "--rm", "--gpus", "all", image_id, "--help"])
    assert code == 0 and "usage" in (out + err).lower(), out + err
    code, _, err = ssh_run(cluster, n2, ["docker", "image", "inspect", image_id])
    assert code != 0 and "no such" in err.lower()
    # node-to-node transfer over the nodes' own SSH trust keeps the ID
    code, _, err = ssh_run(cluster, n1, ["sh", "-c", 'docker save "$1" | ssh -o BatchMode=yes spark-2 docker load',
                                         "sh", "vllm-sim:latest"])
    assert code == 0, err
    code, out, _ = ssh_run(cluster, n2, ["docker", "image", "inspect", "--format", "{{.Id}}", "vllm-sim:latest"])
    assert (code, out.strip()) == (0, image_id)


def test_nvidia_smi_stub_and_gpu_fault(pair):
    cluster = pair
    n1, n2 = cluster.nodes()
    code, out, _ = ssh_run(cluster, n2, GPU_QUERY)
    assert (code, out.strip()) == (0, "NVIDIA GB10, 580.159.03, 122502, 2418, 2418")
    code, out, _ = ssh_run(cluster, n1, ["nvidia-smi", "-L"])
    assert code == 0 and out.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")
    code, out, _ = ssh_run(cluster, n1, ["nvidia-smi"])
    assert code == 0 and "Driver Version: 580.159.03" in out and "CUDA Version: 13.0" in out

    cluster.fault("spark-2", "gpu", driver="575.57.08", clock="2200")
    assert ssh_run(cluster, n2, GPU_QUERY)[1].strip() == "NVIDIA GB10, 575.57.08, 122502, 2200, 2418"
    assert ssh_run(cluster, n1, GPU_QUERY)[1].strip() == "NVIDIA GB10, 580.159.03, 122502, 2418, 2418"
    cluster.fault(2, "gpu", reset=True)
    assert ssh_run(cluster, n2, GPU_QUERY)[1].strip() == "NVIDIA GB10, 580.159.03, 122502, 2418, 2418"


def test_fake_model_in_hf_cache_layout(pair):
    cluster = pair
    meta = fake_model.model_metadata()
    assert cluster.info()["model"] == meta
    root = MODEL_ROOT
    for node in cluster.nodes():
        assert cluster.exec(node.index, ["cat", f"{root}/refs/main"]).stdout == meta["revision"]
        assert blobs_on(cluster, node.index) == {f["blob"]: f["size"] for f in meta["files"].values()}
        link = cluster.exec(node.index, ["readlink", f"{root}/snapshots/{meta['revision']}/config.json"])
        assert link.stdout.strip() == f"../../blobs/{meta['files']['config.json']['blob']}"
    shard = cluster.container(1).get_archive(f"{root}/snapshots/{meta['revision']}/model-00003-of-00003.safetensors")
    assert shard  # followed through the symlink by the engine
    names = set()
    for f in meta["files"]:
        if f.endswith(".safetensors"):
            data = fake_model.model_files()[f]
            names |= set(fake_model.read_safetensors_header(data))
    assert "model.visual.blocks.0.attn.qkv.weight" in names
    assert any(n.startswith("mtp.layers.0.") for n in names)
    assert "model.layers.1.mlp.experts.3.gate_up_proj.weight" in names and "model.layers.0.mlp.gate.weight" in names
    assert meta["total_bytes"] < 2 * 1024 * 1024


def test_exec_returns_the_whole_output_and_the_command_as_given(pair):
    """SimCluster.exec holds the exec open until both streams' end markers arrived (node_exec.py): argv reaches
    the node unchanged, stdin is empty, the wrapper is not in the command's environment, and short processes
    that print and exit at once (the case the engine can cut) give all of their output, every time."""
    odd = ["a b", "c'd", "$HOME", "*", "-n", ""]
    assert pair.exec(1, ["printf", "[%s]", *odd]).stdout == "".join(f"[{a}]" for a in odd)
    mixed = pair.exec(1, ["sh", "-c", "cat; echo out; echo err >&2; exit 3"], check=False)
    assert (mixed.code, mixed.stdout, mixed.stderr) == (3, "out\n", "err\n")
    assert "SIM_EXEC" not in pair.exec(1, ["env"]).stdout
    # `pgrep -f` sees the command alone: nothing of its argv is on the wrapper's command line
    assert pair.exec(1, ["sh", "-c", "pgrep -fc unique-marker-4711 || true"]).stdout.strip() == "1"
    for size in [1, 100, 65536, 1 << 20] * 10:
        got = pair.exec(1, ["head", "-c", str(size), "/dev/zero"])
        assert len(got.stdout) == size
    assert pair.exec(1, ["readlink", "/proc/1/exe"]).stdout.strip() != ""
    # an argv longer than one environment string can hold runs as a plain exec
    assert pair.exec(1, ["sh", "-c", 'echo "$#"', "sh", *["y" * 1000] * 150]).stdout == "150\n"


# ---- faults ----------------------------------------------------------------------------------
def test_shared_jit_really_shares_one_directory(pair):
    cluster = pair
    n1, n2 = cluster.nodes()
    token = "/var/cache/vllm-jit/token-from-spark-1"
    assert ssh_run(cluster, n1, ["touch", token])[0] == 0
    assert ssh_run(cluster, n2, ["test", "-e", token])[0] != 0  # local by default
    cluster.fault("all", "shared-jit")
    assert ssh_run(cluster, n1, ["sh", "-c", f"echo hello > {shlex.quote(token)}"])[0] == 0
    code, out, _ = ssh_run(cluster, n2, ["cat", token])
    assert (code, out.strip()) == (0, "hello")
    cluster.fault("all", "local-jit")
    assert ssh_run(cluster, n2, ["test", "-e", token])[0] != 0


def test_service_and_network_faults(pair):
    cluster = pair
    n1, n2 = cluster.nodes()

    cluster.fault(n2.name, "stop-sshd")
    with pytest.raises((OSError, paramiko.SSHException)):
        ssh(cluster, n2)
    cluster.fault(n2.name, "start-sshd")
    ssh(cluster, n2).close()

    cluster.fault(n2.name, "stop-dockerd")
    assert ssh_run(cluster, n2, ["docker", "info"])[0] != 0
    cluster.fault(n2.name, "start-dockerd")
    assert ssh_run(cluster, n2, ["docker", "info", "--format", "{{.ServerVersion}}"])[0] == 0

    probe = ["python3", "-c", TCP_PROBE, n2.fabric_ip, "22"]
    assert ssh_run(cluster, n1, probe)[0] == 0
    cluster.fault(n2.name, "partition")  # net=fabric: the QSFP link alone
    assert ssh_run(cluster, n1, probe)[0] != 0  # node 1 -> node 2 blocked on the fabric
    assert ssh_run(cluster, n2, ["python3", "-c", TCP_PROBE, n1.fabric_ip, "22"])[0] != 0  # and back
    assert ssh_run(cluster, n1, ["python3", "-c", TCP_PROBE, n2.ip, "22"])[0] == 0  # management still works
    assert ssh_run(cluster, n2, ["hostname"])[0] == 0  # the controller still reaches it
    cluster.fault(n2.name, "heal")
    assert ssh_run(cluster, n1, probe)[0] == 0

    assert not can_connect(n1.ip, 8000)
    cluster.fault(1, "occupy-port", port=8000)
    assert can_connect(n1.ip, 8000)
    cluster.fault(1, "free-port", port=8000)
    assert not can_connect(n1.ip, 8000)


def _send_seconds(cluster, nbytes: int) -> float:
    """Seconds spark-1 takes to push nbytes to spark-2 over node-to-node ssh on the fabric (its own clock, one exec)."""
    script = ('t0=$(date +%s.%N); head -c "$1" /dev/zero | ssh -o BatchMode=yes "$2" "cat >/dev/null"; '
              't1=$(date +%s.%N); echo "$t0 $t1"')
    t0, t1 = map(float, cluster.exec(1, ["sh", "-c", script, "sh", str(nbytes), cluster.node(2).fabric_ip]).stdout.split())
    return t1 - t0


def _connect_ms(cluster) -> float:
    """Median TCP connect time from spark-1 to spark-2's sshd, in ms (7 tries, one exec)."""
    code = ("import socket,statistics,sys,time\nts=[]\nfor _ in range(7):\n t=time.monotonic()\n"
            " s=socket.create_connection((sys.argv[1],22),timeout=5); ts.append(time.monotonic()-t); s.close()\n"
            "print(statistics.median(ts)*1000)")
    return float(cluster.exec(1, ["python3", "-c", code, cluster.node(2).fabric_ip]).stdout)


def test_netem_delays_for_real_or_fails_clearly(pair):
    """netem on spark-1 delays what it sends by the delay asked (a connect's SYN-ACK round trip grows by it);
    on a kernel without sch_netem (this CI machine's) the fault says exactly that and changes nothing."""
    before = _connect_ms(pair)
    try:
        pair.fault(1, "netem", delay=80)
    except SimError as exc:
        assert "sch_netem" in str(exc) and "throttle" in str(exc)
        assert "netem" not in pair.exec(1, ["tc", "qdisc", "show", "dev", FABRIC_IFACE]).stdout
        return
    try:
        slowed = _connect_ms(pair)
    finally:
        pair.fault(1, "heal")
    assert slowed - before >= 0.8 * 80, (before, slowed)
    assert _connect_ms(pair) < before + 40


def test_throttle_limits_the_rate_for_real(pair):
    """tbf at 10 Mbit/s on spark-1: 2.5 MB to spark-2 takes about 2 s (well over twice as long as unthrottled), and
    heal gives the link back."""
    nbytes = 2_500_000
    free = _send_seconds(pair, nbytes)
    pair.fault(1, "throttle", rate="10mbit")
    try:
        assert "tbf" in pair.exec(1, ["tc", "qdisc", "show", "dev", FABRIC_IFACE]).stdout
        limited = _send_seconds(pair, nbytes)
    finally:
        pair.fault(1, "heal")
    rate = nbytes * 8 / limited / 1e6
    assert 5 <= rate <= 11, f"{rate:.1f} Mbit/s under a 10 Mbit/s throttle ({limited:.2f} s, free {free:.2f} s)"
    assert limited > 2 * free, (limited, free)  # free includes the ssh handshake, slow under load
    assert "tbf" not in pair.exec(1, ["tc", "qdisc", "show", "dev", FABRIC_IFACE]).stdout


# ---- liveness and teardown ---------------------------------------------------------------------
def test_dead_node_fails_readiness_at_once_and_down_leaves_nothing(sim_cluster_factory, docker_client):
    cluster = sim_cluster_factory(nodes=2)
    n2 = cluster.node(2)
    cluster.container(2).kill()
    t0 = time.monotonic()
    with pytest.raises(SimError, match="exited|is exited"):
        cluster.wait_ready(n2, timeout=60)
    assert time.monotonic() - t0 < 10

    flt = {"label": f"{LABEL}={cluster.name}"}
    assert docker_client.volumes.list(filters=flt)
    removed = cluster.down()
    assert any(r.startswith("container") for r in removed)
    assert docker_client.containers.list(all=True, filters=flt) == []
    assert docker_client.networks.list(filters=flt) == []
    assert docker_client.volumes.list(filters=flt) == []
    assert not cluster.state_dir.exists()
    assert cluster.down() == []  # idempotent
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(n2.container)
