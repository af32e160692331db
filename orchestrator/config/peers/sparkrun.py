"""sparkrun's recipe (format v2, sparkrun 0.4.2: RECIPES.md and core/recipe.py `_KNOWN_KEYS`) read into
placed values and left keys."""

from __future__ import annotations

import re

from .reading import NOT_RUN, Reading, mapping_at, read_env, read_mods, read_serve

# sparkrun 0.4.2 runtimes/_vllm_common.py: the `defaults` keys it turns into `vllm serve` flags.
VLLM_FLAG_MAP = {
    "port": "--port", "host": "--host", "tensor_parallel": "-tp", "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len", "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs", "served_model_name": "--served-model-name", "dtype": "--dtype",
    "quantization": "--quantization", "enforce_eager": "--enforce-eager", "enable_prefix_caching": "--enable-prefix-caching",
    "trust_remote_code": "--trust-remote-code", "distributed_executor_backend": "--distributed-executor-backend",
    "pipeline_parallel": "-pp", "data_parallel": "--data-parallel-size", "kv_cache_dtype": "--kv-cache-dtype",
    "otlp_traces_endpoint": "--otlp-traces-endpoint", "api_key": "--api-key",
}
VLLM_BOOL_FLAGS = frozenset({"enforce_eager", "enable_prefix_caching", "trust_remote_code", "enable_auto_tool_choice"})
# sparkrun appends --served-model-name to a template that lacks it (runtimes' _augment_served_model_name).
APPENDED = frozenset({"served_model_name"})
VLLM_RUNTIMES = {"", "vllm", "vllm-distributed", "vllm-ray", "eugr-vllm"}

NODES = "the inventory decides the nodes (tensor_parallel_size x pipeline_parallel_size = its GPUs)"
BUILD = "spark-deploy does not build images: build it as before, then `spark-deploy pin` the result"
OWN = "sparkrun's own machinery: spark-deploy has no counterpart"
LEFT = {
    "sparkrun_version": "sparkrun's own version", "min_sparkrun_version": "sparkrun's own version",
    "runtime_version": "informational in sparkrun: the pinned image ID says what runs",
    "mode": NODES, "min_nodes": NODES, "max_nodes": NODES, "cluster_only": NODES, "solo_only": NODES,
    "containers": "spark-deploy runs one pinned image ID on every node",
    "benchmark": "`spark-deploy bench` has its own measuring protocol (docs/bench.md)",
    "pre_exec": NOT_RUN, "post_exec": NOT_RUN, "post_commands": NOT_RUN, "stop_after_post": NOT_RUN,
    "build_args": BUILD, "builder": BUILD, "builder_config": BUILD,
    "executor": OWN, "scheduler": OWN, "distribution_config": OWN, "layout": OWN, "cluster_config": OWN,
    "runtime_cache": OWN, "readiness": "`up` waits for /health, the model and one completion itself",
    "capabilities": OWN, "unsupported_capabilities": OWN, "include": OWN, "overrides": OWN,
}
HANDLED = {"recipe_version", "name", "description", "model", "model_revision", "runtime", "container", "defaults",
           "env", "command", "metadata", "executor_config", "runtime_config", "mods"}
_ON_FAILURE = re.compile(r"^on-failure:([0-9]+)$")


def read(reading: Reading, data: dict) -> None:
    """Everything of a sparkrun recipe but its name, image and format checks (importer.py)."""
    runtime = str(data.get("runtime") or "")
    if runtime not in VLLM_RUNTIMES:
        raise reading.refuse(("runtime",), f"runtime {runtime!r}: spark-deploy deploys vLLM only "
                                           f"({', '.join(sorted(r for r in VLLM_RUNTIMES if r))})")
    if data.get("model") is not None:
        reading.put(("model", "repo"), str(data["model"]), reading.source("model"))
    if data.get("model_revision") is not None:
        reading.put(("model", "revision"), str(data["model_revision"]), reading.source("model_revision"))
    values = {**mapping_at(reading, data, "defaults")}
    if data.get("model") is not None:
        values["model"] = data["model"]  # sparkrun always injects {model}
    read_serve(reading, data, values, VLLM_FLAG_MAP, VLLM_BOOL_FLAGS, APPENDED)
    read_env(reading, data, expands=True)
    read_mods(reading, data)
    _metadata(reading, data)
    _executor(reading, mapping_at(reading, data, "executor_config"))
    for key in mapping_at(reading, data, "runtime_config"):
        reading.leave(reading.source("runtime_config", key), "runtime-specific to sparkrun")
    for key in data:
        if key in LEFT:
            reading.leave(reading.source(key), LEFT[key])
        elif key not in HANDLED:
            reading.leave(reading.source(key), "not a sparkrun recipe key either (sparkrun sweeps it into "
                                               "runtime_config)")


def _metadata(reading: Reading, data: dict) -> None:
    for key, value in mapping_at(reading, data, "metadata").items():
        if key == "description" and value is not None:
            reading.put(("description",), str(value), reading.source("metadata", key))
        else:
            reading.leave(reading.source("metadata", key), "informational in sparkrun (`spark-deploy fit` reads the "
                                                           "model's own config and headers)")


def _executor(reading: Reading, config: dict) -> None:
    """executor_config: the `docker run` options spark-deploy also has."""
    direct = {"shm_size": "shm_size", "privileged": "privileged", "gpus": "gpus", "ipc": "ipc", "network": "network"}
    for key, value in config.items():
        source = reading.source("executor_config", key)
        if key in direct:
            reading.put(("docker", direct[key]), str(value) if key in ("shm_size", "gpus") else value, source)
        elif key == "restart_policy":
            _restart(reading, str(value), source)
        elif key == "auto_remove":
            reading.leave(source, "spark-deploy keeps a release's stopped containers for `rollback`; `prune` "
                                  "removes old ones")
        elif key == "entrypoint":
            reading.leave(source, "spark-deploy runs `vllm serve` as the container's command "
                                  "(image.serve_entrypoint: false); an ENTRYPOINT that wraps it must go from the image")
        else:
            reading.leave(source, "not a `docker run` option spark-deploy sets")


def _restart(reading: Reading, policy: str, source) -> None:
    bounded = _ON_FAILURE.match(policy)
    if bounded:
        reading.put(("docker", "restart", "policy"), "on-failure", source)
        reading.put(("docker", "restart", "max_retries"), int(bounded.group(1)), source)
    elif policy == "no":
        reading.put(("docker", "restart", "policy"), "no", source)
    else:
        reading.leave(source, f"{policy!r} restarts without end, which hides a crash: spark-deploy's restart is "
                              "bounded (docker.restart: policy on-failure, max_retries 1-10)")
