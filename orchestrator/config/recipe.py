"""The recipe: what to run (image, model, vLLM arguments) and what its logs must show."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .acceptance import AcceptanceSettings
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
)

MOE_BACKENDS = (
    "auto", "triton", "batched_triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass",
    "flashinfer_cutedsl", "flashinfer_b12x", "b12x", "marlin", "emulation",
)
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")

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


def _not_owned(flag: str) -> str:
    """A `vllm.extra` key check: it runs per key, so the error points at that key's own line."""
    if flag in OWNED_FLAGS:
        raise ValueError(f"--{flag} is set by {OWNED_FLAGS[flag]}, not by vllm.extra")
    alias = _owned_alias(flag)
    if alias is not None:
        raise ValueError(f"--{flag} abbreviates or negates --{alias}, which is set by {OWNED_FLAGS[alias]}: "
                         "set it there, not in vllm.extra")
    if flag in SECRET_FLAGS:
        raise ValueError(f"--{flag} carries a secret: list its variable under `secrets:` instead")
    return flag


ExtraFlag = Annotated[FlagName, AfterValidator(_not_owned)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ImageSpec(Model):
    """`ref` is provenance; `id` is what runs. A RepoDigest does not survive `docker load` (field note 1)."""

    ref: ImageRef
    id: ImageId | None = None
    serve_entrypoint: bool = True  # True: the image's entrypoint already is `vllm serve`


class ModelSpec(Model):
    repo: Text = Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:,]+)$")
    revision: Text = Field(default="main", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


class ServeSpec(Model):
    served_model_name: Name | None = None
    host: Text = Field(default="0.0.0.0", pattern=r"^[0-9A-Fa-f.:]+$")
    port: Port = 8000


class SpeculativeConfig(BaseModel):
    """vLLM's own schema validates the rest; we insist on the two keys we reason about."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    method: Text
    num_speculative_tokens: int = Field(gt=0, le=32)

    @model_validator(mode="after")
    def _scalars_only(self) -> "SpeculativeConfig":
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and CONTROL.search(value)):
                raise ValueError(f"speculative_config.{key} must be a plain scalar")
        return self


class VllmArgs(Model):
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    master_port: Port = 29501
    distributed_executor_backend: Literal["mp", "uni", "external_launcher"] = "mp"
    moe_backend: Literal[MOE_BACKENDS] | None = None  # type: ignore[valid-type]
    kv_cache_dtype: Literal[KV_CACHE_DTYPES] | None = None  # type: ignore[valid-type]
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = Field(default=None, ge=16)
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    speculative_config: SpeculativeConfig | None = None
    extra: dict[ExtraFlag, Scalar] = {}

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _headroom(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 0.95:
            raise ValueError(f"{value} is outside (0, 0.95]: unified memory needs headroom, 0.95 rebooted a Spark (field note 8)")
        return value


class BindMount(Model):
    source: AbsPath
    target: AbsPath
    read_only: bool = True


class Mounts(Model):
    hf_cache: AbsPath = "/cache/huggingface"  # container path; the host path is the node's hf_cache
    jit_cache: AbsPath = "/jitcache"  # container path; VLLM_CACHE_ROOT points here
    overlays: list[BindMount] = []  # files mounted over the image; preflight checks each target exists
    extra: list[BindMount] = []


class RestartPolicy(Model):
    """Bounded only: an endless restart loop hides a crash behind a healthy-looking container."""

    policy: Literal["no", "on-failure"] = "no"
    max_retries: int | None = Field(default=None, ge=1, le=10)

    @model_validator(mode="after")
    def _bounded(self) -> "RestartPolicy":
        if self.policy == "on-failure" and self.max_retries is None:
            raise ValueError("on-failure needs max_retries (1-10): an unbounded loop hides crashes")
        if self.policy == "no" and self.max_retries is not None:
            raise ValueError("max_retries only goes with policy on-failure")
        return self


class DockerOptions(Model):
    gpus: Text | None = "all"
    ipc: Literal["host", "private", "shareable"] | None = "host"
    network: Literal["host"] = "host"
    shm_size: Text | None = Field(default=None, pattern=r"^[0-9]+[bkmgBKMG]?$")
    privileged: bool = False
    restart: RestartPolicy = RestartPolicy()

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"all|[0-9]+|device=[0-9,]+", value):
            raise ValueError(f"{value!r} is not a --gpus value (all, a count, or device=0,1)")
        return value


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return value


class LineExpectation(Model):
    """A line each listed node must print, e.g. the Mxfp4 MoE backend line naming B12X (field note 6)."""

    name: Name
    pattern: Text
    contains: Text | None = None
    nodes: Literal["all"] | list[NodeName] = "all"

    _regex = field_validator("pattern")(classmethod(lambda cls, value: _check_regex(value)))


class IdenticalExpectation(Model):
    """A line every node prints that must read the same everywhere (field note 3)."""

    name: Name
    pattern: Text

    _regex = field_validator("pattern")(classmethod(lambda cls, value: _check_regex(value)))


class Expectations(Model):
    lines: list[LineExpectation] = []
    identical: list[IdenticalExpectation] = []


class PreflightSettings(Model):
    """What preflight judges against. Nothing here shapes the launch, so it is not in the recipe digest."""

    # left free for the OS, Docker and sshd after vLLM takes gpu_memory_utilization x MemTotal (field note 8)
    memory_reserve_gib: float = Field(default=4.0, ge=0.5, le=64)
    # what a running vLLM holds beside its share on a GB10 (Python, CUDA context, NCCL, API server): field
    # note 8's 0.78 left ~2 GiB of ~116, i.e. ~20 GiB. earlyoom and the OOM killer see both.
    runtime_overhead_gib: float = Field(default=20.0, ge=0, le=64)


class Recipe(Model):
    name: Name
    description: Text | None = None
    image: ImageSpec
    model: ModelSpec
    serve: ServeSpec = ServeSpec()
    vllm: VllmArgs = VllmArgs()
    env: dict[EnvName, Text] = {}
    secrets: list[EnvName] = []
    mounts: Mounts = Mounts()
    docker: DockerOptions = DockerOptions()
    expect: Expectations = Expectations()
    preflight: PreflightSettings = PreflightSettings()
    acceptance: AcceptanceSettings = AcceptanceSettings()

    @field_validator("secrets")
    @classmethod
    def _unique(cls, secrets: list) -> list:
        if len(set(secrets)) != len(secrets):
            raise ValueError("secret names must be unique")
        return secrets

    @property
    def served_name(self) -> str:
        return self.serve.served_model_name or self.model.repo

    def digest(self) -> str:
        """A short stable hash of everything that shapes the launch; labels carry it."""
        canonical = json.dumps(self.model_dump(mode="json", exclude={"preflight", "acceptance"}), sort_keys=True,
                               separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def recipe_problems(recipe: Recipe) -> list[tuple[tuple, str]]:
    """Secrets written inline, as (location, message). The value itself is never repeated back."""
    problems = []
    for key, value in recipe.env.items():
        if SECRET_NAME.search(key) or TOKEN_VALUE.match(value):
            problems.append((("env", key), f"{key} looks like a secret given as a literal value: "
                                            "remove it and list its name under `secrets:`"))
    for flag, value in recipe.vllm.extra.items():
        if isinstance(value, str) and TOKEN_VALUE.match(value):
            problems.append((("vllm", "extra", flag), f"--{flag} looks like a secret given as a literal value"))
    for i, name in enumerate(recipe.secrets):
        if TOKEN_VALUE.match(name):
            problems.append((("secrets", i), "this looks like a secret's value: list the variable's name (e.g. HF_TOKEN)"))
    return problems
