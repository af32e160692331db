"""Issue 36: the recipe is exactly as strict as vLLM's option table about every option with a closed set
of values (argparse's choices, or the values a list metavar names, which vLLM's config class enforces):
what the table accepts the recipe accepts, what it refuses the recipe refuses, for the typed fields
(vllm.kv_cache_dtype, ...) and through `vllm.extra` for the rest.

The oracle is not the recipe's code: it is the parser the stand-in image runs, built by argparse from the
shipped table (orchestrator/sim/standin/cli.py), plus the listed values' membership.
"""

from __future__ import annotations

import contextlib
import copy
import io

import pytest
from fakes import sim_recipe
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.config.recipe import OWNED_FLAGS, Recipe, recipe_problems
from orchestrator.config.vllm_flags import extra_problems
from orchestrator.sim.standin.cli import build_parser
from orchestrator.vllm_table import options_table

PARSER = build_parser()
ROWS = [row for row in options_table.OPTIONS if row[6] or isinstance(row[9], tuple)]
TYPED = {flag: owner.split(".")[1] for flag, owner in OWNED_FLAGS.items() if owner.startswith("vllm.")}
BASE = sim_recipe()
BASE["image"]["id"] = None  # the shipped table: no cached image parser can answer for it


def _flag(row) -> str:
    return next(s for s in row[0] if s.startswith("--"))[2:]


def table_accepts(row, raw: str) -> bool:
    """vLLM's verdict as the table gives it: argparse (with the real type function and choices) takes
    `--flag=raw`, and a listed metavar names the parsed value."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            args = PARSER.parse_args(["serve", f"--{_flag(row)}={raw}"])
        except SystemExit:
            return False
    value = getattr(args, row[2])
    if value == [] and "--" in raw:
        # CPython 3.11's argparse drops a lone "--" even from "--flag=--" and hands a one-value option an
        # empty list (bpo-14364; newer argparse keeps "--" as the value). vLLM's image then gets no value at
        # all, not a choice: judge the text as the newer parser does, against the values it may take.
        return raw in [str(c) for c in (row[6] or row[9]) if c is not None]
    listed = row[9] if isinstance(row[9], tuple) else None
    return listed is None or value in listed


def recipe_accepts(flag: str, value: str | int) -> bool:
    """What `validate` says: the model, the recipe's own problems (typed fields) and vllm.extra's."""
    data = copy.deepcopy(BASE)
    if flag in TYPED:
        data["vllm"][TYPED[flag]] = value
    else:
        data["vllm"]["extra"] = {flag: value}
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError:
        return False
    return not recipe_problems(recipe) and not extra_problems(dict(recipe.vllm.extra))


def _values(row) -> st.SearchStrategy:
    accepted = [c for c in (row[6] or row[9]) if c is not None]
    near = st.sampled_from([str(c) for c in accepted]).flatmap(lambda c: st.sampled_from(
        [c.upper(), c.replace("_", "-"), c + "x", c[:-1] or "x", " " + c]))
    words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=12)
    ints = st.integers(min_value=-2, max_value=300)
    return st.one_of(st.sampled_from(accepted), near, words, ints, st.just("None"))


def test_the_typed_fields_with_a_closed_set_are_among_the_options_checked():
    """The recipe's typed fields that own a flag with values are all here (none keeps a list of its own)."""
    with_values = {_flag(row) for row in ROWS}
    assert {"kv-cache-dtype", "moe-backend", "distributed-executor-backend"} <= with_values & set(TYPED)
    assert len(ROWS) > 40


@pytest.mark.parametrize("row", ROWS, ids=_flag)
def test_the_recipe_accepts_exactly_what_the_table_accepts(row):
    @settings(max_examples=30, deadline=None, database=None)
    @given(value=_values(row))
    def agree(value):
        expected = table_accepts(row, str(value))
        assert recipe_accepts(_flag(row), value) == expected, f"--{_flag(row)} {value!r}: the table says {expected}"

    agree()


@pytest.mark.parametrize("row", [r for r in ROWS if _flag(r) in ("uvicorn-log-level", "kv-cache-dtype")], ids=_flag)
def test_a_lone_double_dash_is_no_value_for_the_table_or_the_recipe(row):
    """The value hypothesis once drew: argparse's "--" artifact must not make the oracle accept it."""
    assert not table_accepts(row, "--")
    assert not recipe_accepts(_flag(row), "--")
