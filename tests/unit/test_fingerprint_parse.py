"""Issue 36: what the engine resolved, per rank (facts/fingerprint.py): the parser on vLLM-shaped lines,
the ranks judged against each other, the head's `non-default args` against the rendered argv, and the
pre-deploy key `bench --compare` refuses identical A and B by."""
from __future__ import annotations

from orchestrator.facts import fingerprint as fp

HEAD_ARGS = ["--served-model-name", "tiny", "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "2",
             "--kv-cache-dtype", "fp8", "--max-model-len", "4096", "--gpu-memory-utilization", "0.8",
             "--enable-prefix-caching", "--moe-backend", "flashinfer_b12x",
             "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
             "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0"]
SEEN = ("{'model_tag': 'sim/tiny', 'served_model_name': ['tiny'], 'host': '0.0.0.0', 'tensor_parallel_size': 2, "
        "'kv_cache_dtype': 'fp8', 'max_model_len': 4096, 'gpu_memory_utilization': 0.8, "
        "'enable_prefix_caching': True, 'moe_backend': 'flashinfer_b12x', "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}, "
        "'distributed_executor_backend': 'mp', 'nnodes': 2, 'api_server_count': 1}")
P = "(Worker_TP{r} pid=4{r}) INFO 12-07 11:00:0{r} [{f}] "


def rank_lines(rank: int, attention: str = "FLASH_ATTN", graphs: str = "PIECEWISE=51 (largest=512), FULL=35 "
                                                                        "(largest=256)") -> list[str]:
    lines = [P.format(r=rank, f="cuda.py:509") + f"Using {attention} attention backend out of potential backends: "
                                                 f"['{attention}', 'TRITON_ATTN'].",
             P.format(r=rank, f="mxfp4.py:312") + "Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend.",
             P.format(r=rank, f="gpu_model_runner.py:6304") + f"Profiling CUDA graph memory: {graphs}"]
    if rank == 0:
        lines = [f"(APIServer pid=1) INFO 12-07 11:00:00 [launcher.py:368] non-default args: {SEEN}",
                 "(EngineCore_DP0 pid=2) INFO 12-07 11:00:00 [core.py:140] Initializing a V1 LLM engine (v0.33.0) "
                 "with config: model='sim/tiny', speculative_config=SpeculativeConfig(method='mtp', model='sim/tiny', "
                 "num_spec_tokens=3), tokenizer='sim/tiny', dtype=torch.bfloat16, kv_cache_dtype=fp8, seed=0",
                 *lines]
    return lines


def test_each_rank_parsed_into_what_it_resolved():
    got = fp.fingerprint({"spark-1": rank_lines(0), "spark-2": rank_lines(1)}, {"spark-2": 1, "spark-1": 0})
    head, peer = got.ranks
    assert (head.rank, head.node, peer.rank, peer.node) == (0, "spark-1", 1, "spark-2")
    assert (head.attention_backend, head.moe_backend, head.cudagraph_modes) == ("FLASH_ATTN", "B12X_MXFP4_MXFP8",
                                                                               "FULL+PIECEWISE")
    assert head.kv_cache_dtype == "fp8" and head.speculative.startswith("SpeculativeConfig(method='mtp'")
    assert head.non_default["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert peer.non_default is None and peer.kv_cache_dtype is None  # a headless rank logs neither
    assert peer.attention_backend == "FLASH_ATTN" and fp.disagreements(got) == []
    assert len(got.digest) == 12 and got.as_dict()["digest"] == got.digest


def test_a_chosen_backend_and_a_changed_block_size_are_read():
    lines = ["INFO [cuda.py:448] Using AttentionBackendEnum.FLASHINFER backend.",
             "INFO [interface.py:925] Setting attention block size to 256 tokens so the quantized primary KV page "
             "covers the higher-precision padded-spec page."]
    got = fp.rank_engine(1, "n", lines)
    assert (got.attention_backend, got.block_size) == ("FLASHINFER", 256)


def test_ranks_that_disagree_are_named_with_the_key_and_both_values():
    got = fp.fingerprint({"spark-1": rank_lines(0), "spark-2": rank_lines(1, attention="TRITON_ATTN")},
                         {"spark-1": 0, "spark-2": 1})
    [why] = fp.disagreements(got)
    assert why.startswith("attention_backend: the ranks disagree")
    assert "expected 'FLASH_ATTN' (rank 0, spark-1)" in why and "rank 1 (spark-2) resolved 'TRITON_ATTN'" in why


def test_a_line_missing_on_one_rank_is_a_disagreement_and_the_digest_moves():
    same = fp.fingerprint({"a": rank_lines(0), "b": rank_lines(1)}, {"a": 0, "b": 1})
    other = fp.fingerprint({"a": rank_lines(0), "b": rank_lines(1, graphs="PIECEWISE=51 (largest=512)")},
                           {"a": 0, "b": 1})
    assert fp.disagreements(other) == ["cudagraph_modes: the ranks disagree: expected 'FULL+PIECEWISE' (rank 0, a), "
                                       "seen rank 1 (b) resolved 'PIECEWISE'"]
    assert other.digest != same.digest
    renamed = fp.fingerprint({"x": rank_lines(0), "y": rank_lines(1)}, {"x": 0, "y": 1})
    assert renamed.digest == same.digest  # node names are not the engine's configuration


def test_the_rendered_argv_as_the_engine_reports_it():
    expected = fp.expected_args("sim/tiny", HEAD_ARGS)
    assert expected["model_tag"] == "sim/tiny" and expected["served_model_name"] == ["tiny"]
    assert expected["tensor_parallel_size"] == 2 and expected["gpu_memory_utilization"] == 0.8
    assert expected["enable_prefix_caching"] is True
    assert "port" not in expected and "node_rank" not in expected  # equal to their defaults: not logged
    assert fp.expected_args("m", ["--no-enable-prefix-caching"])["enable_prefix_caching"] is False
    assert fp.args_differences(expected, fp.parse_args_dict(SEEN)) == []  # api_server_count: the engine's own


def test_a_rendered_flag_the_engine_did_not_take_names_key_expected_and_seen():
    expected = fp.expected_args("sim/tiny", [*HEAD_ARGS, "--max-num-seqs", "8"])
    seen = fp.parse_args_dict(SEEN.replace("'max_model_len': 4096", "'max_model_len': 2048"))
    assert fp.args_differences(expected, seen) == [
        "max_model_len: expected 4096 (rendered), seen 2048",
        "max_num_seqs: expected 8 (rendered), seen (not among the engine's non-default args)"]
    assert fp.args_differences(expected, None)[0].startswith("non-default args: expected")


def test_a_value_that_is_no_literal_is_kept_as_its_text():
    got = fp.parse_args_dict("{'model_tag': 'm', 'compilation_config': CompilationConfig(mode=3), 'port': 9}")
    assert got == {"model_tag": "m", "compilation_config": "CompilationConfig(mode=3)", "port": 9}
    assert fp.parse_args_dict("not a dict") is None


def test_the_short_form_for_status_and_history():
    record = fp.fingerprint({"a": rank_lines(0)}, {"a": 0}).as_dict()
    assert fp.short(record) == (f"{record['digest']} attn FLASH_ATTN, moe B12X_MXFP4_MXFP8, graphs FULL+PIECEWISE, "
                                "kv fp8")
    assert fp.short(None) == "-"


def test_the_predicted_key_ignores_env_the_engine_does_not_read():
    def key(env, args=HEAD_ARGS, image="sha256:1", mounts=()):
        return fp.predicted_key(image, [("sim/tiny", args, env, list(mounts))])

    base = key([("NCCL_IB_HCA", "mlx5_0")])
    assert key([("NCCL_IB_HCA", "mlx5_0"), ("EXPERIMENT_NOTE", "b")]) == base  # read by nothing in the engine
    assert key([("NCCL_IB_HCA", "mlx5_1")]) != base  # NCCL reads it
    assert key([("NCCL_IB_HCA", "mlx5_0"), ("VLLM_USE_FLASHINFER_MOE_MXFP4", "1")]) != base
    assert key([("NCCL_IB_HCA", "mlx5_0")], args=[*HEAD_ARGS, "--max-num-seqs", "8"]) != base
    assert key([("NCCL_IB_HCA", "mlx5_0")], args=[*HEAD_ARGS, "--port", "8000"]) == base  # a default: not logged
    assert key([("NCCL_IB_HCA", "mlx5_0")], image="sha256:2") != base
    assert key([("NCCL_IB_HCA", "mlx5_0")], mounts=["/o:/opt/overlay:ro"]) != base


def test_deviating_names_the_ranks_that_differ_from_rank_0():
    got = fp.fingerprint({"a": rank_lines(0), "b": rank_lines(1, attention="TRITON_ATTN"), "c": rank_lines(2)},
                         {"a": 0, "b": 1, "c": 2})
    assert fp.deviating(got) == ["b"]


# ---- bench --compare's rule, on the sim recipe's plans ------------------------------------------------
def _named(name: str, **env):
    def edit(recipe: dict) -> None:
        recipe["name"] = name
        recipe["env"].update(env)
    return edit


def test_compare_refuses_recipes_that_differ_only_in_env_the_engine_ignores(tmp_path):
    from fakes import deployment

    from orchestrator.bench.same_engine import same_engine

    a = deployment(tmp_path, _named("a"))
    same = same_engine(a, deployment(tmp_path, _named("b", EXPERIMENT="b")))
    assert same is not None and same.ignored == ["EXPERIMENT"] and len(same.key) == 12
    assert f"A and B run the same engine configuration (fingerprint {same.key})" in same.message()
    assert "EXPERIMENT" in same.message() and "--same-engine-ok" in same.message()
    assert same_engine(a, deployment(tmp_path, _named("c", SIM_DECODE_TPS="80"))) is None  # the engine reads it

    def more_seqs(recipe: dict) -> None:
        recipe["name"] = "d"
        recipe["vllm"]["extra"]["max-num-seqs"] = 16
    assert same_engine(a, deployment(tmp_path, more_seqs)) is None
