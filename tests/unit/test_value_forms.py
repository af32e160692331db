"""Value forms the engines accept (issue 22): max_model_len as vLLM 0.33 reads it and shm_size as Docker
does. Each rendered value is compared with what the real parser makes of the form the user wrote: the
stand-in's copy of vLLM's argparse, and go-units' RAMInBytes as export/quantity.py implements it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.config.recipe import DockerOptions, VllmArgs
from orchestrator.export.quantity import docker_size_bytes
from orchestrator.render.templates import render_tokens
from orchestrator.sim.standin.cli import parse_cli


def rendered_max_model_len(written) -> int | None:
    vllm = VllmArgs(max_model_len=written)
    tokens = render_tokens("vllm-args.j2", model=type("M", (), {"repo": "m", "revision": "main"}),
                           serve=type("S", (), {"host": "0.0.0.0", "port": 8000})(), vllm=vllm,
                           served_name=None, speculative_json=None, extra=[], nnodes=1, rank=0,
                           master_addr="127.0.0.1")
    return parse_cli(["serve", "m", *tokens[tokens.index("--max-model-len"):][:2]]).max_model_len \
        if "--max-model-len" in tokens else None


@pytest.mark.parametrize("written", ["128k", "128K", "1M", "25.6k", "32768", 4096])
def test_max_model_len_renders_what_vllm_makes_of_the_written_form(written):
    expected = parse_cli(["serve", "m", "--max-model-len", str(written)]).max_model_len
    assert rendered_max_model_len(written) == expected


@pytest.mark.parametrize("written", ["auto", "-1"])
def test_max_model_len_auto_is_refused_with_the_reason(written):
    """vLLM's auto fits the length to memory; model-fit cannot judge that, and no flag is not the same."""
    with pytest.raises(ValidationError, match="delete the key for the model's own limit"):
        VllmArgs(max_model_len=written)


@pytest.mark.parametrize("written, says", [("32.5K", "Did you mean to use 32.5k"), ("lots", "32K = 32768")])
def test_max_model_len_refusals_name_the_forms(written, says):
    with pytest.raises(ValidationError, match=says):
        VllmArgs(max_model_len=written)


@pytest.mark.parametrize("written, size", [("16g", 16 << 30), ("16GB", 16 << 30), ("16GiB", 16 << 30),
                                           ("512m", 512 << 20), ("1073741824", 1 << 30), ("1.5g", 3 << 29)])
def test_shm_size_takes_dockers_forms(written, size):
    assert DockerOptions(shm_size=written).shm_size == written  # passed to docker as written
    assert docker_size_bytes(written) == size


@pytest.mark.parametrize("written", ["16x", "16 g", "-1g", "16gi"])
def test_shm_size_refuses_what_the_export_cannot_read(written):
    with pytest.raises(ValidationError):
        DockerOptions(shm_size=written)


def parsed_extra(extra: dict):
    """Render `vllm.extra` as the tool does and parse it with the stand-in's copy of vLLM's parser."""
    from orchestrator.config.recipe import Recipe
    from orchestrator.config.vllm_flags import extra_problems
    from orchestrator.render.spec import _extra_args

    recipe = Recipe.model_validate({"name": "r", "image": {"ref": "img"}, "model": {"repo": "o/m"},
                                    "vllm": {"extra": extra}})
    assert extra_problems(dict(recipe.vllm.extra)) == []
    argv = ["serve", "m"]
    for name, value in _extra_args(recipe):
        argv += [f"--{name}"] if value is True else [f"--{name}", value]
    return parse_cli(argv)


def test_a_mapping_renders_as_the_json_vllm_parses():
    wanted = {"mode": 3, "cudagraph_capture_sizes": [1, 2, 4], "pass_config": {"fuse_norm_quant": True}}
    assert parsed_extra({"compilation-config": wanted}).compilation_config == wanted
    assert parsed_extra({"default-chat-template-kwargs": {"enable_thinking": False}}) \
        .default_chat_template_kwargs == {"enable_thinking": False}


def test_dotted_keys_are_folded_as_vllm_folds_them():
    args = parsed_extra({"compilation-config.mode": 3, "default-chat-template-kwargs.enable_thinking": False})
    assert args.compilation_config == {"mode": 3}
    assert args.default_chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize("extra, says", [
    ({"block-size": {"x": 1}}, "not a mapping"), ({"block-size.x": 1}, "dotted keys"),
    ({"tensor-parallel-size.x": 1}, "set by vllm.tensor_parallel_size"),
])
def test_mappings_and_dotted_keys_only_for_json_options(extra, says):
    from orchestrator.config.recipe import Recipe
    from orchestrator.config.vllm_flags import extra_problems

    try:
        recipe = Recipe.model_validate({"name": "r", "image": {"ref": "img"}, "model": {"repo": "o/m"},
                                        "vllm": {"extra": extra}})
    except ValidationError as exc:
        assert says in str(exc)
        return
    assert says in " ".join(m for _, m in extra_problems(dict(recipe.vllm.extra)))


def test_the_parser_is_as_strict_as_vllm_about_config_keys():
    """vLLM's config classes forbid unknown fields (pydantic extra=forbid): so does the stand-in's parser, and
    so does the offline check, with the key meant (issue 22; vLLM 0.33's own words: an
    `Unexpected keyword argument [type=unexpected_keyword_argument]`)."""
    with pytest.raises(SystemExit):
        parse_cli(["serve", "m", "--compilation-config", '{"bogus": 1}'])
    assert parse_cli(["serve", "m", "--compilation-config", '{"mode": 3}']).compilation_config == {"mode": 3}
    from orchestrator.config.vllm_flags import flag_problem

    assert flag_problem("compilation-config", {"mdoe": 3}).endswith("; fix: did you mean 'mode'?")
    assert flag_problem("compilation-config.mdoe", 3).endswith("; fix: did you mean 'mode'?")
    assert "Unexpected keyword argument" in flag_problem("compilation-config", '{"bogus": 1}')
    assert flag_problem("compilation-config", {"mode": 3, "cudagraph_capture_sizes": [1, 2]}) is None
