"""Issue 7, acceptance 2: checks/basics.parse_listeners on `ss -Hltnp` output captured for real.

HOST was captured on this machine with listeners bound to 0.0.0.0, 127.0.0.1, [::] (v6only), the dual-stack
wildcard (ss prints `*`) and [::1]; NODE on a simulated node while the stand-in served (the inner
engine's DNS, sshd on both families). The first line of each has no users:(...) column (a socket of
another user, which ss -p cannot attribute), and the trailing padding ss prints is kept.
"""

from __future__ import annotations

import pytest

from orchestrator.checks.basics import Listener, parse_listeners

HOST = (
    "LISTEN 0      128      0.0.0.0:2024  0.0.0.0:*                                   \n"
    'LISTEN 0      128      0.0.0.0:18000 0.0.0.0:* users:(("python3",pid=21161,fd=3))\n'
    'LISTEN 0      128    127.0.0.1:18003 0.0.0.0:* users:(("python3",pid=21161,fd=6))\n'
    'LISTEN 0      128            *:18002       *:* users:(("python3",pid=21161,fd=5))\n'
    'LISTEN 0      128         [::]:18001    [::]:* users:(("python3",pid=21161,fd=4))\n'
    'LISTEN 0      128        [::1]:18004    [::]:* users:(("python3",pid=21161,fd=7))\n'
)

NODE = (
    'LISTEN 0      5         0.0.0.0:8000  0.0.0.0:* users:(("python3",pid=466,fd=3))\n'
    "LISTEN 0      4096   127.0.0.11:41795 0.0.0.0:*                                 \n"
    'LISTEN 0      128       0.0.0.0:22    0.0.0.0:* users:(("sshd",pid=16,fd=3))    \n'
    'LISTEN 0      128          [::]:22       [::]:* users:(("sshd",pid=16,fd=4))    \n'
)


def test_every_family_and_wildcard_form_on_this_host():
    found = parse_listeners(HOST)
    assert [(item.port, item.local) for item in found] == [
        (2024, "0.0.0.0:2024"), (18000, "0.0.0.0:18000"), (18003, "127.0.0.1:18003"), (18002, "*:18002"),
        (18001, "[::]:18001"), (18004, "[::1]:18004")]
    assert found[0].process == ""
    assert found[1].process == 'users:(("python3",pid=21161,fd=3))'


def test_a_simulated_node_serving_the_stand_in():
    found = parse_listeners(NODE)
    assert found[0] == Listener(8000, "0.0.0.0:8000", 'users:(("python3",pid=466,fd=3))')
    assert [item.port for item in found] == [8000, 41795, 22, 22]
    assert [item.process for item in found if item.port == 22] == ['users:(("sshd",pid=16,fd=3))',
                                                                    'users:(("sshd",pid=16,fd=4))']


@pytest.mark.parametrize("text", ["", "\n\n", "   \n"])
def test_nothing_listening(text):
    assert parse_listeners(text) == []


def test_without_dash_p_the_process_is_empty():
    lines = "LISTEN 0 128 [::]:8000 [::]:*\nLISTEN 0 128 *:29701 *:*\n"
    assert parse_listeners(lines) == [Listener(8000, "[::]:8000", ""), Listener(29701, "*:29701", "")]


@pytest.mark.parametrize("line", [
    "LISTEN 0 128",  # truncated
    "State Recv-Q Send-Q Local Address:Port Peer Address:Port",  # a header (ss without -H)
    "LISTEN 0 128 [::]:* [::]:*",  # no port
])
def test_lines_that_are_not_a_listener_are_skipped(line):
    assert parse_listeners(line + "\n" + NODE)[0].port == 8000
    assert len(parse_listeners(line)) == 0


def test_a_scoped_ipv6_address():
    found = parse_listeners('LISTEN 0 128 [fe80::1%enp1s0f0np0]:8000 [::]:* users:(("vllm",pid=7,fd=9))\n')
    assert found == [Listener(8000, "[fe80::1%enp1s0f0np0]:8000", 'users:(("vllm",pid=7,fd=9))')]


# `ss -Hltnpe` in a sim node, captured as the login user `spark` (root's http.server on 8000: no process shown,
# no uid: ss leaves uid out for root) and as root (the process shown)
AS_SPARK = ("LISTEN 0      5      0.0.0.0:8000 0.0.0.0:* ino:2527889 sk:1c3 cgroup:/docker/0d45642271e9 <->\n"
            "LISTEN 0      5      0.0.0.0:8001 0.0.0.0:* users:((\"python3\",pid=301,fd=3)) uid:1000 ino:2527990 "
            "sk:1c4 cgroup:/docker/0d45642271e9 <->\n")
AS_ROOT = ('LISTEN 0      5      0.0.0.0:8000 0.0.0.0:* users:(("python3",pid=288,fd=3)) ino:2527889 sk:1c3 '
           "cgroup:/docker/0d45642271e9 <->\n")


def test_a_port_held_by_another_users_process_names_its_owner():
    root_held, own = parse_listeners(AS_SPARK)
    assert (root_held.port, root_held.process, root_held.uid) == (8000, "", 0)
    assert root_held.holder().startswith("a process of root (ss shows other users' processes only to root")
    assert "sudo ss -ltnp 'sport = :8000'" in root_held.holder()
    assert (own.process, own.uid) == ('users:(("python3",pid=301,fd=3))', 1000) and own.holder() == own.process
    (seen,) = parse_listeners(AS_ROOT)
    assert seen.holder() == 'users:(("python3",pid=288,fd=3))' and seen.uid == 0
