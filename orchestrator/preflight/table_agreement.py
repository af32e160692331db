"""Where the pinned image's own `vllm serve` parser and the option table shipped with spark-deploy (which
`validate` checks `vllm.extra` against offline) disagree about a recipe's flags. The image is the
authority; saying so tells the user why `validate` and `preflight` answered differently."""

from __future__ import annotations

from ..config.recipe import Recipe
from ..config.vllm_flags import OPTIONS, VLLM_VERSION
from ..checks.help_parse import Options


def disagreements(recipe: Recipe, options: Options) -> list[str]:
    """One note per `vllm.extra` flag that one parser knows and the other does not."""
    notes = []
    for flag, value in recipe.vllm.extra.items():
        base = flag.split(".")[0]
        name = f"no-{base}" if value is False else base
        image_knows, table_knows = f"--{name}" in options, name in OPTIONS
        if image_knows != table_knows:
            notes.append(f"--{name}: the image's parser {'knows' if image_knows else 'does not know'} it, "
                         f"vLLM {VLLM_VERSION}'s table shipped with spark-deploy "
                         f"{'does not' if image_knows else 'does'} (the image's vLLM differs; the image decides)")
    return notes
