"""`up`: lock-free v1 of the sequence — connect, preflight, image, head, LISTEN, peers, ready, log checks.

Every step is a reported phase. Any failure (or Ctrl-C) removes every container this run started, peers
first, and raises DeployFailed naming the phase, the node and the cause.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..checks import basics as quick
from ..config.load import Deployment
from ..docker_cli import image_sync as sync
from ..docker_cli.containers import inspect_container
from ..render.launch import LABEL_HASH, NodeLaunch, render_plan
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection, NodeError
from ..http_api.endpoint import Endpoint
from .expectations import ExpectationResult, evaluate
from .report import Reporter
from .teardown import ours, remove_ranked
from .waits import wait_until
from .watch import FailureSeen, Monitor

SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+\d+% Completed \| (\d+)/(\d+)")


class DeployFailed(Exception):
    def __init__(self, phase: str | None, message: str):
        self.phase = phase
        super().__init__(f"during {phase or 'start'}: {message}")


class UnpinnedImage(Exception):
    """The recipe names no verified image ID (bad input, exit 2)."""


@dataclass
class UpOptions:
    force: bool = False
    keep_on_failure: bool = False
    replace_image: bool = False  # --sync: replace a different image held under the same reference
    listen_timeout: float = 600.0
    ready_timeout: float = 5400.0  # 167 GB over NFS took 69 minutes to serve (field note 13)
    expect_timeout: float = 60.0
    poll: float = 0.05  # LISTEN probe interval: one short SSH exec each


@dataclass
class UpResult:
    endpoint: str
    model: str
    already_serving: bool = False
    expectations: list[ExpectationResult] = field(default_factory=list)
    sample: str = ""


def up(dep: Deployment, reporter: Reporter, opts: UpOptions = UpOptions()) -> UpResult:
    recipe, inventory = dep.recipe, dep.inventory
    if recipe.image.id is None:
        raise UnpinnedImage(f"{dep.recipe_path}: image.id is not set: pin the verified image ID "
                            "(`docker image inspect -f '{{.Id}}' REF` on the node that has it)")
    plan = render_plan(dep)
    head = inventory.ranked[0]
    endpoint = Endpoint(head.address, recipe.serve.port)
    cluster = Cluster(inventory)
    try:
        with reporter.phase("connect", f"{len(plan)} node(s), host keys verified"):
            try:
                cluster.open()
            except GroupError as exc:
                raise DeployFailed("connect", str(exc)) from None
        look = _preflight(cluster, dep, plan, reporter)
        existing = _existing(cluster, dep, plan, endpoint, reporter, opts, look)
        if existing is not None:
            return existing
        _ports(cluster, dep, plan, reporter, look)
        _image(cluster, dep, reporter, opts, look)
        try:
            _secrets(cluster, dep, plan, reporter)
            return _launch(cluster, dep, plan, endpoint, reporter, opts)
        finally:
            _forget_secrets(cluster, plan)
    except KeyboardInterrupt:
        raise DeployFailed(reporter.current, "interrupted (Ctrl-C) before any container was started") from None
    finally:
        cluster.close()


def _phase_guard(reporter: Reporter, fn, *args):
    try:
        return fn(*args)
    except GroupError as exc:
        raise DeployFailed(reporter.current, str(exc)) from None
    except NodeError as exc:
        raise DeployFailed(reporter.current, str(exc)) from None


def _existing(cluster: Cluster, dep: Deployment, plan: list[NodeLaunch], endpoint: Endpoint, reporter: Reporter,
              opts: UpOptions, look: "Look") -> UpResult | None:
    """Already serving this exact recipe on every rank: say so and change nothing. Otherwise clear ours."""
    recipe = dep.recipe
    with reporter.phase("current state"):
        found = look.found
        if not any(found.values()):
            reporter.note("no container of this recipe on any node")
            return None
        states = {}
        for launch in plan:
            conn = cluster[launch.node.name]
            present = launch.container in found.get(conn.name, [])
            states[conn.name] = _phase_guard(reporter, inspect_container, conn, launch.container) if present else None
        running = all(s is not None and s.running for s in states.values())
        same = all(s is not None and s.labels.get(LABEL_HASH) == recipe.digest() for s in states.values())
        if running and same and not opts.force and endpoint.healthy():
            reporter.note(f"{recipe.name} ({recipe.digest()}) is already serving at {endpoint.url} on every rank: "
                          "nothing changed (--force redeploys)")
            return UpResult(endpoint.url, recipe.served_name, already_serving=True)
        if running and not same and not opts.force:
            hashes = sorted({s.labels.get(LABEL_HASH) for s in states.values()})
            raise DeployFailed("current state", f"{recipe.name} is running with another configuration (hash "
                               f"{', '.join(hashes)}; this recipe {recipe.digest()}): use --force to replace it")
        shown = ", ".join(f"{n}: {s.status if s else 'missing'}" for n, s in states.items())
        reason = "--force" if opts.force else f"not a healthy deployment ({shown})"
        reporter.note(f"replacing earlier containers of this recipe: {reason}")
        _phase_guard(reporter, remove_ranked, cluster, found)
        look.removed = True
    return None


def _judge(phase: str, results: list[quick.CheckResult], reporter: Reporter) -> None:
    for result in results:
        reporter.note(f"{result.name}: {result.status} — " + "; ".join(f"{k}: {v}" for k, v in result.evidence.items()))
    failed = [r for r in results if not r.ok]
    if failed:
        raise DeployFailed(phase, "; ".join(
            f"{r.name} failed ({'; '.join(f'{k}: {v}' for k, v in r.evidence.items())}). {r.fix}" for r in failed))


@dataclass
class Look:
    """What preflight saw on every node, read in parallel before anything is changed."""

    found: dict[str, list[str]]  # this recipe's containers per node
    ports: quick.CheckResult
    image: sync.SyncPlan
    removed: bool = False  # earlier containers were removed since: the ports must be looked at again


def _preflight(cluster: Cluster, dep: Deployment, plan: list[NodeLaunch], reporter: Reporter) -> Look:
    """Every read-only look at once: engines, GPUs, JIT directories, our containers, head ports, image."""
    nodes = {n.name: n for n in dep.inventory.nodes}
    image = dep.recipe.image
    tasks = {
        "docker": lambda: quick.docker_answers(cluster), "gpu": lambda: quick.gpu_visible(cluster),
        "jit": lambda: quick.jit_cache_local(cluster, nodes),
        "ports": lambda: quick.ports_free(cluster, _ports_of(dep, plan)),
        "found": lambda: ours(cluster, dep.recipe.name),
        "image": lambda: sync.survey(cluster.nodes, image.id, image.ref),
    }
    with reporter.phase("preflight", "docker, GPU, JIT cache; containers, ports and image on every node"):
        with ThreadPoolExecutor(len(tasks)) as pool:
            futures = {name: pool.submit(task) for name, task in tasks.items()}
        outcome = {name: (f.exception() or f.result()) for name, f in futures.items()}
        checks = [outcome[name] for name in ("docker", "gpu", "jit")]
        for name, value in outcome.items():
            if isinstance(value, Exception) and name in ("docker", "gpu", "jit"):
                raise DeployFailed("preflight", f"{name} check could not run: {value}")
        _judge("preflight", checks, reporter)  # a dead engine is named here, before its side effects below
        for name in ("ports", "found", "image"):
            if isinstance(outcome[name], Exception):
                raise DeployFailed("preflight", str(outcome[name]))
        return Look(outcome["found"], outcome["ports"], outcome["image"])


def _ports_of(dep: Deployment, plan: list[NodeLaunch]) -> list[int]:
    return [dep.recipe.serve.port] + ([dep.recipe.vllm.master_port] if len(plan) > 1 else [])


def _ports(cluster: Cluster, dep: Deployment, plan: list[NodeLaunch], reporter: Reporter, look: Look) -> None:
    ports = _ports_of(dep, plan)
    with reporter.phase("ports", ", ".join(f"{cluster.head.name}:{p}" for p in ports)):
        result = _phase_guard(reporter, quick.ports_free, cluster, ports) if look.removed else look.ports
        _judge("ports", [result], reporter)


def _image(cluster: Cluster, dep: Deployment, reporter: Reporter, opts: UpOptions, look: Look) -> None:
    image = dep.recipe.image
    with reporter.phase("image", f"{image.id[:19]} ({image.ref})"):
        survey = look.image
        if survey.source is None:
            raise DeployFailed("image", f"no node holds image {image.id} ({image.ref}): load it on one node first "
                               "(docker load / docker pull), then run up again")
        if survey.conflicts and not opts.replace_image:
            shown = "; ".join(
                f"{n.conn.name} has {(n.by_ref or n.pinned).short()} under {image.ref}" for n in survey.conflicts)
            raise DeployFailed("image", f"a different image under the same reference: pinned {survey.source.pinned.short()} "
                               f"(on {survey.source.conn.name}); {shown}. Use --sync to replace it")
        todo = {n.conn.name: n for n in survey.missing + survey.conflicts}
        if not todo:
            reporter.note(f"every node holds {image.id[:19]}: nothing to move")
        _phase_guard(reporter, cluster.each, lambda conn: _transfer(cluster, dep, survey.source, conn, reporter),
                     [n.conn for n in todo.values()])
        for node in survey.nodes:
            if node.conn.name in todo or node.by_ref is None:
                _phase_guard(reporter, sync.tag, node.conn, image.id, image.ref)


def _transfer(cluster: Cluster, dep: Deployment, source: sync.NodeImage, dst: NodeConnection, reporter: Reporter) -> None:
    image_id = dep.recipe.image.id
    dst_node = dep.inventory.node(dst.name)
    user = (dst_node.ssh and dst_node.ssh.user) or dep.inventory.ssh.user
    if sync.can_reach(source.conn, dst_node.fabric_ip, user):
        reporter.note(f"{source.conn.name} → {dst.name}: docker save | ssh | docker load over the fabric")
        sync.transfer_direct(source.conn, dst_node.fabric_ip, user, image_id)
    else:
        reporter.note(f"{source.conn.name} → {dst.name}: relayed through this machine (nodes cannot SSH to each other)")
        sync.transfer_relay(source.conn, dst, image_id,
                            lambda done, total: reporter.progress(f"image → {dst.name}", done, max(total, done)))
    got = sync.verify(dst, image_id, source.pinned)
    reporter.note(f"{dst.name} now holds {got.short()}")


def _secrets(cluster: Cluster, dep: Deployment, plan: list[NodeLaunch], reporter: Reporter) -> None:
    names = dep.recipe.secrets
    if not names:
        return
    with reporter.phase("secrets", ", ".join(names)):
        missing = [name for name in names if name not in os.environ]
        if missing:
            raise DeployFailed("secrets", f"{', '.join(missing)} not set in this shell's environment: export it "
                               "(it is written to each node's env-file, mode 0600, never put on a command line)")
        content = "".join(f"{name}={os.environ[name]}\n" for name in names)
        by_node = {launch.node.name: launch for launch in plan}

        def put(conn: NodeConnection) -> None:
            conn.put_secret(by_node[conn.name].env_file, content)

        _phase_guard(reporter, cluster.each, put)
        reporter.note(f"wrote {len(names)} secret(s) to {plan[0].env_file} on every node")


def _forget_secrets(cluster: Cluster, plan: list[NodeLaunch]) -> None:
    """`docker run` reads the env-file once; it need not stay on the node's disk after the launch."""
    files = {launch.node.name: launch.env_file for launch in plan if launch.env_file}
    if not files:
        return
    try:
        cluster.each(lambda conn: conn.run(["rm", "-f", files[conn.name]], timeout=30))
    except GroupError:
        pass  # best effort: the file is mode 0600 in the node's state dir


def _launch(cluster: Cluster, dep: Deployment, plan: list[NodeLaunch], endpoint: Endpoint, reporter: Reporter,
            opts: UpOptions) -> UpResult:
    recipe = dep.recipe
    monitor = Monitor()
    started: dict[str, list[str]] = {}
    head_launch, peer_launches = plan[0], plan[1:]
    conns = {c.name: c for c in cluster.nodes}

    def on_line(node: str, line: str) -> None:
        found = SHARDS.search(line)
        if found:
            reporter.progress("loading shards", int(found.group(1)), int(found.group(2)))

    def start(launch: NodeLaunch) -> None:
        conn = conns[launch.node.name]
        started.setdefault(conn.name, []).append(launch.container)  # recorded first: a half-created one is removed too
        result = conn.run(list(launch.argv), timeout=120)
        if not result.ok:
            raise NodeError(conn.name, f"docker run failed: {result.stderr.strip() or result.stdout.strip()}")
        monitor.watch(conn, launch.container, on_line)

    try:
        with reporter.phase("head", f"{head_launch.node.name}: {head_launch.container}"):
            _phase_guard(reporter, start, head_launch)
        if peer_launches:
            port = recipe.vllm.master_port
            with reporter.phase("rendezvous", f"waiting for {head_launch.node.name}:{port} to be LISTENING"):
                head = conns[head_launch.node.name]
                wait_until(lambda: _listening(head, port), monitor, timeout=opts.listen_timeout, interval=opts.poll,
                           what=f"port {port} LISTENING", node=head.name)
            with reporter.phase("peers", ", ".join(l.node.name for l in peer_launches)):
                try:
                    cluster.each(lambda c: start(next(l for l in peer_launches if l.node.name == c.name)),
                                 [conns[l.node.name] for l in peer_launches])
                except GroupError as exc:
                    raise DeployFailed("peers", str(exc)) from None
        with reporter.phase("ready", f"{endpoint.url}: /health, /v1/models, one completion"):
            sample = _ready(endpoint, recipe.served_name, monitor, head_launch.node.name, opts)
            reporter.note(f"completion: {sample!r}")
        with reporter.phase("log checks"):
            results = _expectations(dep, monitor, opts)
            for r in results:
                reporter.note(f"{r.name}: {r.status} — {r.detail}")
                for node, value in r.per_node.items():
                    reporter.note(f"    {node}: {value}")
            failed = [r for r in results if not r.ok]
            if failed:
                raise DeployFailed("log checks", "; ".join(f"{r.name}: {r.detail}" for r in failed))
    except BaseException as exc:
        monitor.stop()
        phase = reporter.current
        if isinstance(exc, FailureSeen):
            error: BaseException = DeployFailed(phase, str(exc.failure))
        elif isinstance(exc, KeyboardInterrupt):
            error = DeployFailed(phase, "interrupted (Ctrl-C)")
        elif isinstance(exc, DeployFailed):
            error = exc
        else:
            error = DeployFailed(phase, f"{type(exc).__name__}: {exc}")
        _cleanup(cluster, started, reporter, opts)
        raise error from None
    monitor.stop()
    return UpResult(endpoint.url, recipe.served_name, expectations=results, sample=sample)


def _listening(conn: NodeConnection, port: int) -> bool:
    result = conn.run(["ss", "-Hltn", f"sport = :{port}"], timeout=10)
    return result.ok and bool(result.stdout.strip())


def _ready(endpoint: Endpoint, model: str, monitor: Monitor, head: str, opts: UpOptions) -> str:
    # Polled every 0.5 s and re-checked on every new log line, so "Application startup complete" is seen at once.
    wait_until(endpoint.healthy, monitor, timeout=opts.ready_timeout, interval=0.5,
               what=f"{endpoint.url}/health", node=head)

    def model_listed() -> bool:
        try:
            return model in endpoint.models()
        except Exception:
            return False

    wait_until(model_listed, monitor, timeout=60, interval=0.2, what=f"model {model} in /v1/models", node=head)
    answer: dict = {}

    def completes() -> bool:
        try:
            answer.update(endpoint.complete(model, "The DGX Spark cluster is", max_tokens=1, timeout=30))
            return bool(answer.get("choices"))
        except Exception:
            return False

    wait_until(completes, monitor, timeout=120, interval=1.0, what="one real completion", node=head)
    return answer["choices"][0].get("text", "")


def _expectations(dep: Deployment, monitor: Monitor, opts: UpOptions) -> list[ExpectationResult]:
    """Wait (watching liveness) until every expected line has appeared on every node, then judge."""
    def logs() -> dict[str, list[str]]:
        return {name: list(w.lines) for name, w in monitor.watches.items()}

    def settled() -> bool:
        return all(r.status != "waiting" for r in evaluate(dep.recipe, logs(), final=False))

    try:
        wait_until(settled, monitor, timeout=opts.expect_timeout, interval=0.2, what="expected log lines",
                   node=dep.inventory.head)
    except FailureSeen:
        if monitor.failure is not None:
            raise  # a container failed while we waited
        # otherwise the lines never came: the final evaluation below reports them as missing
    return evaluate(dep.recipe, logs(), final=True)


def _cleanup(cluster: Cluster, started: dict[str, list[str]], reporter: Reporter, opts: UpOptions) -> None:
    if not started:
        return
    if opts.keep_on_failure:
        reporter.warn("--keep-on-failure: leaving " + ", ".join(f"{n}: {', '.join(c)}" for n, c in started.items()))
        return
    try:
        removed = remove_ranked(cluster, started)
        reporter.note("removed " + ", ".join(f"{n}: {', '.join(c)}" for n, c in removed.items() if c))
    except GroupError as exc:
        reporter.warn(f"could not remove every container: {exc}")
