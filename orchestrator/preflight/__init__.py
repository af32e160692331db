"""`spark-deploy preflight`: a registry of checks (pure judges) over the node facts of facts/ (a command
plus a pure parser each), all gathered in one round trip per node.

Importing this package registers every check module below, and the facts they judge.
"""

from . import checks_basic, checks_disk, checks_host  # noqa: F401  (registers)
from . import checks_model  # noqa: F401
from . import checks_memory, checks_fabric  # noqa: F401
from . import checks_vllm  # noqa: F401
from . import checks_overlays  # noqa: F401
from . import checks_draft  # noqa: F401
from . import checks_boot  # noqa: F401
from . import checks_blobs  # noqa: F401
from . import checks_fit  # noqa: F401
from . import checks_fabric_speed  # noqa: F401
from ..facts import look  # noqa: F401  (up's own reads, gathered with the facts)
from .run import Report, UnknownCheck, run_checks, select

__all__ = ["Report", "UnknownCheck", "run_checks", "select"]
