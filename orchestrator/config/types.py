"""Constrained scalar types shared by the inventory and recipe models.

Every value here may end up as one argv token of a remote command. Rejecting control characters and
shapes Docker would split (':' in a bind path) at load time is what lets rendering stay a plain list.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Union

from pydantic import AfterValidator, Field

from .hints import fixed

# C0, DEL and C1 (U+0080-U+009F: NEL, and CSI that terminals read as an escape sequence).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _text(value: str) -> str:
    if CONTROL.search(value):
        raise ValueError(fixed("must not contain control characters (newline, tab, NUL...)",
                               f"write it without them: {CONTROL.sub('', value)!r}"))
    return value


def _pattern(regex: str, what: str, fix: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(fixed(f"{value!r} is not {what}", fix))
        return value

    return check


def _abs_path(value: str) -> str:
    _text(value)
    if value.startswith("~"):
        raise ValueError(fixed(f"{value!r} must be an absolute path (`~` is not expanded: on a node it would be "
                               "the SSH user's home)", "write the full path: /home/" + (f"USER{value[1:]}" if value[:2] in ("~", "~/") else value[1:])))
    if not value.startswith("/"):
        raise ValueError(fixed(f"{value!r} must be an absolute path", f"start it at the root: /{value}"))
    if ":" in value or "," in value:
        mode = re.search(r"[:,](ro|rw|z|Z|r?shared|r?slave|r?private)$", value)
        fix = (f"write the path alone: {value[:mode.start()]}" if mode else
               "use a path without them (a symlink without ':' or ',' to it works)")
        raise ValueError(fixed(f"{value!r} must not contain ':' or ',' (Docker splits mount specs on them)", fix))
    if "/../" in value + "/" or value.endswith("/.."):
        raise ValueError(fixed(f"{value!r} must not contain '..'", f"write the path it means: {posixpath.normpath(value)}"))
    return value.rstrip("/") or "/"


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(fixed(f"{value!r} is not an IP address", "write the node's address on the fabric, e.g. "
                               "192.168.100.11 (`ip -4 addr` on the node shows it)")) from None


Text = Annotated[str, AfterValidator(_text)]
_NAME = "lower-case letters, digits, '.', '_', '-'"
Name = Annotated[str, AfterValidator(_pattern(r"[a-z0-9][a-z0-9._-]{0,62}", f"a name ({_NAME})",
                                              f"write it with {_NAME} only, starting with a letter or digit (e.g. my-model)"))]
NodeName = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "a node name (letters, digits, '.', '_', '-')",
                                                  "write it with letters, digits, '.', '_', '-' only (e.g. spark-1)"))]
Host = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}", "a host name or IP address",
                                              "write the host name or address ssh reaches it at (e.g. 10.0.0.11)"))]
IPAddress = Annotated[str, AfterValidator(_ip)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
EnvName = Annotated[str, AfterValidator(_pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name",
                                                 "write letters, digits and '_' only, not starting with a digit (e.g. HF_HOME)"))]
FlagName = Annotated[str, AfterValidator(_pattern(r"[a-z0-9][a-z0-9-]*(\.[A-Za-z0-9_-]+)*",
                                                  "a vLLM flag name",
                                                  "write it as `vllm serve --help=all` spells it, without the leading "
                                                  "dashes (block-size; compilation-config.mode for one key of a JSON option)"))]
ImageId = Annotated[str, AfterValidator(_pattern(r"sha256:[0-9a-f]{64}", "an image ID (sha256: followed by 64 hex digits)",
                                                 "run `spark-deploy pin RECIPE`, which writes the ID a node holds "
                                                 "(or `docker image inspect --format '{{.Id}}' REF` on a node)"))]
ImageRef = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}", "an image reference",
                                                  "write it as `docker pull` takes it (e.g. vllm/vllm-openai:v0.33.0)"))]
Port = Annotated[int, Field(ge=1, le=65535)]
Scalar = Union[bool, int, float, Text]

# Names that say "this holds a credential": such values belong under `secrets:`, never inline.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)
# vLLM flags that carry a credential, and the environment variable that carries it instead.
SECRET_FLAGS = {"api-key": "VLLM_API_KEY", "hf-token": "HF_TOKEN"}
# Values shaped like a credential (Hugging Face, OpenAI-style, GitHub tokens).
TOKEN_VALUE = re.compile(r"^(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_]{8,}")
_TOKEN_ANYWHERE = re.compile(r"(?<![A-Za-z0-9])(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_]{8,}")


def redact(text: str) -> str:
    """`text` with every credential-shaped substring replaced, so no error message repeats a secret."""
    return _TOKEN_ANYWHERE.sub("<redacted>", text)
