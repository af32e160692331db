"""The options of `export k8s` checked before anything is written: a name Kubernetes would refuse at
`kubectl apply` (far from its cause) or a timeout that kills the leader at every start is bad input, and an
option the recipe gives no use for is said to be ignored rather than dropped without a word."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..config.load import Deployment
from .lws import K8sOptions

# Kubernetes' own rules (apimachinery validation): a namespace is a DNS-1123 label; Secret and
# PersistentVolumeClaim names are DNS-1123 subdomains.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# An extended resource name: DOMAIN/NAME (a qualified name with a DNS prefix), as device plugins register.
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class OptionCheck:
    errors: list[str]  # bad input: nothing is written
    ignored: list[str]  # options that do not apply to this recipe, each with why


def _name(flag: str, value: str | None, label: bool) -> str | None:
    if value is None:
        return None
    limit, pattern, kind = (63, _DNS1123_LABEL, "label") if label else (253, _DNS1123_SUBDOMAIN, "subdomain")
    if len(value) <= limit and pattern.match(value):
        return None
    return (f"{flag} {value!r} is not a DNS-1123 {kind} (lower-case letters, digits and '-'"
            f"{', dot-separated' if not label else ''}, starting and ending with a letter or digit, at most "
            f"{limit} characters): Kubernetes refuses it")


def check_options(dep: Deployment, opts: K8sOptions) -> OptionCheck:
    errors = [e for e in (_name("--namespace", opts.namespace, True),
                          _name("--secret-name", opts.secret_name, False),
                          _name("--hf-cache-claim", opts.hf_cache_claim, False)) if e]
    if opts.rdma_resource is not None and not _RESOURCE.match(opts.rdma_resource):
        errors.append(f"--rdma-resource {opts.rdma_resource!r} is not an extended resource name "
                      "(DOMAIN/NAME, e.g. rdma/rdma_shared_device_a)")
    if not (math.isfinite(opts.ready_timeout) and opts.ready_timeout > 0):
        errors.append(f"--ready-timeout {opts.ready_timeout:g} must be a positive number of seconds (the leader's "
                      "startup probe allows this long to serve)")
    ignored = []
    if opts.secret_name is not None and not dep.recipe.secrets:
        ignored.append(f"--secret-name {opts.secret_name} was ignored: recipe {dep.recipe.name!r} lists no secrets")
    profile = dep.inventory.interconnect.profile
    if opts.rdma_resource is not None and profile != "roce":
        ignored.append(f"--rdma-resource {opts.rdma_resource} was ignored: the inventory's interconnect profile "
                       f"is {profile}, not roce (no HCA is used)")
    return OptionCheck(errors, ignored)
