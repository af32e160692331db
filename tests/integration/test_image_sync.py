"""Image sync on the simulated cluster (real sshd, real dockerd, real `tc` and mounts): Ctrl-C and SIGTERM
stop both ends of a throttled copy, a dropped link or a hung end fails within the progress bound naming
both nodes, a full disk or a dead engine on the target blames the target, and whatever fails leaves the
target's images as they were and no copy process on either node."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest

from orchestrator.docker_cli import image_sync as sync
from orchestrator.docker_cli import layers
from orchestrator.docker_cli.images import ImageIdentity, inspect_image, snapshot
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.images import VLLM_REFERENCE_TAG
from orchestrator.transport.cancel import Cancelled
from orchestrator.transport.group import Cluster
from orchestrator.transport.node import NodeError

from deploy_helpers import CLI, pinned_id

pytestmark = pytest.mark.integration

COPY_PROCESSES = ("docker save", "docker load", "sdsend", "sdrecv", "dd bs=1M", "sdstore", "sdfilter")


@pytest.fixture
def clean(bare_peer):
    """Every test starts with spark-2 holding no image, an open fast network and a working engine; what a
    test injected is healed here (the shared cluster's reset then checks nothing else was left)."""
    yield bare_peer
    for node in (1, 2):
        bare_peer.fault(node, "heal")
    bare_peer.fault(2, "free-disk")
    bare_peer.fault(2, "start-dockerd")


def copy_processes(sim: SimCluster, node: int) -> list[str]:
    out = sim.exec(node, ["ps", "-eo", "args="]).stdout
    return [line for line in out.splitlines()
            if any(marker in line for marker in COPY_PROCESSES) or line.split()[:1] == ["ssh"]]


def wait_for(condition, bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def leftovers(sim: SimCluster, bound: float = 3.0) -> dict[int, list[str]]:
    """Copy processes still on either node after `bound` s of polling (the kill is TERM, then KILL at 1 s)."""
    deadline = time.monotonic() + bound
    while True:
        left = {n: p for n in (1, 2) if (p := copy_processes(sim, n))}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def images(sim: SimCluster, node: int) -> list[str]:
    out = sim.exec(node, ["docker", "image", "ls", "-a", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"])
    return sorted(out.stdout.split("\n"))


def loading_on_target(sim: SimCluster) -> bool:
    return any("docker load" in line for line in copy_processes(sim, 2))


STALL_S = 4.0  # up's --copy-stall-timeout here: the tool's 30 s default shortened, the bound is what is tested


def start_up(sim: SimCluster) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "up", str(sim.recipe_path), "-i", str(sim.inventory_path), "--json",
                             "--copy-stall-timeout", str(STALL_S)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stderr


# ---- through the CLI -------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_throttled_sync_stops_both_ends_and_leaves_nothing(clean, sig):
    before = images(clean, 2)
    clean.fault(1, "throttle", rate="20mbit")  # 120 MB at 20 Mbit/s: a 48 s copy
    proc = start_up(clean)
    try:
        wait_for(lambda: loading_on_target(clean), 60, "docker load never started on spark-2")
        time.sleep(1)  # the scenario: one second into the copy
        sent = time.monotonic()
        proc.send_signal(sig)
        code, stderr = finish(proc, 30)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + sig, stderr
    assert elapsed < 5, f"exit took {elapsed:.1f} s after {sig.name}"
    assert "interrupted" in stderr and ("SIGTERM" if sig == signal.SIGTERM else "Ctrl-C") in stderr
    assert leftovers(clean) == {}
    assert images(clean, 2) == before, "the target must hold no partial image and no new tag"


def tool_processes(sim: SimCluster, node: int) -> list[str]:
    """Every process the tool starts on a node for an image copy, the late remover (`sdlate`) included."""
    return [line for line in sim.exec(node, ["ps", "-eo", "args="]).stdout.splitlines()
            if any(marker in line for marker in (*COPY_PROCESSES, "sdlate")) or line.split()[:1] == ["ssh"]]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_30_s_after_a_signal_during_the_copy_no_process_the_tool_started_runs_on_any_node(clean, sig):
    """Under the docker-group login (the `spark` user, which cannot read the engine's staging directory): the
    late remover a cancelled copy may leave is bounded by what that login can observe, so 30 s after the
    signal nothing the tool started runs on either node, and what was ended or left is said."""
    assert clean.exec(2, ["id", "-nG", "spark"]).stdout.split().count("docker") == 1
    clean.fault(1, "throttle", rate="20mbit")
    proc = subprocess.Popen([*CLI, "up", str(clean.recipe_path), "-i", str(clean.inventory_path), "--json",
                             "--copy-stall-timeout", str(STALL_S)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(lambda: loading_on_target(clean), 60, "docker load never started on spark-2")
        time.sleep(1)  # the scenario: one second into the copy
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, stderr
    said = [e for e in map(json.loads, stdout.splitlines()) if e.get("event") == "warning" and e.get("node") == "spark-2"]
    assert any("the image copy was ended on both nodes" in e["message"] or "a remover there (`sdlate`)" in e["message"]
               for e in said), f"what was ended or left on spark-2 is not said: {stdout[-2000:]}"
    left: dict[int, list[str]] = {}
    while time.monotonic() - ended < 30:
        left = {n: p for n in (1, 2) if (p := tool_processes(clean, n))}
        if not left:
            break
        time.sleep(0.5)
    assert left == {}, f"30 s after {sig.name} these still run: {left}\n{stderr}"


def test_a_link_dropped_mid_copy_fails_naming_both_nodes_and_ends_both_ends(clean):
    before = images(clean, 2)
    clean.fault(1, "throttle", rate="20mbit")
    proc = start_up(clean)
    try:
        wait_for(lambda: loading_on_target(clean), 60, "docker load never started on spark-2")
        clean.fault(2, "partition")
        cut = time.monotonic()
        code, stderr = finish(proc, STALL_S + 60)
        elapsed = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, stderr
    assert "no progress" in stderr and "spark-1" in stderr and "spark-2" in stderr, stderr
    assert f"no progress for {STALL_S:.0f} s" in stderr, stderr  # the configured bound, not the default
    assert STALL_S - 1 <= elapsed < STALL_S + 15, elapsed  # bytes in flight can land just after the cut
    assert leftovers(clean) == {}, "both ends must be ended although the nodes cannot reach each other"
    assert images(clean, 2) == before


def test_a_full_disk_on_the_target_names_the_target_and_the_cause(clean):
    before = images(clean, 2)
    clean.fault(2, "fill-disk", free="20m")
    code, stderr = finish(start_up(clean), 120)
    assert code == 1, stderr
    assert "spark-2" in stderr and "no space left on device" in stderr, stderr
    assert "docker save |" not in stderr and "| docker load" not in stderr and "| ssh" not in stderr
    assert leftovers(clean) == {}
    assert images(clean, 2) == before


# ---- the image_sync layer directly -----------------------------------------------------------------
def _copy_in_thread(conns: Cluster, mode: sync.TransferMode, **kw) -> tuple[threading.Thread, dict]:
    src, dst = conns.head, conns.peers[0]
    image_id = inspect_image(src, VLLM_REFERENCE_TAG).id
    expected = kw.pop("expected", None) or inspect_image(src, image_id)
    box: dict = {"progress": []}
    node2 = conns.inventory.node(dst.name)

    def run() -> None:
        try:
            box["moved"] = sync.copy_image(src, dst, image_id, expected, dst_host=node2.fabric_ip, dst_user=conns.inventory.ssh.user,
                                           mode=mode, progress=lambda done, total: box["progress"].append(done), **kw)
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            box["error"] = exc
        box["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_a_relayed_copy_is_cancelled_promptly_on_both_ends(clean, conns):
    before = images(clean, 2)
    clean.fault(1, "throttle", rate="20mbit")
    thread, box = _copy_in_thread(conns, sync.TransferMode.RELAY)
    wait_for(lambda: box["progress"] and box["progress"][-1] > 1_000_000, 60, "the relay never moved 1 MB")
    conns.cancel.set("test cancel")
    cancelled = time.monotonic()
    thread.join(10)
    assert isinstance(box.get("error"), Cancelled), box
    assert box["ended"] - cancelled < 2.5
    assert leftovers(clean) == {}
    assert images(clean, 2) == before


def test_a_hung_target_in_a_relay_fails_within_the_bound_naming_both_nodes(clean, conns):
    before = images(clean, 2)
    clean.fault(1, "throttle", rate="20mbit")
    thread, box = _copy_in_thread(conns, sync.TransferMode.RELAY, stall_timeout=3)
    wait_for(lambda: loading_on_target(clean), 30, "docker load never started on spark-2")
    pid = next(line.split()[0] for line in clean.exec(2, ["ps", "-eo", "pid=,args="]).stdout.splitlines()
               if line.split()[1:3] == ["docker", "load"])
    clean.exec(2, ["kill", "-STOP", pid])  # the target stops reading: its window fills
    stopped = time.monotonic()
    thread.join(30)
    error = box.get("error")
    assert isinstance(error, sync.TransferStalled), box
    assert "spark-1" in str(error) and "spark-2" in str(error) and "no progress for 3 s" in str(error)
    assert box["ended"] - stopped < 3 + 10
    assert leftovers(clean) == {}
    assert images(clean, 2) == before


def test_a_direct_copy_whose_link_drops_stops_within_the_bound(clean, conns):
    before = images(clean, 2)
    clean.fault(1, "throttle", rate="20mbit")
    thread, box = _copy_in_thread(conns, sync.TransferMode.DIRECT, stall_timeout=4)
    wait_for(lambda: box["progress"], 60, "spark-2 never reported a received byte")
    clean.fault(2, "partition")
    cut = time.monotonic()
    thread.join(40)
    error = box.get("error")
    assert isinstance(error, sync.TransferStalled), box
    assert error.side is sync.Side.LINK and error.node == "spark-1 → spark-2"
    assert box["ended"] - cut < 4 + 10
    assert leftovers(clean) == {}
    assert images(clean, 2) == before


def test_the_target_engine_dying_mid_copy_blames_the_target(clean, conns):
    clean.fault(1, "throttle", rate="20mbit")
    thread, box = _copy_in_thread(conns, sync.TransferMode.DIRECT)
    wait_for(lambda: box["progress"], 60, "spark-2 never reported a received byte")
    clean.fault(2, "stop-dockerd")
    thread.join(60)
    error = box.get("error")
    assert isinstance(error, sync.TransferFailed) and error.side is sync.Side.TARGET, box
    assert error.node == "spark-2" and "Docker engine" in str(error), str(error)
    assert "docker save |" not in str(error)
    assert leftovers(clean) == {}
    clean.fault(2, "start-dockerd")
    assert images(clean, 2) == [""], "nothing was loaded"


def test_a_loaded_image_that_fails_verification_is_removed_again(clean, conns):
    before = images(clean, 2)
    wrong = ImageIdentity("sha256:" + "0" * 64, ("sha256:" + "1" * 64,), (), ())
    thread, box = _copy_in_thread(conns, sync.TransferMode.DIRECT, expected=wrong)
    thread.join(120)
    assert isinstance(box.get("error"), NodeError) and "does not match" in str(box["error"]), box
    assert box["progress"] and box["progress"] == sorted(box["progress"]), "progress is reported, in order"
    assert images(clean, 2) == before, "the fully loaded but unverified image must be gone"


def test_a_successful_copy_reports_bytes_and_restore_undoes_a_replaced_reference(clean, conns):
    clean.exec(2, ["sh", "-c", f"tar -C /etc -cf - hostname | docker import - {VLLM_REFERENCE_TAG}"])
    impostor = json.loads(clean.exec(2, ["docker", "image", "inspect", VLLM_REFERENCE_TAG]).stdout)[0]["Id"]
    dst = conns.peers[0]
    before = snapshot(dst)
    thread, box = _copy_in_thread(conns, sync.TransferMode.DIRECT)
    thread.join(120)
    moved = box.get("moved")
    assert isinstance(moved, sync.Moved), box
    size = json.loads(clean.exec(1, ["docker", "image", "inspect", pinned_id(clean)]).stdout)[0]["Size"]
    assert moved.bytes >= size > 50_000_000 and box["progress"][-1] == moved.bytes  # the whole image
    sync.tag(dst, pinned_id(clean), VLLM_REFERENCE_TAG)  # what --sync does after the copy
    sync.restore(dst, before)  # the Runner's undo when a later step fails
    now = snapshot(dst)
    assert now.tags[VLLM_REFERENCE_TAG] == impostor and pinned_id(clean) not in now.ids


def test_a_cancel_after_the_whole_stream_arrived_still_leaves_no_image(clean, conns):
    """dockerd finishes a load whose stream it has, even with its `docker load` client killed (seen on the
    real engine): the image appears after the copy was cancelled, and the remover deletes it then."""
    before = images(clean, 2)
    image_id = pinned_id(clean)
    assert not layers.read_layers(conns.head).streams_from_store, "the login reads no store: docker save writes"
    total = int(clean.exec(1, ["sh", "-c", f"docker save {image_id} | wc -c"]).stdout)

    def cancel_at_the_end(done: int, _total: int) -> None:
        if done >= total:
            conns.cancel.set("cancelled at the last byte")

    src, dst = conns.head, conns.peers[0]
    with pytest.raises(Cancelled) as caught:
        sync.copy_image(src, dst, image_id, inspect_image(src, image_id), dst_host=conns.inventory.node(dst.name).fabric_ip,
                        dst_user=conns.inventory.ssh.user, mode=sync.TransferMode.DIRECT, progress=cancel_at_the_end)
    assert any("remover" in note for note in getattr(caught.value, "__notes__", [])), caught.value
    wait_for(lambda: images(clean, 2) == before and not any("sdlate" in line for line in
                                                           clean.exec(2, ["ps", "-eo", "args="]).stdout.splitlines()),
             30, "the late image was not removed, or the remover did not end")
    assert leftovers(clean) == {}


def test_a_remover_under_the_docker_group_login_ends_once_the_engine_is_idle(clean, conns):
    """The `spark` login cannot read the engine's staging directory: the remover a cancelled copy leaves ends
    when dockerd and containerd have spent next to no CPU or I/O for a few seconds (no load in progress), not
    after LATE_REMOVER_BOUND, also when the image never appears."""
    dst = conns.peers[0]
    assert not dst.run(["test", "-r", "/var/lib/docker/tmp"]).ok, "the login must not read the staging dir"
    dst.run_script(sync.LATE_REMOVER, "sha256:" + "0" * 64, "600", timeout=15, check=True)
    assert [line for line in clean.exec(2, ["ps", "-eo", "args="]).stdout.splitlines() if "sdlate" in line]
    wait_for(lambda: not any("sdlate" in line for line in clean.exec(2, ["ps", "-eo", "args="]).stdout.splitlines()),
             30, "the remover still polls 30 s later with the engine idle")


def test_a_new_copy_ends_the_remover_a_cancelled_one_left(clean, conns):
    """A remover left by a cancelled copy waits for the image to appear while the engine is busy (at least
    LATE_REMOVER_IDLE s). A later copy of the same image is wanted: it ends that remover first, so the image
    it loads stays."""
    image_id = pinned_id(clean)
    src, dst = conns.head, conns.peers[0]
    dst.run_script(sync.LATE_REMOVER, image_id, "600", timeout=15, check=True)  # as _undo leaves it

    def removers() -> list[str]:
        return [line for line in clean.exec(2, ["ps", "-eo", "args="]).stdout.splitlines() if "sdlate" in line]

    assert removers(), "the remover did not start"
    moved = sync.copy_image(src, dst, image_id, inspect_image(src, image_id),
                            dst_host=conns.inventory.node(dst.name).fabric_ip, dst_user=conns.inventory.ssh.user,
                            mode=sync.TransferMode.DIRECT)
    assert moved.identity.id == image_id and removers() == []  # ended: nothing is left to delete it
    assert image_id in snapshot(dst).ids
