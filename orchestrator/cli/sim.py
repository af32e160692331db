"""`spark-deploy sim ...`: bring a simulated cluster up and down, inject faults. Thin: parse, call, print."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Annotated, Iterator, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .conventions import sub_app
from .common import BadInput, Failed, JsonOpt, emit_json, err, exit_codes, out
from .extras import require_sim

app = sub_app()

NameOpt = Annotated[str, typer.Option("--name", "-n", envvar="SPARK_DEPLOY_SIM_NAME",
                                      help="Name of the simulated cluster.")]


@app.callback()
def _needs_sim_extra(ctx: typer.Context) -> None:
    """Runs before every `sim` subcommand: without docker-py/cryptography, exit 2 with the install line."""
    require_sim(f"sim {ctx.invoked_subcommand or ''}".strip())


@contextmanager
def _errors(as_json: bool = False) -> Iterator[None]:
    """Sim exceptions -> the CLI's exit codes (2 bad input, 1 failure)."""
    import docker.errors

    from ..sim.images import ImageBuildError
    from ..sim.state import SimError, SimInputError

    with exit_codes(as_json):
        try:
            yield
        except SimInputError as exc:
            raise BadInput(str(exc)) from exc
        except (SimError, ImageBuildError, docker.errors.DockerException) as exc:
            raise Failed(str(exc)) from exc


@app.command()
def up(
    name: NameOpt = "demo",
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=16, help="Number of simulated Sparks.")] = 2,
    load_image_on: Annotated[str, typer.Option(
        "--load-image-on", help="Comma-separated node numbers that get the vllm-sim image.")] = "1",
    systemd: Annotated[bool, typer.Option(
        "--systemd", help="Run real systemd as PID 1 in every node (dockerd and sshd as its services), "
                          "so `sim fault NODE reboot` acts as a real boot.")] = False,
    roce: Annotated[bool, typer.Option(
        "--roce", help="Give every node a Spark's RoCE HCA (rocep1s0f0, GID index 3 RoCE v2) and write the "
                       "inventory with interconnect profile roce.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start NODES simulated Sparks (sshd + dockerd each) and write inventory.yaml and recipe.yaml.

    Example: spark-deploy sim up --nodes 2 --systemd
    """
    from ..sim.cluster import SimCluster
    from ..sim.state import NODE_USER

    with _errors(as_json):
        try:
            load_on = [int(x) for x in load_image_on.split(",") if x.strip()]
        except ValueError:
            raise BadInput(f"--load-image-on wants numbers like 1,2, got {load_image_on!r}") from None
        cluster = SimCluster(name)
        doc = cluster.up(nodes=nodes, load_image_on=load_on, init="systemd" if systemd else "docker-init",
                         roce=roce)
        if as_json:
            emit_json({"ok": True, **doc})
            return
        table = Table("node", "address (enP7s7)", "fabric_ip (enp1s0f0np0)", "container", "vllm-sim image")
        for n in doc["nodes"]:
            table.add_row(n["name"], n["ip"], n.get("fabric_ip", ""), n["container"],
                          "loaded" if n["name"] in doc["image_loaded_on"] else "-")
        out.print(table)
        p = doc["paths"]
        out.print(f"sim cluster [bold]{escape(name)}[/] up in {doc['timings_s']['total']:.1f}s "
                  f"(management {doc['network']} {doc['subnet']}, fabric {doc.get('fabric_subnet', '-')}; "
                  f"PID 1 {doc['init']}{'; RoCE HCA on every node' if doc.get('roce') else ''})")
        out.print(f"  inventory   {escape(p['inventory'])}  (logs in as spark; as root: {escape(p.get('root_inventory') or '-')})")
        out.print(f"  recipe      {escape(p['recipe'] or '(not written)')}  image.id {doc['images']['vllm'][:19]}")
        out.print(f"  ssh key     {escape(p['key'])}")
        out.print(f"  known_hosts {escape(p['known_hosts'])}")
        for w in doc["warnings"]:
            err.print(f"[yellow]warning[/]: {escape(w)}")
        first = doc["nodes"][0]["ip"]
        out.print("Use it:")
        lines = [f"ssh -i {p['key']} -o UserKnownHostsFile={p['known_hosts']} {NODE_USER}@{first} nvidia-smi"]
        if p["recipe"]:
            lines.append(f"spark-deploy up {p['recipe']} -i {p['inventory']}")
        lines += [f"spark-deploy sim fault spark-2 partition --name {name}",
                  f"spark-deploy sim down --name {name}"]
        for line in lines:
            out.print(f"  {escape(line)}")


@app.command()
def down(name: NameOpt = "demo", as_json: JsonOpt = False) -> None:
    """Remove the cluster's containers, network, volumes and state dir (idempotent).

    Example: spark-deploy sim down --name demo
    """
    from ..sim.cluster import SimCluster

    with _errors(as_json):
        removed = SimCluster(name).down()
        if as_json:
            emit_json({"ok": True, "name": name, "removed": list(removed)})
            return
        out.print(f"sim cluster {escape(name)}: " + (f"removed {len(removed)} item(s)" if removed
                                                     else "nothing to remove"))
        for item in removed:
            out.print(f"  {escape(item)}")


def _parse_fault_args(args: list[str]) -> dict:
    opts: dict[str, str] = {}
    for a in args:
        if "=" in a:
            k, _, v = a.partition("=")
            if not k:
                raise BadInput(f"bad fault argument {a!r}: want key=value")
            opts[k.replace("-", "_")] = v
        elif a.isdigit() and "port" not in opts:
            opts["port"] = a  # `occupy-port 8000`
        elif re.fullmatch(r"\d+(\.\d+)?(bit|kbit|mbit|gbit)", a) and "rate" not in opts:
            opts["rate"] = a  # `fabric-slow 500mbit`
        else:
            raise BadInput(f"bad fault argument {a!r}: want key=value (or a port number)")
    return opts


@app.command()
def fault(
    node: Annotated[str, typer.Argument(help="Node: 1, spark-1, or 'all'.")],
    kind: Annotated[str, typer.Argument(help="stop-sshd, start-sshd, stop-dockerd, start-dockerd, partition, "
                                              "heal, netem, throttle, fabric-slow, gpu, shared-jit, local-jit, "
                                              "occupy-port, free-port, fill-disk, free-disk, meminfo, mtu, kernel, earlyoom, stall, roce, reboot, "
                                              "model-remove-shard, model-change-blob, model-incomplete, model-reset")],
    args: Annotated[Optional[list[str]], typer.Argument(help="key=value options, e.g. driver=575.57.08 clock=2200")] = None,
    name: NameOpt = "demo",
    as_json: JsonOpt = False,
) -> None:
    """Inject a fault into a node. `reboot` restarts the node container as a boot (with --systemd nodes,
    systemd, dockerd and restart policies act as on a real one).

    \b
    Example: spark-deploy sim fault spark-2 partition
    Example: spark-deploy sim fault 2 gpu clock=2200
    Example: spark-deploy sim fault 1 occupy-port 8000
    Example: spark-deploy sim fault spark-2 reboot
    Example: spark-deploy sim fault 2 roce port=down   (or hca=mlx5_0, ipv4=no, remove=true)
    Example: spark-deploy sim fault spark-2 fabric-slow 500mbit
    """
    from ..sim.cluster import SimCluster

    with _errors(as_json):
        opts = _parse_fault_args(args or [])
        lines = list(SimCluster(name).fault(node, kind, **opts))
        if as_json:
            emit_json({"ok": True, "node": node, "kind": kind, "options": opts, "lines": lines})
            return
        for line in lines:
            out.print(escape(line))


@app.command("ls")
def ls_(as_json: JsonOpt = False) -> None:
    """List simulated clusters (containers on this engine and state dirs).

    Example: spark-deploy sim ls
    """
    from ..sim.cluster import SimCluster, ls

    with _errors(as_json):
        clusters = ls()
        if as_json:
            emit_json({"ok": True, "clusters": {c: {**info, "addresses": {n.name: n.ip for n in SimCluster(c).nodes()}
                                                    if info["nodes"] else {}} for c, info in clusters.items()}})
            return
        if not clusters:
            out.print("no simulated clusters")
            return
        table = Table("name", "nodes", "running", "addresses", "state dir")
        for cname, info in clusters.items():
            addrs = ", ".join(f"{n.name}={n.ip}" for n in SimCluster(cname).nodes()) if info["nodes"] else ""
            table.add_row(cname, str(info["nodes"]), str(info["running"]), addrs, info["state_dir"] or "-")
        out.print(table)


@app.command()
def images(
    systemd: Annotated[bool, typer.Option("--systemd", help="Also the systemd node image (`sim up --systemd`).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build (or find cached) the node and vllm-sim images without starting a cluster.

    Example: spark-deploy sim images --systemd
    """
    from ..sim.images import ensure_images

    with _errors(as_json):
        res = ensure_images(systemd=systemd)
        if as_json:
            emit_json({"ok": True, "node": res.node.id, "node_systemd": res.node_systemd.id if res.node_systemd else None,
                       "vllm": res.vllm.id, "vllm_tags": list(res.vllm.tags), "built": list(res.built)})
            return
        out.print(f"node  {res.node.tags[0] if res.node.tags else ''} {res.node.id[:19]}")
        if res.node_systemd is not None:
            tags = res.node_systemd.tags
            out.print(f"node-systemd  {tags[0] if tags else ''} {res.node_systemd.id[:19]}")
        out.print(f"vllm  {', '.join(res.vllm.tags)} {res.vllm.id[:19]}")
        out.print("built: " + (", ".join(res.built) if res.built else "nothing (cache hit)"))
