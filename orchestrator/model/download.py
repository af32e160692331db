"""Download a model snapshot ONCE, on one node, with huggingface_hub's own `snapshot_download`.

Where it runs: inside the recipe's pinned image (`docker run --rm` on the node, the HF cache bind-mounted).
On a Spark that image is vLLM's, which carries huggingface_hub already (vLLM depends on it), so nothing is
installed on the node, the client is the one vLLM reads the cache with, and the files land where they are
served from. The token reaches it through an env-file (0600, removed afterwards), never argv.

The program below is what runs there: it asks the Hub which commit a branch or tag names first, once, waiting
at most HUB_WAIT s (huggingface_hub alone falls back to the node's cache when the Hub cannot be reached, and
would pin a stale `refs/main` as if the Hub had said it), then downloads that commit; it retries a failing
file (a Hub 5xx, a dropped connection: the client resumes from its `.incomplete` with a Range request), and
prints ONE JSON line saying the commit, or which file failed and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..checks.pull_mark import PULL_MARK_SH
from ..transport.node import NodeConnection, NodeError

TRIES = 3
BACKOFF = 2.0  # seconds; a Hub 5xx is often a moment's overload
IDLE = 900.0  # seconds without a byte of output (tqdm redraws while bytes arrive): the download is stuck
HUB_WAIT = 15.0  # seconds the Hub's answer to "which commit does this branch name" is waited for (each of
# connect and read): a closed port answers at once, dropped packets would otherwise hold the pull for minutes

# python3 -c PROGRAM REPO REVISION CACHE TRIES BACKOFF [HUB_WAIT] (seconds before retry n: BACKOFF * n)
PROGRAM = r'''
import json, os, re, sys, time
repo, rev, cache, tries, backoff = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
branch = rev
hub_wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
def say(**kw):
    print("\x1eSDPULL " + json.dumps(kw), flush=True)
try:
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError, HfHubHTTPError
except ImportError as exc:
    say(ok=False, kind="no-client", message=f"huggingface_hub is not importable here: {exc}"); sys.exit(3)
if not re.fullmatch(r"[0-9a-f]{40}", rev):  # the Hub says which commit it names, or nothing is downloaded
    try:
        rev = HfApi().model_info(repo, revision=rev, timeout=hub_wait).sha
    except (GatedRepoError, RevisionNotFoundError, RepositoryNotFoundError):
        pass  # said below, by the download's own request, in the words used for it
    except HfHubHTTPError as exc:
        say(ok=False, kind="hub", status=getattr(getattr(exc, "response", None), "status_code", None),
            message=str(exc).splitlines()[0]); sys.exit(1)
    except Exception as exc:
        say(ok=False, kind="hub", message=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no answer'}")
        sys.exit(1)
for attempt in range(1, tries + 1):
    try:
        path = snapshot_download(repo, revision=rev, cache_dir=cache)
        if branch != rev:  # downloaded by commit: the ref the Hub resolved is written as the client would have
            refs = os.path.join(cache, "models--" + repo.replace("/", "--"), "refs")
            os.makedirs(os.path.dirname(os.path.join(refs, branch)), exist_ok=True)
            with open(os.path.join(refs, branch), "w") as ref:
                ref.write(rev)
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


# "$1" the repo's dir in the HF cache, then the download's argv: run it with this pull's mark beside the files
# it writes (checks/pull_mark.py), so `up`/`rollback` meeting its .incomplete files name it and wait.
MARKED = PULL_MARK_SH + r'''
root=$1; shift
mkdir -p -- "$root" && mark=$(pull_mark "$root") || exit
trap 'rm -f -- "$mark"' EXIT
"$@"'''


class DownloadFailed(NodeError):
    """The download on the node failed; the message names the file or the reason (gated, revision...)."""


@dataclass(frozen=True)
class Downloaded:
    commit: str
    tries: int


def parse_outcome(node: str, repo: str, stdout: str, *, revision: str = "", endpoint: str = "") -> Downloaded:
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
    if kind == "hub":
        where = endpoint or "https://huggingface.co"
        raise DownloadFailed(node, f"the Hub at {where} did not say which commit {repo}@{revision or '?'} names "
                             f"({message}; waited at most {HUB_WAIT:g} s): nothing was downloaded and the recipe is "
                             f"unchanged. Check HF_ENDPOINT and {node}'s route to the Hub, or pass --offline to take "
                             f"the commit {node}'s cache names")
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
            str(BACKOFF), str(HUB_WAIT)]
    try:
        # no overall deadline (hundreds of GB); the client's progress bars on stderr are the sign of life
        root = f"{hf_cache}/hub/models--{repo.replace('/', '--')}"
        result = conn.run(["bash", "-c", MARKED, "sdpull", root, *argv], timeout=None, idle_timeout=IDLE)
    finally:
        if env_file:
            conn.run(["rm", "-f", "--", env_file], timeout=30, shield=True)
    return parse_outcome(conn.name, repo, result.stdout + result.stderr, revision=revision, endpoint=endpoint or "")
