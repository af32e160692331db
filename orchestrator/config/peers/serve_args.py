"""Where each `vllm serve` option of a peer's command goes in a spark-deploy recipe: a typed field, the
inventory (not written), `secrets:` (not written), or `vllm.extra` once vLLM's table takes it (the verdict
`validate` gives: config/vllm_flags.flag_problem)."""

from __future__ import annotations

import json
import re
from typing import Callable

from ..flag_table import BUNDLED
from ..types import SECRET_FLAGS
from ..vllm_flags import OPTIONS, flag_problem
from .parts import Left, Placed, Source
from .serve_command import PLACEHOLDER, Arg

_INT = re.compile(r"^-?[0-9]+$")
_FLOAT = re.compile(r"^-?([0-9]+\.[0-9]*|\.[0-9]+)([eE]-?[0-9]+)?$")


def _first(value: object) -> object:
    return value[0] if isinstance(value, list) else value


def _scalar(value: object) -> object:
    """Text as YAML would type it (a number stays a number); a switch's True/False as it is."""
    if not isinstance(value, str):
        return value
    if _INT.match(value):
        return int(value)
    if _FLOAT.match(value):
        return float(value)
    return value


def _switch(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def _json_object(value: object) -> dict:
    loaded = json.loads(value) if isinstance(value, str) else value
    if not isinstance(loaded, dict):
        raise ValueError("not a JSON object")
    return loaded


def _integer(value: object) -> int:
    if isinstance(value, bool) or not _INT.match(str(value)):
        raise ValueError(f"{value!r} is not an integer")
    return int(str(value))


# vLLM option -> (the recipe's key, how its value is read)
TYPED: dict[str, tuple[tuple[str, ...], Callable[[object], object]]] = {
    "tensor-parallel-size": (("vllm", "tensor_parallel_size"), _integer),
    "pipeline-parallel-size": (("vllm", "pipeline_parallel_size"), _integer),
    "master-port": (("vllm", "master_port"), _integer),
    "distributed-executor-backend": (("vllm", "distributed_executor_backend"), str),
    "moe-backend": (("vllm", "moe_backend"), str),
    "kv-cache-dtype": (("vllm", "kv_cache_dtype"), str),
    "gpu-memory-utilization": (("vllm", "gpu_memory_utilization"), float),
    "max-model-len": (("vllm", "max_model_len"), _scalar),
    "enable-prefix-caching": (("vllm", "enable_prefix_caching"), _switch),
    "enforce-eager": (("vllm", "enforce_eager"), _switch),
    "speculative-config": (("vllm", "speculative_config"), _json_object),
    "port": (("serve", "port"), _integer),
    "host": (("serve", "host"), str),
    "served-model-name": (("serve", "served_model_name"), lambda v: str(_first(v))),
    "revision": (("model", "revision"), str),
    "model": (("model", "repo"), str),
}
# Set per node by spark-deploy from the inventory (head = rank 0, the others in file order).
BY_INVENTORY = {"nnodes", "node-rank", "master-addr", "headless", "data-parallel-address", "data-parallel-rank",
                "data-parallel-start-rank", "data-parallel-rpc-port"}
_RAY = "ray: spark-deploy starts vLLM's own multi-node launcher, mp (vLLM refuses ray with --nnodes)"


def place(arg: Arg, source: Source) -> Placed | Left:
    """One option's destination, or why it is left out."""
    base = arg.name.split(".")[0]
    unresolved = PLACEHOLDER.findall(str(arg.value)) if not isinstance(arg.value, bool) else []
    if unresolved:
        return Left(source, f"{{{unresolved[0]}}} has no value in `defaults`: write the value into the recipe")
    if base in BY_INVENTORY:
        return Left(source, f"--{base} is set per node from the inventory (the head is rank 0, the others follow "
                            "in file order)")
    if base in SECRET_FLAGS:
        variable = SECRET_FLAGS[base]
        return Left(source, f"--{base} carries a secret: export {variable} and list `- {variable}` under `secrets:`")
    if base in TYPED and base == arg.name:
        target, read = TYPED[base]
        try:
            value = read(arg.value)
        except (ValueError, TypeError) as exc:
            return Left(source, f"not written: {exc}")
        if target == ("vllm", "distributed_executor_backend") and value == "ray":
            return Placed(target, "mp", source, _RAY)
        note = "the first of several names" if base == "served-model-name" and isinstance(arg.value, list) else ""
        return Placed(target, value, source, note)
    return _extra(arg, source)


def _extra(arg: Arg, source: Source) -> Placed | Left:
    option = OPTIONS.get(arg.name.split(".")[0])
    value = arg.value
    if isinstance(value, list):
        return Left(source, f"--{arg.name} is given {len(value)} values; vllm.extra takes one value per flag")
    if option is not None and option.json and isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = _json_object(value)
        except ValueError as exc:
            return Left(source, f"not written: --{arg.name} is not valid JSON ({exc})")
    else:
        value = _scalar(value)
    problem = flag_problem(arg.name, value, BUNDLED)
    if problem is not None:
        return Left(source, f"not written: {problem}")
    return Placed(("vllm", "extra", arg.name), value, source)
