"""The recipe's acceptance names checked before anything runs: `validate` and `up` both refuse an unknown one
as bad input (exit 2), at the recipe's line."""
from __future__ import annotations

from ..config.hints import fixed
from ..config.load import Deployment
from ..config.source import ConfigIssue, Document
from .context import context_for
from .run import UnknownCheck, plan


def acceptance_problems(dep: Deployment) -> list[ConfigIssue]:
    """A check name the recipe lists that does not exist: bad input, said before anything is touched."""
    try:
        plan(context_for(dep.recipe, []))
    except UnknownCheck as exc:
        doc = dep.recipe_doc or Document(dep.recipe_path, None)
        return [doc.issue(("acceptance", "checks"), fixed(str(exc), "name checks from these lists, or define the "
                                                                   "check under `acceptance.custom:`"))]
    return []
