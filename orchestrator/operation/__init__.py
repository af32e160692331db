"""The lifecycle every cluster-changing command shares (Operation) and the one typed reading of a cluster
(ClusterState) that commands — mutating or read-only — decide from."""

from .operation import AuditAction, Locking, Observation, Operation, OperationRefused, Outcome, Reach, held_lock
from .state import ClusterState, read_state

__all__ = ["AuditAction", "ClusterState", "Locking", "Observation", "Operation", "OperationRefused", "Outcome", "Reach",
           "held_lock", "read_state"]
