"""Configuration checks that real vLLM makes at start-up (pydantic configs, HF cache lookup)."""
from __future__ import annotations

import argparse
import os

from ...vllm_table import options_table
from .base import OFFLINE_MSG, SPEC_KEYS, SimError


def metavar_choices(dest: str) -> tuple:
    """Values the real parser lists in a metavar but leaves to pydantic to check (--kv-cache-dtype)."""
    return next(tuple(row[9]) for row in options_table.OPTIONS if row[2] == dest)


def pydantic_error(model: str, errors: list[tuple[str, str, str, object]]) -> SimError:
    """Render errors the way pydantic_core prints a ValidationError (vLLM configs are pydantic)."""
    n = len(errors)
    lines = [f"pydantic_core._pydantic_core.ValidationError: {n} validation error"
             f"{'s' if n > 1 else ''} for {model}"]
    for loc, msg, kind, value in errors:
        if loc:
            lines.append(loc)
        vtype = "ArgsKwargs" if kind == "value_error" else type(value).__name__
        shown = f"ArgsKwargs((), {value!r})" if kind == "value_error" else repr(value)
        lines.append(f"  {msg} [type={kind}, input_value={shown}, input_type={vtype}]")
        lines.append(f"    For further information visit https://errors.pydantic.dev/2.12/v/{kind}")
    return SimError("\n".join(lines), frames=ENGINE_FRAMES[2:])


ENGINE_FRAMES = (
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    ("/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/main.py", 73, "main",
     "args.dispatch_function(args)"),
    ("/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", 1402, "create_engine_config",
     "speculative_config = self.create_speculative_config("),
)


def _literal(model: str, field: str, value, allowed) -> None:
    """A pydantic Literal field: free text at the command line, refused when the config is built."""
    if value is not None and value not in allowed:
        shown = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise pydantic_error(model, [(field, f"Input should be {shown}", "literal_error", value)])


def validate_parallel(args: argparse.Namespace) -> None:
    """The multi-node rules of vLLM's ParallelConfig, plus: a Spark has exactly one GPU."""
    for row in options_table.OPTIONS:  # every option whose metavar lists values (--kv-cache-dtype, ...)
        if isinstance(row[9], tuple):
            field = {"kv_cache_dtype": "cache_dtype"}.get(row[2], row[2])
            _literal(row[3], field, getattr(args, row[2], None), tuple(row[9]))
    if args.nnodes > 1 and args.distributed_executor_backend not in (None, "mp", "uni", "external_launcher"):
        raise SimError("ValueError: nnodes > 1 can only be set when distributed executor backend is "
                       "mp, uni or external_launcher.")
    if not 0 <= args.node_rank < args.nnodes:
        raise SimError(f"ValueError: node_rank ({args.node_rank}) must be in [0, nnodes={args.nnodes}).")
    if args.headless != (args.node_rank > 0):
        raise SimError("ValueError: only the head (node_rank 0) runs the API server: "
                       "ranks > 0 must be started with --headless and rank 0 without it.")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if world != args.nnodes:
        raise SimError(f"ValueError: world_size ({world} = tp {args.tensor_parallel_size} x pp "
                       f"{args.pipeline_parallel_size}) does not match the GPUs available: nnodes "
                       f"{args.nnodes} x 1 GPU per node.")


def resolve_model_dir(model: str, revision: str | None, env) -> str:
    """Find the checkpoint as huggingface_hub does offline: a local dir, or the HF cache snapshot."""
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise SimError(f"OSError: {model} does not appear to have a file named config.json. "
                           f"Checkout 'https://huggingface.co/{model}/tree/None' for available files.")
        return model
    hf_home = env.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    hub = env.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub")
    repo = os.path.join(hub, "models--" + model.replace("/", "--"))
    rev = revision or "main"
    snapshot = os.path.join(repo, "snapshots", rev)
    if not os.path.isdir(snapshot):
        try:
            with open(os.path.join(repo, "refs", rev)) as fh:
                snapshot = os.path.join(repo, "snapshots", fh.read().strip())
        except OSError:
            snapshot = ""
    if not snapshot or not os.path.isfile(os.path.join(snapshot, "config.json")):
        raise SimError(OFFLINE_MSG, frames=(
            ("/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", 479, "cached_files",
             "raise OSError("),))
    return snapshot


def validate_speculative(raw, hf: dict) -> dict | None:
    """SpeculativeConfig is a pydantic dataclass with extra='forbid'; beyond n_predict, k must be a multiple
    of it (any method but dspark, whose width is its own)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise pydantic_error("SpeculativeConfig", [(
            "", "Input should be a dictionary or an instance of SpeculativeConfig", "dataclass_type", raw)])
    errors = [(k, "Unexpected keyword argument", "unexpected_keyword_argument", v)
              for k, v in raw.items() if k not in SPEC_KEYS]
    k = raw.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
        errors.append(("num_speculative_tokens", "Input should be a valid integer", "int_type", k))
    elif k is not None and k <= 0:
        errors.append(("num_speculative_tokens", "Input should be greater than 0", "greater_than", k))
    if errors:
        raise pydantic_error("SpeculativeConfig", errors)
    n_predict = hf.get("n_predict") or hf.get("num_nextn_predict_layers")
    if k is None:
        if not n_predict:
            raise pydantic_error("SpeculativeConfig", [(
                "", "Value error, num_speculative_tokens must be provided with speculative model",
                "value_error", raw)])
        k = n_predict
    if raw.get("method") != "dspark" and n_predict and k > n_predict and k % n_predict:  # vLLM 0.33.0's rule
        raise pydantic_error("SpeculativeConfig", [(
            "", f"Value error, num_speculative_tokens:{k} must be divisible by n_predict={n_predict}",
            "value_error", raw)])
    method = raw.get("method") or ("mtp" if n_predict else "draft_model")
    return {**raw, "method": method, "num_speculative_tokens": k}


def derive_max_model_len(args, hf: dict, env) -> int:
    """--max-model-len, else the config's max_position_embeddings (vLLM refuses to exceed it)."""
    derived = int(hf.get("max_position_embeddings") or 32768)
    if args.max_model_len is None:
        return derived
    if args.max_model_len > derived and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        raise pydantic_error("ModelConfig", [(
            "", f"Value error, User-specified max_model_len ({args.max_model_len}) is greater than the "
                f"derived max_model_len (max_position_embeddings={derived} or model_max_length=None in "
                "model's config.json). To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.", "value_error", {"max_model_len": args.max_model_len})])
    return args.max_model_len
