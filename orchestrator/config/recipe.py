"""The recipe: what to run (image, model, vLLM arguments) and what its logs must show."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

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
    repo: Text = Field(description="Hugging Face repo id (org/name) or an absolute path inside the container.",
                       examples=["Qwen/Qwen3-0.6B"], pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:,]+)$")
    revision: Text = Field(default="main", description="Branch, tag or commit of the model repo.", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


class ServeSpec(Model):
    served_model_name: Name | None = Field(default=None, description="The name clients ask for; default: model.repo.")
    host: Text = Field(default="0.0.0.0", pattern=r"^[0-9A-Fa-f.:]+$")
    port: Port = Field(default=8000, description="The OpenAI-compatible API's port on the head.")


class SpeculativeConfig(BaseModel):
    """vLLM's own schema validates the rest; we insist on the two keys we reason about."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    method: Text
    num_speculative_tokens: int = Field(gt=0, le=32)

    @model_validator(mode="after")
    def _scalars_only(self) -> "SpeculativeConfig":
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and CONTROL.search(value)):
                raise ValueError(fixed(f"speculative_config.{key} must be a plain scalar",
                                       f"write `{key}:` with text, a number or true/false on its line"))
        return self


class VllmArgs(Model):
    tensor_parallel_size: int = Field(default=1, ge=1, le=64, description="GPUs one model copy spans; with "
                                      "pipeline_parallel_size it must equal the inventory's GPU count.")
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    master_port: Port = Field(default=29501, description="torch.distributed rendezvous port on the head.")
    distributed_executor_backend: Literal["mp", "uni", "external_launcher"] = "mp"
    moe_backend: Literal[MOE_BACKENDS] | None = None  # type: ignore[valid-type]
    kv_cache_dtype: Literal[KV_CACHE_DTYPES] | None = None  # type: ignore[valid-type]
    gpu_memory_utilization: float | None = Field(default=None, description="Share of unified memory vLLM takes, "
                                                 "(0, 0.95]: a Spark needs headroom for the OS.")
    max_model_len: MaxModelLen = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    speculative_config: SpeculativeConfig | None = None
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
    source: AbsPath
    target: AbsPath
    read_only: bool = True


class Mounts(Model):
    hf_cache: AbsPath = Field(default="/cache/huggingface", description="Container path of the HF cache; the host "
                              "path is the node's hf_cache. Absolute: `~` would mean another user's home on a node.")
    jit_cache: AbsPath = Field(default="/jitcache", description="Container path of the JIT cache (VLLM_CACHE_ROOT).")
    overlays: list[BindMount] = []  # files mounted over the image; preflight checks each target exists
    extra: list[BindMount] = []


class RestartPolicy(Model):
    """Bounded only: an endless restart loop hides a crash behind a healthy-looking container."""

    policy: Literal["no", "on-failure"] = "no"
    max_retries: int | None = Field(default=None, ge=1, le=10)

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
    gpus: Text | None = "all"
    ipc: Literal["host", "private", "shareable"] | None = "host"
    network: Literal["host"] = "host"
    shm_size: DockerSize | None = Field(default=None, description="Docker --shm-size, as Docker reads it: bytes, or a "
                                        "number with k, m, g (binary: 16g = 16GB = 16GiB).", examples=["16g", "16GB"])
    privileged: bool = False
    restart: RestartPolicy = RestartPolicy()

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
    name: Name = Field(description="The deployment's name: containers, records and labels carry it.")
    description: Text | None = None
    image: ImageSpec
    model: ModelSpec
    serve: ServeSpec = ServeSpec()
    vllm: VllmArgs = VllmArgs()
    env: dict[EnvName, Text] = Field(default={}, description="Environment of the container (not secrets).")
    secrets: list[EnvName] = Field(default=[], description="Names of variables read from this machine's "
                                   "environment and passed by file, never written in the recipe.")
    mounts: Mounts = Mounts()
    docker: DockerOptions = DockerOptions()
    expect: Expectations = Expectations()
    preflight: PreflightSettings = PreflightSettings()
    acceptance: AcceptanceSettings = AcceptanceSettings()

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
        canonical = json.dumps(self.model_dump(mode="json", exclude={"preflight", "acceptance"}), sort_keys=True,
                               separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def recipe_problems(recipe: Recipe) -> list[tuple[tuple, str]]:
    """Secrets written inline, as (location, message). The value itself is never repeated back."""
    problems = []
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
