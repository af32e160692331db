"""What `up` reads in the same gathering as its checks: the image survey, the containers of the recipe or
holding the plan's names, and the head's listening sockets.

They were three more round trips per node beside the facts driver (each a channel, a bash and its docker
CLI calls on two loaded cores); as facts they ride in the one driver script. The commands are the ones
the direct calls send (images.INSPECT_IMAGES, containers.RECIPE_OR_NAMED, basics.LISTENERS) and the
answers go through the same pure rules (image_sync.sync_plan, containers.of_recipe_or_named,
basics.ports_judged).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..checks.basics import LISTENERS, Listener, parse_listeners, ports_judged
from ..checks.verdict import Verdict
from ..docker_cli import image_sync
from ..docker_cli.containers import RECIPE_OR_NAMED, Container, either_args, of_recipe_or_named, parse_inspect
from ..docker_cli.images import INSPECT_IMAGES, ImageIdentity, parse_identities
from ..render.plan import Plan
from ..transport.node import NodeConnection, NodeError
from . import engine
from .core import FactInput, Observed, fact

IMAGE_REFS, FOUND, LISTENING = "image_refs", "recipe_or_named", "listeners"
NAMES = (IMAGE_REFS, FOUND, LISTENING)


def _names_on(given: FactInput) -> list[str]:
    return [launch.container for launch in given.plan.ranks if launch.node.name == given.node.name]


@fact(IMAGE_REFS, INSPECT_IMAGES, args=lambda i: image_sync.survey_refs(i.plan.image_id, i.plan.image_ref),
      api=engine.Op.IMAGES)
def parse_image_refs(stdout: str) -> list[ImageIdentity | None]:
    return parse_identities(stdout)


@fact(FOUND, RECIPE_OR_NAMED, args=lambda i: either_args(i.plan.recipe, _names_on(i)), api=engine.Op.RECIPE_OR_NAMED)
def parse_found(stdout: str) -> list[Container]:
    return parse_inspect(stdout)


@fact(LISTENING, shlex.join(LISTENERS))
def parse_listening(stdout: str) -> list[Listener]:
    return parse_listeners(stdout)


@dataclass
class Looked:
    found: dict[str, list[Container]]  # node -> ours of this recipe (by label), and any holding the plan's names
    ports: Verdict  # the plan's ports on the head
    image: image_sync.SyncPlan


def looked(facts: dict[str, dict[str, Observed]], conns: list[NodeConnection], plan: Plan) -> Looked:
    """The three answers from every node's gathered facts. A fact that failed on a node raises NodeError
    naming the node and docker's (or ss's) reason, as the direct call's failed command did."""
    def value(node: str, name: str, what: str):
        seen = facts.get(node, {}).get(name)
        if seen is None:
            raise NodeError(node, f"{what}: not gathered")
        if not seen.ok:
            raise NodeError(node, f"{what} failed: {seen.error}")
        return seen.value

    names = {launch.node.name: [launch.container] for launch in plan.ranks}
    found = {c.name: of_recipe_or_named(value(c.name, FOUND, "looking up the recipe's containers"), plan.cluster,
                                        plan.recipe, names.get(c.name, [])) for c in conns}
    head = plan.head.node.name
    ports = ports_judged(head, value(head, LISTENING, "ss -Hltnpe"), plan.ports)
    nodes = [image_sync.node_image(c, value(c.name, IMAGE_REFS, "docker image inspect")) for c in conns]
    return Looked(found, ports, image_sync.sync_plan(plan.image_id, plan.image_ref, nodes))
