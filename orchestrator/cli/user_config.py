"""The user's config file: the default inventory and named clusters, so `-c lab` can stand for `-i path`.

    # ~/.config/spark-deploy/config.yaml   ($XDG_CONFIG_HOME respected; SPARK_DEPLOY_CONFIG names another)
    inventory: ~/sparks/lab.yaml          # used when neither -i nor -c (nor their env vars) is given
    clusters:
      lab: ~/sparks/lab.yaml
      prod: /etc/spark-deploy/prod.yaml   # relative paths are relative to this file

Which inventory a command uses, first match wins: `-i PATH` or `-c NAME` on the command line (not both),
then SPARK_DEPLOY_INVENTORY or SPARK_DEPLOY_CLUSTER, then the file's `inventory`, then ./inventory.yaml.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config.hints import fixed
from ..config.source import ConfigError, ConfigIssue, read_document

CONFIG_ENV = "SPARK_DEPLOY_CONFIG"
DEFAULT_INVENTORY = Path("inventory.yaml")
KEYS = ("inventory", "clusters")


@dataclass(frozen=True)
class UserConfig:
    path: Path
    exists: bool
    inventory: Path | None = None
    clusters: dict[str, Path] = field(default_factory=dict)


def config_path(env: Mapping[str, str]) -> Path:
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path(env.get("HOME", "~")) / ".config"
    return base.expanduser() / "spark-deploy" / "config.yaml"


def load(env: Mapping[str, str] | None = None) -> UserConfig:
    """The config file, or an empty one when there is none; a bad one is a ConfigError naming line and key."""
    env = os.environ if env is None else env
    path = config_path(env)
    if not path.is_file():
        return UserConfig(path, exists=False)
    doc = read_document(path)
    data = doc.data()
    if data is None:
        return UserConfig(path, exists=True)
    if not isinstance(data, dict):
        raise ConfigError([doc.issue((), fixed("the top level must be a mapping",
                                               "write `inventory: PATH` and/or `clusters: {NAME: PATH}`"))])
    issues = []
    for key in data:
        if key not in KEYS:
            near = difflib.get_close_matches(str(key), KEYS, n=1)
            issues.append(doc.issue((key,), fixed("unknown key", f"did you mean {near[0]!r}?" if near else
                                                  f"use one of the keys {', '.join(KEYS)}")))

    def where(value, loc) -> Path | None:
        if not isinstance(value, str) or not value.strip():
            issues.append(doc.issue(loc, fixed(f"want a path to an inventory file, read {value!r}",
                                               f"write it like `{loc[-1]}: ~/sparks/inventory.yaml`")))
            return None
        p = Path(value).expanduser()
        return p if p.is_absolute() else path.parent / p

    inventory = where(data["inventory"], ("inventory",)) if "inventory" in data else None
    clusters: dict[str, Path] = {}
    raw = data.get("clusters", {})
    if not isinstance(raw, dict):
        issues.append(doc.issue(("clusters",), fixed("want a mapping of names to inventory paths",
                                                     "write `lab: ~/lab.yaml` lines indented below `clusters:`")))
    else:
        for name, value in raw.items():
            found = where(value, ("clusters", name))
            if found is not None:
                clusters[str(name)] = found
    if issues:
        raise ConfigError(issues)
    return UserConfig(path, exists=True, inventory=inventory, clusters=clusters)


def cluster_inventory(config: UserConfig, name: str) -> Path:
    """The inventory a named cluster stands for, or a ConfigError naming the file, the name and the fix."""
    if name in config.clusters:
        return config.clusters[name]
    if not config.exists:
        fix = f"create {config.path} with `clusters: {{{name}: PATH/TO/inventory.yaml}}`, or use -i PATH"
    else:
        near = difflib.get_close_matches(name, list(config.clusters), n=1)
        fix = (f"did you mean {near[0]!r}? " if near else "") + (
            f"the clusters are {', '.join(sorted(config.clusters))}" if config.clusters else
            "it names no cluster: add `clusters: {" + name + ": PATH}`")
    raise ConfigError([ConfigIssue(str(config.path), None, f"clusters.{name}", fixed(f"no cluster {name!r}", fix))])
