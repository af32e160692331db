"""Constrained scalar types shared by the inventory and recipe models.

Every value here may end up as one argv token of a remote command. Rejecting control characters and
shapes Docker would split (':' in a bind path) at load time is what lets rendering stay a plain list.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Union

from pydantic import AfterValidator, Field

# C0, DEL and C1 (U+0080-U+009F: NEL, and CSI that terminals read as an escape sequence).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _text(value: str) -> str:
    if CONTROL.search(value):
        raise ValueError("must not contain control characters (newline, tab, NUL...)")
    return value


def _pattern(regex: str, what: str):
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


def _abs_path(value: str) -> str:
    _text(value)
    if not value.startswith("/"):
        fix = (" (`~` is not expanded: on a node it would be the SSH user's home, so write the full path, "
               "e.g. /home/USER/...)" if value.startswith("~") else "")
        raise ValueError(f"{value!r} must be an absolute path{fix}")
    if ":" in value or "," in value:
        raise ValueError(f"{value!r} must not contain ':' or ',' (Docker splits mount specs on them)")
    if "/../" in value + "/" or value.endswith("/.."):
        raise ValueError(f"{value!r} must not contain '..'")
    return value.rstrip("/") or "/"


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


Text = Annotated[str, AfterValidator(_text)]
Name = Annotated[str, AfterValidator(_pattern(r"[a-z0-9][a-z0-9._-]{0,62}", "a name (lower-case letters, digits, '.', '_', '-')"))]
NodeName = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "a node name (letters, digits, '.', '_', '-')"))]
Host = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}", "a host name or IP address"))]
IPAddress = Annotated[str, AfterValidator(_ip)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
EnvName = Annotated[str, AfterValidator(_pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name"))]
FlagName = Annotated[str, AfterValidator(_pattern(r"[a-z0-9][a-z0-9-]*(\.[A-Za-z0-9_-]+)*",
                                                  "a vLLM flag name without leading dashes (e.g. block-size, or "
                                                  "compilation-config.mode for one key of a JSON option)"))]
ImageId = Annotated[str, AfterValidator(_pattern(r"sha256:[0-9a-f]{64}", "an image ID (sha256: followed by 64 hex digits)"))]
ImageRef = Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}", "an image reference"))]
Port = Annotated[int, Field(ge=1, le=65535)]
Scalar = Union[bool, int, float, Text]

# Names that say "this holds a credential": such values belong under `secrets:`, never inline.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)
SECRET_FLAGS = frozenset({"api-key", "hf-token"})
# Values shaped like a credential (Hugging Face, OpenAI-style, GitHub tokens).
TOKEN_VALUE = re.compile(r"^(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_]{8,}")
_TOKEN_ANYWHERE = re.compile(r"(?<![A-Za-z0-9])(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_]{8,}")


def redact(text: str) -> str:
    """`text` with every credential-shaped substring replaced, so no error message repeats a secret."""
    return _TOKEN_ANYWHERE.sub("<redacted>", text)
