"""Image-copy decisions without a cluster: who is blamed for a failed copy, and what `restore` undoes on a
node faked at the Docker level (its images and tags are state; results are inspected, not command strings)."""

from __future__ import annotations

import pytest

from orchestrator.docker_cli import images
from orchestrator.docker_cli.image_pipe import DirectCopy, Side, TransferFailed
from orchestrator.transport.cancel import Cancelled, CancelToken
from orchestrator.transport.node import Result

A, B, C = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64


class FakeDockerNode:
    """Holds images and tags; answers `docker image ls`, `docker tag`, `docker image rm` like dockerd would."""

    def __init__(self, name: str, ids: set[str], tags: dict[str, str]):
        self.name, self.ids, self.tags = name, set(ids), dict(tags)
        self.cancel = CancelToken()

    def run(self, argv, **_kw) -> Result:
        argv = list(argv)
        assert argv[0] == "docker"
        if argv[1:3] == ["image", "ls"]:
            lines = []
            for image_id in sorted(self.ids):
                refs = [r for r, i in self.tags.items() if i == image_id] or ["<none>:<none>"]
                lines += [f"{image_id} {ref}" for ref in refs]
            return Result(self.name, tuple(argv), 0, "\n".join(lines) + "\n", "")
        if argv[1] == "tag":
            assert argv[2] in self.ids
            self.tags[argv[3]] = argv[2]
            return Result(self.name, tuple(argv), 0, "", "")
        if argv[1:3] == ["image", "rm"]:
            target = argv[-1]
            if target in self.ids:
                assert "--force" in argv or not any(i == target for i in self.tags.values())
                self.ids.discard(target)
                self.tags = {r: i for r, i in self.tags.items() if i != target}
            else:
                image_id = self.tags.pop(target)
                if image_id not in self.tags.values():
                    self.ids.discard(image_id)  # the last tag: the image goes too (as docker rmi does)
            return Result(self.name, tuple(argv), 0, "", "")
        raise AssertionError(f"unexpected docker call {argv}")


def test_restore_removes_what_a_copy_added_and_nothing_that_was_there():
    node = FakeDockerNode("spark-2", {A, B}, {"keep:1": A})
    before = images.snapshot(node)
    node.ids.add(C)  # the copy loaded C and tagged it
    node.tags["vllm:latest"] = C
    node.tags["extra:1"] = A  # and put a new tag on an old image that keeps another tag
    images.restore(node, before)
    assert node.ids == {A, B}
    assert node.tags == {"keep:1": A}


def test_restore_points_a_moved_tag_back_and_keeps_the_old_image():
    node = FakeDockerNode("spark-2", {A}, {"vllm:latest": A})  # an impostor under the reference (--sync)
    before = images.snapshot(node)
    node.ids.add(C)
    node.tags["vllm:latest"] = C
    changed = images.restore(node, before)
    assert node.ids == {A} and node.tags == {"vllm:latest": A}
    assert any("points to" in c for c in changed) and any("removed image" in c for c in changed)


def test_restore_never_deletes_an_old_untagged_image_to_drop_a_new_tag():
    node = FakeDockerNode("spark-2", {B}, {})
    before = images.snapshot(node)
    node.tags["new:1"] = B
    images.restore(node, before)
    assert node.ids == {B}


class _Conn:
    def __init__(self, name: str):
        self.name, self.cancel = name, CancelToken()


def _judged(status, save_err=(), load_err=(), ssh_err=(), cancel=False, kept=0, filter_err=()):
    """status: (docker save, ssh) exit codes; kept: the layer filter's (0 when none ran)."""
    src, dst = _Conn("spark-1"), _Conn("spark-2")
    copy = DirectCopy(src, dst, "spark-2", 100, None, 30)
    copy.status, copy.save_err, copy.load_err, copy.ssh_err = (*status, kept), list(save_err), list(load_err), list(ssh_err)
    copy.filter_err = list(filter_err)
    if cancel:
        src.cancel.set("interrupted (Ctrl-C)")
    copy.watch.moved = 100
    return copy._judge(A, 0 if status == (0, 0) else 1)


def test_a_full_disk_on_the_target_is_the_target_even_though_docker_save_then_fails():
    with pytest.raises(TransferFailed) as caught:
        _judged((1, 1), save_err=["write /dev/stdout: broken pipe"],
                load_err=["Error processing tar file(exit status 1): write /x/layer.tar: no space left on device"])
    assert caught.value.side is Side.TARGET and caught.value.node == "spark-2"
    assert "no space left on device" in str(caught.value) and "spark-1" in str(caught.value)
    assert "docker save |" not in str(caught.value) and "| ssh" not in str(caught.value)


def test_a_source_that_fails_first_is_the_source_not_the_truncated_load():
    with pytest.raises(TransferFailed) as caught:
        _judged((1, 1), save_err=["Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
                                  "daemon running?"], load_err=["Error processing tar file: unexpected EOF"])
    assert caught.value.side is Side.SOURCE and caught.value.node == "spark-1"
    assert "Docker engine is not running" in str(caught.value)


def test_ssh_failing_between_the_nodes_names_both():
    with pytest.raises(TransferFailed) as caught:
        _judged((141, 255), ssh_err=["ssh: connect to host 10.0.0.2 port 22: Connection refused"])
    assert caught.value.side is Side.LINK and caught.value.node == "spark-1 → spark-2"
    assert "Connection refused" in str(caught.value)


def test_success_returns_the_bytes_and_a_cancel_is_not_a_failure():
    assert _judged((0, 0)) == 100
    with pytest.raises(Cancelled):
        _judged((141, 1), load_err=["unexpected EOF"], cancel=True)
