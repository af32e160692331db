"""Value forms the engines accept, read the way those engines read them: Docker's sizes for shm_size and
vLLM 0.33's human-readable integers for max_model_len. The stored value is what the engine would get."""

from __future__ import annotations

import argparse
from typing import Annotated

from pydantic import BeforeValidator, Field

from ..vllm_table.argtypes import human_readable_int_or_auto
from .message import fixed

# github.com/docker/go-units RAMInBytes, which `docker run --shm-size` uses: binary multiples, an optional
# i with a b: 16g = 16GB = 16GiB = 16 * 2**30 bytes.
DOCKER_SIZE = r"^[0-9]+(\.[0-9]+)?[kKmMgGtTpP]?([iI]?[bB])?$"  # export/quantity.py reads the same forms
_MAX_LEN_FORMS = "an integer (32768), 32k = 32000, 32K = 32768 or 1M; leave the key out for the model's own limit"


def _max_model_len(value: object) -> object:
    """vLLM's `--max-model-len` parser (human_readable_int_or_auto), except its `auto`."""
    if not isinstance(value, str):
        return value
    try:
        parsed = human_readable_int_or_auto(value)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        detail = f": {exc}" if isinstance(exc, argparse.ArgumentTypeError) else ""
        raise ValueError(fixed(f"{value!r} is not {_MAX_LEN_FORMS}{detail}", "write it like `max_model_len: 32768` "
                               "or `max_model_len: 32K`")) from None
    if parsed == -1:  # vLLM's auto shrinks to what fits in memory: preflight's model-fit needs the number
        raise ValueError(fixed(f"{value!r} (vLLM's fit-to-memory) is not taken here: model-fit preflight needs a "
                               "number", "write the number of tokens (`max_model_len: 32K`), or delete the key for "
                               "the model's own limit"))
    return parsed


MaxModelLen = Annotated[Annotated[int, Field(ge=16)] | None,
                        BeforeValidator(_max_model_len, json_schema_input_type=Annotated[int, Field(ge=16)] | str | None),
                        Field(default=None, description="Longest request in tokens, as vLLM 0.33 reads it: "
                              + _MAX_LEN_FORMS + ".", examples=[32768, "128k"])]
DockerSize = Annotated[str, Field(pattern=DOCKER_SIZE)]

