"""Download a model snapshot ONCE, on one node, with huggingface_hub's own `snapshot_download`.

Where it runs: inside the recipe's pinned image (`docker run --rm` on the node, the HF cache bind-mounted).
On a Spark that image is vLLM's, which carries huggingface_hub already (vLLM depends on it), so nothing is
installed on the node, the client is the one vLLM reads the cache with, and the files land where they are
served from. The token reaches it through an env-file (0600, removed afterwards), never argv.

The program below is what runs there: it retries a failing file (a Hub 5xx, a dropped connection: the
client resumes from its `.incomplete` with a Range request), and prints ONE JSON line saying the commit,
or which file failed and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..transport.node import NodeConnection, NodeError

TRIES = 3
BACKOFF = 2.0  # seconds; a Hub 5xx is often a moment's overload
IDLE = 900.0  # seconds without a byte of output (tqdm redraws while bytes arrive): the download is stuck

# python3 -c PROGRAM REPO REVISION CACHE TRIES BACKOFF (seconds before retry n: BACKOFF * n)
PROGRAM = r'''
import json, re, sys, time
repo, rev, cache, tries, backoff = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
def say(**kw):
    print("\x1eSDPULL " + json.dumps(kw), flush=True)
try:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError, HfHubHTTPError
except ImportError as exc:
    say(ok=False, kind="no-client", message=f"huggingface_hub is not importable here: {exc}"); sys.exit(3)
for attempt in range(1, tries + 1):
    try:
        path = snapshot_download(repo, revision=rev, cache_dir=cache)
        say(ok=True, commit=path.rstrip("/").rsplit("/", 1)[-1], tries=attempt); sys.exit(0)
    except GatedRepoError as exc:
        say(ok=False, kind="gated", message=str(exc).splitlines()[-1]); sys.exit(2)
    except RevisionNotFoundError as exc:
        say(ok=False, kind="revision", message=str(exc).splitlines()[-1]); sys.exit(2)
    except RepositoryNotFoundError as exc:
        say(ok=False, kind="repo", message=str(exc).splitlines()[-1]); sys.exit(2)
    except (HfHubHTTPError, OSError) as exc:
        url = str(getattr(getattr(exc, "response", None), "url", "") or "")
        m = re.search(r"/resolve/[^/]+/(.+)$", url)
        last = dict(ok=False, kind="http", file=m.group(1) if m else "", tries=attempt,
                    status=getattr(getattr(exc, "response", None), "status_code", None),
                    message=str(exc).splitlines()[0])
        if attempt < tries:
            time.sleep(backoff * attempt)
say(**last); sys.exit(1)
'''


class DownloadFailed(NodeError):
    """The download on the node failed; the message names the file or the reason (gated, revision...)."""


@dataclass(frozen=True)
class Downloaded:
    commit: str
    tries: int


def parse_outcome(node: str, repo: str, stdout: str) -> Downloaded:
    """Pure: the program's JSON line -> Downloaded, or DownloadFailed in words."""
    # split("\n"), not splitlines(): \x1e is a line boundary to splitlines
    lines = [ln.split(" ", 1)[1] for ln in stdout.split("\n") if ln.startswith("\x1eSDPULL ")]
    if not lines:
        raise DownloadFailed(node, f"the download of {repo} printed no outcome: {stdout.strip()[-300:]}")
    try:
        said = json.loads(lines[-1])
    except (ValueError, RecursionError):
        said = None
    if not isinstance(said, dict):
        raise DownloadFailed(node, f"the download of {repo} printed an outcome that is not a JSON object: "
                             f"{lines[-1][:200]!r}")
    if said.get("ok"):
        commit, tries = said.get("commit"), said.get("tries", 1)
        if not isinstance(commit, str) or not commit:
            raise DownloadFailed(node, f"the download of {repo} said ok without a commit: {lines[-1][:200]!r}")
        return Downloaded(commit, tries if isinstance(tries, int) and not isinstance(tries, bool) else 1)
    kind, message = said.get("kind"), str(said.get("message", ""))
    if kind == "gated":
        raise DownloadFailed(node, f"{repo} is gated and the Hub refused this token (or none was given): export "
                             "HF_TOKEN with access to it (it is passed through a 0600 env-file, never argv). "
                             "Nothing was downloaded")
    if kind in ("revision", "repo"):
        raise DownloadFailed(node, f"{repo}: {message}")
    if kind == "no-client":
        raise DownloadFailed(node, f"{message}: the pinned image must carry huggingface_hub (vLLM's does)")
    where = f"file {said['file']}" if said.get("file") else "the file listing"
    raise DownloadFailed(node, f"downloading {repo}: {where} failed {said.get('tries')} times "
                         f"(last: {message}); what arrived is kept and a rerun resumes it")


def download_on(conn: NodeConnection, *, image_id: str, hf_cache: str, repo: str, revision: str,
                endpoint: str | None, token: str | None, uid: str) -> Downloaded:
    """Run the program in the pinned image on this node; the cache is the node's HF cache, mounted at the
    same path, written as the login user (`uid`, "uid:gid") so later copies can write beside it."""
    env_file = ""
    if token is not None:
        env_file = f"{hf_cache}/.spark-deploy-pull.env"
        conn.put_secret(env_file, f"HF_TOKEN={token}\n")
    argv = ["docker", "run", "--rm", "--network", "host", "--user", uid, "-v", f"{hf_cache}:{hf_cache}",
            "-e", "HF_HUB_DISABLE_TELEMETRY=1", "-e", "HOME=/tmp",
            "-e", "HF_HOME=/tmp/hf",  # the client's own state in the container; the cache is cache_dir
            *(["-e", f"HF_ENDPOINT={endpoint}"] if endpoint else []), *(["--env-file", env_file] if env_file else []),
            "--entrypoint", "python3", image_id, "-c", PROGRAM, repo, revision, f"{hf_cache}/hub", str(TRIES),
            str(BACKOFF)]
    try:
        # no overall deadline (hundreds of GB); the client's progress bars on stderr are the sign of life
        result = conn.run(argv, timeout=None, idle_timeout=IDLE)
    finally:
        if env_file:
            conn.run(["rm", "-f", "--", env_file], timeout=30, shield=True)
    return parse_outcome(conn.name, repo, result.stdout + result.stderr)
