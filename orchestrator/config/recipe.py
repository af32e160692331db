"""The recipe: what to run (image, model, vLLM arguments) and what its logs must show."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from .flag_table import BUNDLED
from .forms import DockerSize, MaxModelLen
from .acceptance import AcceptanceSettings
from .hints import fixed, regex_fix
from .types import (
    CONTROL,
    SECRET_FLAGS,
    SECRET_NAME,
    TOKEN_VALUE,
    AbsPath,
    EnvName,
    FlagName,
    ImageId,
    ImageRef,
    Name,
    NodeName,
    Port,
    Scalar,
    Text,
    redact,
)

# Flags the tool owns: set from typed fields or from the inventory, never through `vllm.extra`.
OWNED_FLAGS = {
    "tensor-parallel-size": "vllm.tensor_parallel_size", "pipeline-parallel-size": "vllm.pipeline_parallel_size",
    "master-port": "vllm.master_port", "master-addr": "the inventory head's fabric_ip", "nnodes": "the inventory",
    "node-rank": "the inventory", "headless": "the inventory", "distributed-executor-backend": "vllm.distributed_executor_backend",
    "moe-backend": "vllm.moe_backend", "kv-cache-dtype": "vllm.kv_cache_dtype",
    "gpu-memory-utilization": "vllm.gpu_memory_utilization", "max-model-len": "vllm.max_model_len",
    "speculative-config": "vllm.speculative_config", "enable-prefix-caching": "vllm.enable_prefix_caching",
    "enforce-eager": "vllm.enforce_eager", "port": "serve.port", "host": "serve.host",
    "served-model-name": "serve.served_model_name", "revision": "model.revision",
    "tp": "vllm.tensor_parallel_size", "pp": "vllm.pipeline_parallel_size",
}


def _owned_alias(flag: str) -> str | None:
    """The owned flag that `flag` abbreviates (argparse accepts unique prefixes: `max-model` is
    `max-model-len`) or negates (`no-enable-prefix-caching`, `disable-prefix-caching`)."""
    for negative, positive in (("no-", ""), ("disable-", "enable-"), ("enable-", "disable-")):
        if flag.startswith(negative) and positive + flag[len(negative):] in OWNED_FLAGS:
            return positive + flag[len(negative):]
    prefixed = [owned for owned in OWNED_FLAGS if owned.startswith(flag) and len(flag) >= 3 and owned != flag]
    return prefixed[0] if prefixed else None


def _owned_fix(flag: str) -> str:
    owner = OWNED_FLAGS[flag]
    if owner.startswith(("vllm.", "serve.", "model.")):
        return f"delete this line and write `{owner.split('.')[1]}:` under `{owner.split('.')[0]}:`"
    return f"delete this line: {owner} decides it (the head is rank 0, the other nodes follow in file order)"


def _not_owned(dotted: str) -> str:
    """A `vllm.extra` key check: it runs per key, so the error points at that key's own line. A dotted key
    (`speculative-config.method`) belongs to its option."""
    flag = dotted.split(".")[0]
    if flag in OWNED_FLAGS:
        raise ValueError(fixed(f"--{flag} is set by {OWNED_FLAGS[flag]}, not by vllm.extra", _owned_fix(flag)))
    alias = _owned_alias(flag)
    if alias is not None:
        raise ValueError(fixed(f"--{flag} abbreviates or negates --{alias}, which is set by {OWNED_FLAGS[alias]}",
                               _owned_fix(alias)))
    if flag in SECRET_FLAGS:
        variable = SECRET_FLAGS[flag]
        raise ValueError(fixed(f"--{flag} carries a secret", f"delete this line; export {variable} and list "
                               f"`- {variable}` under `secrets:` (vLLM reads it from the environment)"))
    return dotted


ExtraFlag = Annotated[FlagName, AfterValidator(_not_owned)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ImageSpec(Model):
    """`ref` is provenance; `id` is what runs. A RepoDigest does not survive `docker load` (field note 1)."""

    ref: ImageRef = Field(description="Where the image came from (registry/name:tag); provenance only.",
                          examples=["ghcr.io/org/vllm:tag"])
    id: ImageId | None = Field(default=None, description="The image ID that runs (sha256:...); `spark-deploy pin` "
                               "fills it; `up` refuses an unpinned image.")
    serve_entrypoint: bool = Field(default=True, description="true (the default): the image's entrypoint already "
                                   "is `vllm serve`, so the tool passes only the model and flags; false: the tool "
                                   "runs `vllm serve` itself (images whose entrypoint is a shell or plain python).")


class ModelSpec(Model):
    """The weights every rank loads: the same repo and revision on every node (field note 10)."""

    repo: Text = Field(description="Hugging Face repo id (org/name) or an absolute path inside the container.",
                       examples=["Qwen/Qwen3-0.6B"], pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:,]+)$")
    revision: Text = Field(default="main", description="Branch, tag or commit of the model repo.", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


class ServeSpec(Model):
    """The OpenAI-compatible API the head serves."""

    served_model_name: Name | None = Field(default=None, description="The name clients ask for; default: model.repo.")
    host: Text = Field(default="0.0.0.0", pattern=r"^[0-9A-Fa-f.:]+$", description="The API's bind address on the head.")
    port: Port = Field(default=8000, description="The OpenAI-compatible API's port on the head.")


class SpeculativeConfig(BaseModel):
    """vLLM's own schema validates the rest; we insist on the two keys we reason about."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    method: Text = Field(description="The speculative method, e.g. mtp, eagle3, ngram.", examples=["mtp"])
    num_speculative_tokens: int = Field(gt=0, le=32, description="Tokens proposed per step (1-32).", examples=[3])

    @model_validator(mode="after")
    def _scalars_only(self) -> "SpeculativeConfig":
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and CONTROL.search(value)):
                raise ValueError(fixed(f"speculative_config.{key} must be a plain scalar",
                                       f"write `{key}:` with text, a number or true/false on its line"))
        return self


def _listed(flag: str, *more: None) -> dict:
    return {"enum": [*(BUNDLED.accepted(flag) or ()), *more]}


class VllmArgs(Model):
    """`vllm serve`'s arguments: the ones the tool reasons about typed, any other under `extra`."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=64, description="GPUs one model copy spans; with "
                                      "pipeline_parallel_size it must equal the inventory's GPU count.")
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64, description="Pipeline stages; x tensor_parallel_size "
                                        "= the inventory's GPUs.")
    master_port: Port = Field(default=29501, description="torch.distributed rendezvous port on the head.")
    # The fields with a closed set of values take it from vLLM's option table (the pinned image's when
    # preflight has cached it, else the shipped one): recipe_problems checks them, so no list lives here.
    # (The JSON schema, an editor's aid, lists the shipped table's values.)
    distributed_executor_backend: Text = Field(
        "mp", description="--distributed-executor-backend, one of the values vLLM's table lists: mp across "
        "nodes (vLLM refuses ray with more than one node); uni only on one node.",
        json_schema_extra=_listed("distributed-executor-backend"))
    moe_backend: Text | None = Field(
        None, description="--moe-backend, one of vLLM's choices (unset: vLLM's auto); the log checks can prove "
        "which one ran (field note 6).", json_schema_extra=_listed("moe-backend", None))
    kv_cache_dtype: Text | None = Field(
        None, description="--kv-cache-dtype, one of the values vLLM's table lists (fp8, fp8_ds_mla, nvfp4_ds_mla, "
        "...; unset: vLLM's auto).", json_schema_extra=_listed("kv-cache-dtype", None))
    gpu_memory_utilization: float | None = Field(default=None, description="Share of unified memory vLLM takes, "
                                                 "(0, 0.95]: a Spark needs headroom for the OS.")
    max_model_len: MaxModelLen = None
    enable_prefix_caching: bool | None = Field(None, description="true/false renders --enable-prefix-caching / "
                                               "--no-enable-prefix-caching; unset: vLLM's default.")
    enforce_eager: bool = Field(False, description="--enforce-eager: no CUDA graphs (slower; for debugging).")
    speculative_config: SpeculativeConfig | None = Field(None, description="--speculative-config, rendered as the "
                                                         "JSON vLLM parses (method and num_speculative_tokens required).")
    extra: dict[ExtraFlag, Scalar | dict[str, JsonValue]] = Field(default={}, description="Other `vllm serve` flags without the dashes: "
        "`flag: value`; true passes a switch, false its --no- form. `validate` checks them against vLLM 0.33.0's "
        "option table. A JSON option takes a mapping (rendered as the JSON vLLM parses) or dotted keys "
        "(compilation-config.mode: 3), as vLLM defines them.", examples=[{"enable-chunked-prefill": True,
        "max-num-seqs": 12, "compilation-config": {"mode": 3}}])

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _headroom(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 0.95:
            raise ValueError(fixed(f"{value} is outside (0, 0.95]: unified memory needs headroom, 0.95 rebooted a "
                                   "Spark (field note 8)", "write a share up to 0.95, e.g. `gpu_memory_utilization: 0.8`"
                                   " (preflight's memory check tells what fits)"))
        return value


class BindMount(Model):
    """A host path mounted into the container (`docker run -v source:target[:ro]`)."""

    source: AbsPath = Field(description="The node's path (absolute; `~` is not expanded).", examples=["/srv/vocab"])
    target: AbsPath = Field(description="The path inside the container.", examples=["/vocab"])
    read_only: bool = Field(True, description="Mounted read-only unless false.")


Sha256 = Annotated[str, AfterValidator(lambda v: _sha256(v))]
Symbol = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.$@]{0,255}$")]


def _sha256(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(fixed(f"{value!r} is not a sha256 (64 lower-case hex digits)",
                               "`spark-deploy overlay hash RECIPE` prints each target's hash in the pinned image"))
    return value


class Overlay(BindMount):
    """A file mounted over the image's own: what it was written against, so preflight notices upstream moving."""

    base_sha256: Sha256 | None = Field(default=None, description="sha256 of the image's file at `target` when the "
                                       "patch was made; preflight fails when the pinned image's differs "
                                       "(`spark-deploy overlay hash RECIPE` prints it).")
    symbols: list[Symbol] = Field(default=[], description="For a shared object: names its dynamic symbol table must "
                                  "export (checked by preflight).")


class ExtraMount(BindMount):
    """Any other bind mount. Docker makes a missing source an empty directory: preflight checks it exists."""

    kind: Literal["file", "directory"] | None = Field(default=None, description="What the source must be on every "
                                                      "node; unset: whatever it is, the same on every node.")
    draft_vocab: bool = Field(default=False, description="true: this file is a speculative draft token list (token "
                              "ids): preflight checks its largest id is below the model's vocab_size and that the "
                              "model's tokenizer did not change under it since the last release.")


NOT_LAUNCH = {"preflight": True, "acceptance": True,  # what the digest leaves out: it does not shape the launch
              "mounts": {"overlays": {"__all__": {"base_sha256", "symbols"}}, "extra": {"__all__": {"kind", "draft_vocab"}}}}


class Mounts(Model):
    """Where the node's caches appear in the container, and more bind mounts."""

    hf_cache: AbsPath = Field(default="/cache/huggingface", description="Container path of the HF cache; the host "
                              "path is the node's hf_cache. Absolute: `~` would mean another user's home on a node.")
    jit_cache: AbsPath = Field(default="/jitcache", description="Container path of the JIT cache (VLLM_CACHE_ROOT).")
    overlays: list[Overlay] = Field([], description="Files mounted over the image's own; preflight checks each "
                                    "target exists in the image, its base hash, that a .py compiles with the image's "
                                    "Python, a .so's symbols, the same bytes on every node (field note 7).")
    extra: list[ExtraMount] = Field([], description="More bind mounts; preflight checks each source exists on every "
                                    "node.")

    @field_validator("extra")
    @classmethod
    def _one_draft_list(cls, extra: list) -> list:
        if sum(m.draft_vocab for m in extra) > 1:
            raise ValueError(fixed("more than one mount says draft_vocab: true",
                                   "mark only the draft token list vLLM reads"))
        return extra


class RestartPolicy(Model):
    """Bounded only: an endless restart loop hides a crash behind a healthy-looking container."""

    policy: Literal["no", "on-failure"] = Field("no", description="no, or on-failure with max_retries.")
    max_retries: int | None = Field(default=None, ge=1, le=10, description="1-10, only with on-failure.",
                                    examples=[3])

    @model_validator(mode="after")
    def _bounded(self) -> "RestartPolicy":
        if self.policy == "on-failure" and self.max_retries is None:
            raise ValueError(fixed("on-failure needs max_retries (1-10): an unbounded loop hides crashes",
                                   "add `max_retries: 3` under `restart:`"))
        if self.policy == "no" and self.max_retries is not None:
            raise ValueError(fixed("max_retries only goes with policy on-failure",
                                   "delete `max_retries:`, or write `policy: on-failure`"))
        return self


class DockerOptions(Model):
    """`docker run` options beyond what the plan sets itself."""

    gpus: Text | None = Field("all", description="--gpus: all, a count, or device=0,1.")
    ipc: Literal["host", "private", "shareable"] | None = Field("host", description="--ipc (host: the shared "
                                                                 "memory NCCL uses).")
    network: Literal["host"] = Field("host", description="Always host: NCCL and the API use the node's network.")
    shm_size: DockerSize | None = Field(default=None, description="Docker --shm-size, as Docker reads it: bytes, or a "
                                        "number with k, m, g (binary: 16g = 16GB = 16GiB).", examples=["16g", "16GB"])
    privileged: bool = Field(False, description="--privileged (not needed for RoCE on a Spark).")
    restart: RestartPolicy = Field(RestartPolicy(), description="Docker's restart policy, bounded.")

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"all|[0-9]+|device=[0-9,]+", value):
            raise ValueError(fixed(f"{value!r} is not a --gpus value", "write `gpus: all`, a count (`gpus: 1`) "
                                   "or devices (`gpus: device=0,1`)"))
        return value


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(fixed(f"not a regular expression: {exc}", regex_fix(exc))) from None
    return value


class LineExpectation(Model):
    """A line each listed node must print, e.g. the Mxfp4 MoE backend line naming B12X (field note 6)."""

    name: Name = Field(description="Names the check in messages.", examples=["moe-backend"])
    pattern: Text = Field(description="A regular expression; its first group (or the whole match) is the value "
                          "captured.", examples=["Using (\\S+) Mxfp4 MoE backend"])
    contains: Text | None = Field(None, description="Text the captured value must contain.", examples=["B12X"])
    nodes: Literal["all"] | list[NodeName] = Field("all", description="all, or a list of the inventory's node names.")

    _regex = field_validator("pattern")(classmethod(lambda cls, value: _check_regex(value)))


class IdenticalExpectation(Model):
    """A line every node prints that must read the same everywhere (field note 3)."""

    name: Name = Field(description="Names the check in messages.", examples=["cuda-graph-profile"])
    pattern: Text = Field(description="A regular expression; the matching line must read the same on every node.",
                          examples=["Profiling CUDA graph memory: .*"])

    _regex = field_validator("pattern")(classmethod(lambda cls, value: _check_regex(value)))


class Expectations(Model):
    """What every node's log must show once the model serves; `up` reads the logs to prove it."""

    lines: list[LineExpectation] = Field([], description="Lines each listed node must print.")
    identical: list[IdenticalExpectation] = Field([], description="Lines that must read the same on every node.")


class PreflightSettings(Model):
    """What preflight judges against. Nothing here shapes the launch, so it is not in the recipe digest."""

    # left free for the OS, Docker and sshd after vLLM takes gpu_memory_utilization x MemTotal (field note 8)
    memory_reserve_gib: float = Field(default=4.0, ge=0.5, le=64, description="GiB that must stay free for the OS, "
                                      "Docker and sshd after vLLM takes its share (field note 8).")
    # what a running vLLM holds beside its share on a GB10 (Python, CUDA context, NCCL, API server): field
    # note 8's 0.78 left ~2 GiB of ~116, i.e. ~20 GiB. earlyoom and the OOM killer see both.
    runtime_overhead_gib: float = Field(default=20.0, ge=0, le=64, description="GiB a running vLLM holds beside its "
                                        "share (Python, CUDA context, NCCL, the API server).")


class Recipe(Model):
    """What to run on the cluster: the image, the model, vLLM's arguments, and what the logs must show."""

    name: Name = Field(description="The deployment's name: containers, records and labels carry it.")
    description: Text | None = Field(None, description="Free text for people.")
    image: ImageSpec = Field(description="The image: where it came from and the ID that runs.")
    model: ModelSpec = Field(description="The model and its revision.")
    serve: ServeSpec = Field(ServeSpec(), description="The OpenAI-compatible API on the head.")
    vllm: VllmArgs = Field(VllmArgs(), description="vLLM's arguments: typed ones here, any other flag under extra.")
    env: dict[EnvName, Text] = Field(default={}, description="Environment of the container (not secrets).")
    secrets: list[EnvName] = Field(default=[], description="Names of variables read from this machine's "
                                   "environment and passed by file, never written in the recipe.")
    mounts: Mounts = Field(Mounts(), description="Container paths of the caches, and more bind mounts.")
    docker: DockerOptions = Field(DockerOptions(), description="`docker run` options.")
    expect: Expectations = Field(Expectations(), description="What the logs must show after start-up.")
    preflight: PreflightSettings = Field(PreflightSettings(), description="What preflight judges against "
                                         "(not in the recipe digest).")
    acceptance: AcceptanceSettings = Field(AcceptanceSettings(), description="The checks `up` and `accept` run "
                                           "against the API (docs/acceptance.md).")

    @field_validator("secrets")
    @classmethod
    def _unique(cls, secrets: list) -> list:
        if len(set(secrets)) != len(secrets):
            raise ValueError(fixed("secret names must be unique", "list each variable once under `secrets:`"))
        return secrets

    @property
    def served_name(self) -> str:
        return self.serve.served_model_name or self.model.repo

    def digest(self) -> str:
        """A short stable hash of everything that shapes the launch; labels carry it."""
        canonical = json.dumps(self.model_dump(mode="json", exclude=NOT_LAUNCH), sort_keys=True,
                               separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def recipe_problems(recipe: Recipe) -> list[tuple[tuple, str]]:
    """Typed vLLM values outside vLLM's table, and secrets written inline, as (location, message). A
    secret's value itself is never repeated back."""
    from .flag_table import table_for
    from .vllm_flags import typed_problems

    problems = typed_problems(recipe.vllm, OWNED_FLAGS, table_for(recipe.image.id))
    for key, value in recipe.env.items():
        if SECRET_NAME.search(key) or TOKEN_VALUE.match(value):
            problems.append((("env", key), fixed(f"{key} looks like a secret given as a literal value",
                                                  f"delete this line; export {key} in your shell and list its "
                                                  f"name under `secrets:` (`- {key}`)")))
    for flag, value in recipe.vllm.extra.items():
        text = json.dumps(value) if isinstance(value, dict) else value
        if isinstance(value, str) and TOKEN_VALUE.match(value) or isinstance(value, dict) and redact(text) != text:
            problems.append((("vllm", "extra", flag), fixed(f"--{flag} looks like a secret given as a literal value",
                                                             "delete it from the recipe; pass a credential as an "
                                                             "environment variable listed under `secrets:`")))
    for i, name in enumerate(recipe.secrets):
        if TOKEN_VALUE.match(name):
            problems.append((("secrets", i), fixed("this looks like a secret's value", "list the variable's name "
                                                   "(e.g. `- HF_TOKEN`) and export the value in your shell")))
    return problems
