"""Issue 7, acceptance 2: deploy/expectations.evaluate on vLLM's log lines (shape: vLLM 0.33's own log lines).

The sim recipe expects `Using '...' Mxfp4 MoE backend` containing B12X on every node, and the
`Profiling CUDA graph memory: ...` line identical on every node.
"""

from __future__ import annotations

import pytest

from fakes import deployment
from orchestrator.deploy.expectations import evaluate, transport

PREFIX = "(EngineCore pid=312) INFO 11-29 14:03:{:02d} [{}] "
B12X = PREFIX.format(11, "mxfp4.py:402") + "Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend."
DEEPGEMM = PREFIX.format(11, "mxfp4.py:402") + "Using 'DEEPGEMM_MXFP4' Mxfp4 MoE backend."
GRAPHS = PREFIX.format(40, "gpu_model_runner.py:6304") + \
    "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
OTHER_GRAPHS = PREFIX.format(41, "gpu_model_runner.py:6304") + \
    "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=19 (largest=128)"
NOISE = [PREFIX.format(1, "api_server.py:1") + "vLLM API server version 0.33.0",
         PREFIX.format(2, "loader.py:9") + "Loading safetensors checkpoint shards: 100% Completed | 2/2"]


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    return deployment(tmp_path_factory.mktemp("expect")).recipe


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return deployment(tmp_path_factory.mktemp("eager"),
                      recipe=lambda r: r["vllm"].update(enforce_eager=True)).recipe


def by_name(results) -> dict:
    return {r.name: r for r in results}


@pytest.mark.parametrize("final", [False, True])
def test_every_setting_took_effect_and_the_ranks_agree(recipe, final):
    logs = {"spark-1": NOISE + [B12X, GRAPHS], "spark-2": [GRAPHS, B12X] + NOISE}
    results = by_name(evaluate(recipe, logs, final))
    assert {n: r.status for n, r in results.items()} == {"moe-backend": "ok", "cuda-graph-profile": "ok"}
    assert all(r.ok for r in results.values())
    assert results["moe-backend"].per_node == {n: "Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend" for n in logs}
    assert results["cuda-graph-profile"].per_node == {
        n: "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" for n in logs}


@pytest.mark.parametrize("final", [False, True])
def test_a_wrong_value_fails_at_once_naming_the_node(recipe, final):
    """`auto` picking DEEPGEMM on one node (field note 6) is a failure, not something to wait for."""
    results = by_name(evaluate(recipe, {"spark-1": [B12X, GRAPHS], "spark-2": [DEEPGEMM, GRAPHS]}, final))
    moe = results["moe-backend"]
    assert moe.status == "failed" and not moe.ok
    assert "spark-2" in moe.detail and "DEEPGEMM_MXFP4" in moe.detail and "spark-1" not in moe.detail
    assert "'B12X'" in moe.detail


def test_a_missing_line_is_waiting_then_failed(recipe):
    logs = {"spark-1": [B12X, GRAPHS], "spark-2": NOISE}
    waiting = by_name(evaluate(recipe, logs, final=False))
    assert waiting["moe-backend"].status == "waiting" and not waiting["moe-backend"].ok
    assert waiting["cuda-graph-profile"].status == "waiting"
    final = by_name(evaluate(recipe, logs, final=True))
    assert final["moe-backend"].status == "failed" and final["moe-backend"].detail.endswith("on spark-2")
    assert final["moe-backend"].per_node == {"spark-1": "Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend",
                                             "spark-2": None}
    assert final["cuda-graph-profile"].status == "failed" and "spark-2" in final["cuda-graph-profile"].detail


@pytest.mark.parametrize("final", [False, True])
def test_ranks_that_disagree_fail_showing_both_values(recipe, final):
    results = by_name(evaluate(recipe, {"spark-1": [B12X, GRAPHS], "spark-2": [B12X, OTHER_GRAPHS]}, final))
    graphs = results["cuda-graph-profile"]
    assert graphs.status == "failed"
    assert "FULL=35 (largest=256)" in graphs.detail and "FULL=19 (largest=128)" in graphs.detail
    assert "disagree" in graphs.detail


def test_enforce_eager_makes_the_graph_check_not_applicable(eager):
    results = by_name(evaluate(eager, {"spark-1": [B12X], "spark-2": [B12X]}, final=True))
    graphs = results["cuda-graph-profile"]
    assert graphs.status == "not applicable" and graphs.ok
    assert "--enforce-eager" in graphs.detail
    assert results["moe-backend"].status == "ok"


def test_without_enforce_eager_no_graph_line_is_a_failure(recipe):
    results = by_name(evaluate(recipe, {"spark-1": [B12X], "spark-2": [B12X]}, final=True))
    assert results["cuda-graph-profile"].status == "failed"


def test_a_line_expected_on_some_nodes_only(tmp_path):
    recipe = deployment(tmp_path, recipe=lambda r: r["expect"]["lines"][0].update(nodes=["spark-2"])).recipe
    results = by_name(evaluate(recipe, {"spark-1": [DEEPGEMM, GRAPHS], "spark-2": [B12X, GRAPHS]}, final=True))
    assert results["moe-backend"].status == "ok"
    assert list(results["moe-backend"].per_node) == ["spark-2"]



# ---- nccl-transport: profile roce promises NCCL's IB transport (issue 18, field note 12) ----------------

IB_LINE = "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:172.30.34.11<0>"
SOCKET_LINE = "NCCL INFO NET/Socket : Using [0]enp1s0f0np0:172.30.34.12<0>"
INFO = {"spark-1": "INFO", "spark-2": "INFO"}


def test_transport_is_not_judged_on_profile_tcp():
    assert transport("tcp", INFO, {"spark-1": [SOCKET_LINE]}) is None


def test_transport_ib_everywhere_is_ok_and_a_socket_fallback_fails_naming_the_node():
    ok = transport("roce", INFO, {"spark-1": ["x", IB_LINE], "spark-2": [IB_LINE]})
    assert ok.status == "ok" and ok.per_node == {"spark-1": "NET/IB [0]rocep1s0f0:1/RoCE", "spark-2": "NET/IB [0]rocep1s0f0:1/RoCE"}
    bad = transport("roce", INFO, {"spark-1": [IB_LINE], "spark-2": ["NCCL INFO NET/IB : No device found.", SOCKET_LINE]})
    assert bad.status == "failed" and "fell back to sockets on spark-2 (spark-2: NET/Socket [0]enp1s0f0np0:" in bad.detail
    assert "spark-1" not in bad.detail.split("(")[0]


def test_transport_without_its_line_cannot_judge_and_says_so():
    """No line is no evidence of a fallback (a container kept from before NCCL_DEBUG was rendered prints
    none): the check says it could not look, rather than failing a release that may be fine."""
    logs = {"spark-1": [IB_LINE], "spark-2": ["loading"]}
    got = transport("roce", INFO, logs)
    assert got.status == "not applicable" and got.ok
    assert got.detail.startswith("no NCCL transport line (NET/IB or NET/Socket) on spark-2: could not check")
    quiet = transport("roce", {"spark-1": "INFO", "spark-2": "WARN"}, logs)
    assert quiet.status == "not applicable" and quiet.ok and "NCCL_DEBUG is not INFO on spark-2" in quiet.detail
