"""A model's safetensors headers and config.json read from the Hub, never its weights (`fit` answers
before a download).

huggingface_hub does the reading: `parse_safetensors_file_metadata` asks each shard for a byte range (its
first 100,001 bytes, and the rest of the header when it is longer), so a 160 GB checkpoint costs about
100 KB a shard. HF_ENDPOINT and HF_TOKEN are read from the environment as huggingface_hub reads them; the
token is sent to the Hub only, never printed. The branch or tag is resolved to a commit once, and every file
is read at that commit (a branch that moves mid-read cannot mix two models).
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from huggingface_hub import HfApi
from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError,
                                    SafetensorsParsingError)
from huggingface_hub.utils import disable_progress_bars

from .safetensors_headers import Headers

try:  # huggingface_hub 2.x talks over httpx2, 1.x over httpx: both transports' errors mean "no answer"
    from httpx2 import HTTPError as _Http2Error
    TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, _Http2Error)
except ImportError:
    TRANSPORT_ERRORS = (httpx.HTTPError,)

HUB_TIMEOUT = 15.0  # seconds to wait for each answer (model pull's download waits as long for the Hub)
DEFAULT_ENDPOINT = "https://huggingface.co"


class HubError(Exception):
    """The Hub did not give the headers (unreachable, gated, no such repo or revision, not safetensors)."""


@dataclass(frozen=True)
class HubModel:
    headers: Headers  # node "the Hub", snapshot "ENDPOINT/REPO@COMMIT"
    commit: str
    endpoint: str


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def _tensors(meta) -> dict[str, dict]:
    """huggingface_hub's SafetensorsFileMetadata -> the header dict checks/model_fit.py sizes."""
    return {name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
            for name, t in meta.tensors.items()}


def read_from_hub(repo: str, revision: str, timeout: float = HUB_TIMEOUT) -> HubModel:
    """config.json and every *.safetensors header of repo@revision, by range requests (HubError says why not)."""
    where = endpoint()
    api = HfApi(endpoint=where)  # token: huggingface_hub's own (HF_TOKEN, else its saved login)
    disable_progress_bars()
    try:
        info = api.model_info(repo, revision=revision, timeout=timeout)
        commit = info.sha or revision
        shards = sorted(s.rfilename for s in info.siblings or [] if s.rfilename.endswith(".safetensors"))
        if not shards:
            raise HubError(f"{repo}@{commit} on the Hub at {where} holds no *.safetensors file: nothing to size")
        with ThreadPoolExecutor(min(8, len(shards)), thread_name_prefix="hub-headers") as pool:
            metas = list(pool.map(lambda f: api.parse_safetensors_file_metadata(
                repo, f, revision=commit, timeout=timeout), shards))
        config = {}
        if any(s.rfilename == "config.json" for s in info.siblings or []):
            with tempfile.TemporaryDirectory(prefix="sd-fit-") as tmp:  # not the user's HF cache
                path = api.hf_hub_download(repo, "config.json", revision=commit, cache_dir=tmp, etag_timeout=timeout)
                with open(path, encoding="utf-8") as handle:
                    config = json.load(handle)
    except GatedRepoError:
        raise HubError(f"{repo} is gated and the Hub at {where} refused this token (or none was given): export "
                       "HF_TOKEN with a token that was granted access") from None
    except RepositoryNotFoundError:
        raise HubError(f"the Hub at {where} has no repo {repo} (or it is private: export HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise HubError(f"the Hub at {where} has no revision {revision} of {repo}") from None
    except SafetensorsParsingError as exc:
        raise HubError(f"{repo}@{revision}: not safetensors: {exc}") from None
    except ValueError as exc:
        raise HubError(f"{repo}@{revision}: config.json is not JSON: {exc}") from None
    except (HfHubHTTPError, *TRANSPORT_ERRORS, OSError) as exc:
        raise HubError(f"the Hub at {where} did not give the headers of {repo}@{revision} "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else 'no answer'}; "
                       f"waited at most {timeout:g} s per answer)") from None
    headers = {name: _tensors(meta) for name, meta in zip(shards, metas)}
    return HubModel(Headers("the Hub", f"{where}/{repo}@{commit}", config, headers, 0), commit, where)
