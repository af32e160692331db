"""Acceptance checks per release: requests to the serving API, each judged by a pure function
(docs/acceptance.md). `run_checks` runs them; `up` runs them after readiness (deploy/steps_accept.py)."""
from .model import AcceptContext, AcceptStatus, Answer, Request, Result
from .registry import CHECKS
from .run import UnknownCheck, blocking, run_checks

__all__ = ["AcceptContext", "AcceptStatus", "Answer", "CHECKS", "Request", "Result", "UnknownCheck", "blocking",
           "run_checks"]
