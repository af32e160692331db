"""eugr/spark-vllm-docker's recipe (recipes/README.md, "Recipe Format"; `recipe_version: "1"`) read into
placed values and left keys. Its `command` is the `vllm serve` line itself, filled from `defaults`."""

from __future__ import annotations

from .reading import Reading, mapping_at, read_env, read_mods, read_serve

NODES = "the inventory decides the nodes (tensor_parallel_size x pipeline_parallel_size = its GPUs)"
LEFT = {
    "cluster_only": NODES, "solo_only": NODES,
    "build_args": "spark-deploy does not build images: build it with build-and-copy.sh as before, then "
                  "`spark-deploy pin` the result",
}
HANDLED = {"recipe_version", "name", "description", "model", "container", "defaults", "env", "command", "mods"}


def read(reading: Reading, data: dict) -> None:
    """Everything of an eugr recipe but its name, image and format checks (importer.py). The command's own
    model comes first: it is what runs; `model:` is what `--setup` downloads."""
    defaults = mapping_at(reading, data, "defaults")
    values = {**({"model": data["model"]} if data.get("model") is not None else {}), **defaults}
    read_serve(reading, data, values, None)
    if data.get("model") is not None:
        reading.put(("model", "repo"), str(data["model"]), reading.source("model"))
    read_env(reading, data, expands=False)
    read_mods(reading, data)
    for key in data:
        if key in LEFT:
            reading.leave(reading.source(key), LEFT[key])
        elif key not in HANDLED:
            reading.leave(reading.source(key), "not a key of eugr's recipe format")
