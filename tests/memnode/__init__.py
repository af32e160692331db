"""An in-memory cluster behind the product's transport interface (issue 19): a model of Docker state per
node, answered by parsing docker argv and by recognising the product's script constants by identity, so
the Runner, every command body, undo and restore run in unit tests in milliseconds."""

from .endpoint import MemoryEndpoint, endpoint_at
from .model import COMMIT, Container, Fault, Image, Node, World, sim_image
from .node import MemoryNode, connector, fails, interrupt, matches_argv, matches_script

__all__ = ["COMMIT", "Container", "Fault", "Image", "MemoryEndpoint", "MemoryNode", "Node", "World", "connector",
           "endpoint_at", "fails", "interrupt", "matches_argv", "matches_script", "sim_image"]
