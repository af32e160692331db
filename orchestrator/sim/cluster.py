"""A simulated DGX Spark cluster: real sshd + real dockerd per node, on the host engine.

    c = SimCluster("demo")
    c.up(nodes=2)                 # network, volumes, nodes, keys, model, image on node 1
    c.fault("spark-2", "partition")
    c.down()

Module-level `up/down/fault/nodes/ls` wrap the class for the CLI.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.types import IPAMConfig, IPAMPool
from rich.console import Console

from . import fake_model, faults_host, faults_roce, images, node_boot, node_exec, provision
from .node_boot import NotReady, Readiness, RebootResult, ssh_banner  # noqa: F401 - part of this API
from .state import (
    FABRIC_IFACE,
    FABRIC_IFACE_2,
    INIT_LABEL,
    LABEL,
    MGMT_IFACE,
    NET_SPEC,
    NODE_HF_CACHE,
    SHARED_MOUNT,
    NodeInfo,
    NodeInit,
    SimError,
    SimInputError,
    check_name,
    container_name,
    docker_volume_name,
    fabric_network_name,
    free_subnets,
    gateway_ip,
    network_name,
    node_ip,
    read_cluster_json,
    shared_volume_name,
    state_dir,
    write_json,
)


@dataclass
class ExecResult:
    code: int
    stdout: str
    stderr: str


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SimError(f"cannot reach the Docker engine (is dockerd running? DOCKER_HOST?): {exc}") from exc
    return client


class SimCluster:
    """One simulated cluster, found by the `spark-deploy.sim=<name>` label on everything it made."""

    def __init__(self, name: str, *, client: docker.DockerClient | None = None,
                 console: Console | None = None):
        self.name = check_name(name)
        self._client = client
        self.console = console or Console(stderr=True)

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    # ---- paths -------------------------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return state_dir(self.name)

    @property
    def key_path(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.state_dir / "inventory.yaml"

    @property
    def root_inventory_path(self) -> Path:
        """The same inventory logging in as root (what `boot enable` needs, where sudo asks a password)."""
        return self.state_dir / "inventory-root.yaml"

    @property
    def recipe_path(self) -> Path:
        return self.state_dir / "recipe.yaml"

    def info(self) -> dict | None:
        """cluster.json: what `up` made (None if there is no state dir)."""
        return read_cluster_json(self.name)

    # ---- lookup ------------------------------------------------------------------------------
    def _label_filter(self) -> dict:
        return {"label": f"{LABEL}={self.name}"}

    def nodes(self) -> list[NodeInfo]:
        """The cluster's nodes, from the labels of its containers (running or not), by index."""
        found = []
        for c in self.client.containers.list(all=True, filters=self._label_filter()):
            labels = c.labels
            if f"{LABEL}.index" not in labels:
                continue
            found.append(NodeInfo(index=int(labels[f"{LABEL}.index"]), name=labels[f"{LABEL}.hostname"],
                                  container=c.name, ip=labels[f"{LABEL}.ip"],
                                  fabric_ip=labels.get(f"{LABEL}.fabric_ip", "")))
        return sorted(found, key=lambda n: n.index)

    def node(self, ref: int | str) -> NodeInfo:
        """A node by index (1, "1"), hostname ("spark-1") or container name."""
        nodes = self.nodes()
        for n in nodes:
            if ref in (n.index, str(n.index), n.name, n.container, n.ip) or (n.fabric_ip and ref == n.fabric_ip):
                return n
        known = ", ".join(n.name for n in nodes) or "none"
        raise SimInputError(f"no node {ref!r} in sim cluster {self.name!r} (nodes: {known})")

    def container(self, ref: int | str):
        return self.client.containers.get(self.node(ref).container)

    def exec(self, ref: int | str, argv: list[str], *, check: bool = True) -> ExecResult:
        """Run argv in a node container (like `docker exec NODE argv...`)."""
        c = self.container(ref)
        code, out, err = node_exec.exec_whole(c, argv)  # not exec_run: it can lose a short process's output
        res = ExecResult(code, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and code != 0:
            raise SimError(f"{c.name}: {argv!r} exited {code}: {(res.stderr or res.stdout).strip()[-2000:]}")
        return res

    # ---- lifecycle ---------------------------------------------------------------------------
    def up(self, nodes: int = 2, load_image_on: list[int] | tuple[int, ...] = (1,), *,
           recipe_template: Path | None = None, ready_timeout: float = 120.0,
           keep_on_failure: bool = False, init: NodeInit | str = NodeInit.DOCKER_INIT,
           roce: bool = False) -> dict:
        """Bring the cluster up; returns cluster.json's content. On failure, removes what it made.

        init="systemd" runs real systemd as PID 1 in every node (dockerd and sshd as its services; what
        `reboot` needs to act as a real boot); the default is the proven docker-init node. roce=True gives
        every node a Spark's RoCE HCA (faults_roce) and writes the inventory with profile roce."""
        init = NodeInit.parse(init)
        if not 1 <= nodes <= 16:
            raise SimInputError(f"nodes must be 1..16, got {nodes}")
        bad = [i for i in load_image_on if not 1 <= i <= nodes]
        if bad:
            raise SimInputError(f"load_image_on {bad} outside 1..{nodes}")
        if self.client.containers.list(all=True, filters=self._label_filter()):
            raise SimError(f"sim cluster {self.name!r} already exists; `spark-deploy sim down "
                           f"--name {self.name}` first")
        self.down()  # leftovers of an interrupted run (network, volumes, state) would collide
        t0 = time.monotonic()
        built = images.ensure_images(self.client, self.console, systemd=init is NodeInit.SYSTEMD)
        t_images = time.monotonic() - t0
        try:
            doc = self._up(nodes, list(load_image_on), built, recipe_template, ready_timeout, init, roce)
        except BaseException:
            if not keep_on_failure:
                self.down()
            raise
        doc["timings_s"] = {"images": round(t_images, 2), "total": round(time.monotonic() - t0, 2)}
        write_json(self.state_dir / "cluster.json", doc)
        return doc

    def _up(self, count: int, load_on: list[int], built: images.SimImages,
            recipe_template: Path | None, ready_timeout: float, init: NodeInit, roce: bool) -> dict:
        state = self.state_dir
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, private, public = provision.generate_keypair(state, f"spark-deploy-sim-{self.name}")
        labels = {LABEL: self.name}
        network, subnet = self._create_network(network_name(self.name), labels)
        fabric, fabric_subnet = self._create_network(fabric_network_name(self.name), labels, fabric=True)
        shared = self.client.volumes.create(shared_volume_name(self.name), labels=labels)
        infos = [NodeInfo(i, f"spark-{i}", container_name(self.name, i), node_ip(subnet, i),
                          node_ip(fabric_subnet, i)) for i in range(1, count + 1)]
        node_image = built.node_systemd if init is NodeInit.SYSTEMD else built.node
        assert node_image is not None  # ensure_images(systemd=True) returns it
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            ready = list(pool.map(lambda n: self._start_node(n, node_image.id, network.name, fabric.name,
                                                             gateway_ip(subnet), shared.name, ready_timeout, init),
                                  infos))
        containers = {n.container: self.client.containers.get(n.container) for n in infos}
        host_keys = {name: provision.read_host_key(c) for name, c in containers.items()}
        self.known_hosts_path.write_text(provision.known_hosts_lines(infos, host_keys, with_names=False))
        node_kh = provision.known_hosts_lines(infos, host_keys, with_names=True)
        model_tar, model_meta = fake_model.hf_cache_tar()

        def prepare(c) -> None:
            provision.prepare_node(c, private, public, node_kh)
            if not c.put_archive(NODE_HF_CACHE, model_tar):
                raise SimError(f"installing the fake model on {c.name} failed")
            provision.own_dirs(c, [NODE_HF_CACHE])  # the login user downloaded it

        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            list(pool.map(prepare, containers.values()))
            list(pool.map(lambda n: faults_host.meminfo(self, n, dict(faults_host.SPARK_MEMINFO)), infos))
            if roce:
                list(pool.map(lambda n: faults_roce.apply(self, n, faults_roce.spec_for(n, {})), infos))
        vllm_id = built.vllm.id
        vllm_tags = [images.VLLM_REFERENCE_TAG] + _own_tags(built.vllm)
        for i in load_on:
            provision.load_image(infos[i - 1].container, vllm_id, vllm_tags)
        provision.write_inventory(self.inventory_path, self.name, infos, key, self.known_hosts_path, roce=roce)
        provision.write_inventory(self.root_inventory_path, self.name, infos, key, self.known_hosts_path,
                                  user="root", roce=roce)
        recipe_src = provision.write_recipe(self.recipe_path, vllm_id, recipe_template, nodes=count)
        warnings = [f"{n.name}: {r.summary()}" for n, r in zip(infos, ready) if r.failed_units]
        if recipe_src is None:
            warnings.append(f"no recipe template at {provision.DEFAULT_RECIPE}: recipe.yaml not written")
        return {
            "name": self.name,
            "network": network.name,
            "subnet": subnet,
            "gateway": gateway_ip(subnet),
            "fabric_network": fabric.name,
            "fabric_subnet": fabric_subnet,
            "shared_volume": shared.name,
            "init": init.value,
            "roce": roce,
            "nodes": [n.to_dict() | {"docker_volume": docker_volume_name(self.name, n.index)}
                      for n in infos],
            "images": {"node": node_image.id, "node_tags": _own_tags(node_image),
                       "vllm": vllm_id, "vllm_tags": vllm_tags},
            "image_loaded_on": [infos[i - 1].name for i in load_on],
            "model": model_meta,
            "paths": {"state_dir": str(state), "key": str(key), "known_hosts": str(self.known_hosts_path),
                      "inventory": str(self.inventory_path),
                      "root_inventory": str(self.root_inventory_path),
                      "recipe": str(self.recipe_path) if recipe_src else None},
            "recipe_template": str(recipe_src) if recipe_src else None,
            "warnings": warnings,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def _create_network(self, name: str, labels: dict, fabric: bool = False):
        """An internal bridge on a free /24. The management network's bridge holds the gateway address, so
        the controller (this host) reaches the nodes on it; the fabric's has no address on this host
        (inhibit_ipv4), so only the nodes reach each other there, as over a QSFP cable."""
        used = []
        for net in self.client.networks.list():
            for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
                if cfg.get("Subnet"):
                    used.append(cfg["Subnet"])
        last: Exception | None = None
        for subnet in free_subnets(self.name, used)[:16]:
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=subnet, gateway=gateway_ip(subnet))])
            try:
                net = self.client.networks.create(
                    name, driver="bridge", ipam=ipam, internal=True, labels=labels, check_duplicate=True,
                    options={"com.docker.network.bridge.inhibit_ipv4": "true"} if fabric else None)
                return net, subnet
            except docker.errors.APIError as exc:  # lost a race for this subnet: try the next one
                last = exc
                if "overlap" not in str(exc).lower():
                    raise SimError(f"creating network {name} failed: {exc}") from exc
        raise SimError(f"no free /24 for {name} in 172.28.0.0/14: {last}")

    def _start_node(self, n: NodeInfo, image_id: str, network: str, fabric: str, gateway: str, shared: str,
                    timeout: float, init: NodeInit) -> Readiness:
        api = self.client.api
        vol = docker_volume_name(self.name, n.index)
        self.client.volumes.create(vol, labels={LABEL: self.name})
        systemd = init is NodeInit.SYSTEMD
        host_config = api.create_host_config(
            init=not systemd,  # systemd must be PID 1 itself
            tmpfs={"/run": "mode=755", "/run/lock": "mode=1777"} if systemd else None,
            cap_add=["ALL"], cap_drop=["SYS_RESOURCE"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            device_cgroup_rules=["a *:* rwm"],
            binds={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"},
                   vol: {"bind": "/var/lib/docker", "mode": "rw"},
                   shared: {"bind": SHARED_MOUNT, "mode": "rw"}},
            network_mode=network,
        )
        # `--security-opt systempaths=unconfined` is CLI sugar for empty masked/read-only path lists
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
        net_config = api.create_networking_config(
            {network: api.create_endpoint_config(ipv4_address=n.ip, aliases=[n.name])})
        labels = {LABEL: self.name, f"{LABEL}.index": str(n.index), f"{LABEL}.hostname": n.name,
                  f"{LABEL}.ip": n.ip, f"{LABEL}.fabric_ip": n.fabric_ip, INIT_LABEL: init.value}
        api.create_container(image_id, name=n.container, hostname=n.name, labels=labels,
                             host_config=host_config, networking_config=net_config, detach=True,
                             stop_signal="SIGRTMIN+3" if systemd else None)
        api.connect_container_to_network(n.container, fabric, ipv4_address=n.fabric_ip)
        spec = {"links": [{"ip": n.ip, "name": MGMT_IFACE}, {"ip": n.fabric_ip, "name": FABRIC_IFACE}],
                "unplugged": [FABRIC_IFACE_2], "default_via": gateway, "default_dev": MGMT_IFACE}
        if not api.put_archive(n.container, "/etc", provision.tar_files(
                {NET_SPEC.rsplit("/", 1)[1]: (json.dumps(spec, indent=2).encode() + b"\n", 0o644)})):
            raise SimError(f"writing {NET_SPEC} into {n.container} failed")
        api.start(n.container)
        return self.wait_ready(n, timeout)

    def wait_ready(self, n: NodeInfo, timeout: float = 120.0) -> Readiness:
        """Poll (bounded) until the node is ready: see node_boot.wait_ready."""
        return node_boot.wait_ready(self.client, n, timeout)

    def reboot(self, ref: int | str, ready_timeout: float = 120.0) -> RebootResult:
        """Restart one node container as a reboot and wait until it is ready (see node_boot.reboot)."""
        return node_boot.reboot(self.client, self.node(ref), ready_timeout)

    def down(self) -> list[str]:
        """Remove every container, network and volume labelled for this cluster, and its state dir."""
        removed = []
        flt = self._label_filter()
        containers = self.client.containers.list(all=True, filters=flt)

        def clean(c) -> None:
            if c.status == "running":  # let the inner engine remove its containers (and their cgroups)
                c.exec_run(["sh", "-c", 'ids=$(docker ps -aq 2>/dev/null); '
                                        '[ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1; true'])
            c.remove(force=True)

        if containers:
            with concurrent.futures.ThreadPoolExecutor(len(containers)) as pool:
                list(pool.map(_ignore_missing(clean), containers))
        removed += [f"container {c.name}" for c in containers]
        for net in self.client.networks.list(filters=flt):
            _ignore_missing(lambda x: x.remove())(net)
            removed.append(f"network {net.name}")
        for vol in self.client.volumes.list(filters=flt):
            _ignore_missing(lambda x: x.remove(force=True))(vol)
            removed.append(f"volume {vol.name}")
        if self.state_dir.exists():
            images.remove_tree(self.state_dir)
            removed.append(f"state {self.state_dir}")
        return removed

    def fault(self, node: int | str, kind: str, **opts) -> list[str]:
        """Inject a fault (see faults.KINDS) on one node, or on every node with node="all"."""
        from . import faults

        targets = self.nodes() if node == "all" else [self.node(node)]
        if not targets:
            raise SimInputError(f"sim cluster {self.name!r} has no nodes")
        return [faults.apply(self, n, kind, **opts) for n in targets]


def _own_tags(image) -> list[str]:
    return [t for t in image.tags if t.startswith(images.REPO_PREFIX + "/")]


def _ignore_missing(fn):
    def run(obj):
        try:
            fn(obj)
        except docker.errors.NotFound:
            pass
    return run


# ---- module-level API (the CLI uses these) -----------------------------------------------------
def up(name: str, nodes: int = 2, load_image_on: list[int] | tuple[int, ...] = (1,), **kw) -> SimCluster:
    c = SimCluster(name)
    c.up(nodes, load_image_on, **kw)
    return c


def down(name: str) -> list[str]:
    return SimCluster(name).down()


def fault(name: str, node: int | str, kind: str, **opts) -> list[str]:
    return SimCluster(name).fault(node, kind, **opts)


def nodes(name: str) -> list[NodeInfo]:
    return SimCluster(name).nodes()


def ls(client: docker.DockerClient | None = None) -> dict[str, dict]:
    """Every sim cluster on this engine or in the state home: name -> {nodes, running, state_dir}."""
    from .state import sim_home

    client = client or docker_client()
    out: dict[str, dict] = {}
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        name = c.labels.get(LABEL, "")
        if f"{LABEL}.index" not in c.labels:
            continue
        entry = out.setdefault(name, {"nodes": 0, "running": 0, "state_dir": None})
        entry["nodes"] += 1
        entry["running"] += c.status == "running"
    home = sim_home()
    if home.is_dir():
        for d in home.iterdir():
            if (d / "cluster.json").exists():
                out.setdefault(d.name, {"nodes": 0, "running": 0, "state_dir": None})["state_dir"] = str(d)
    return dict(sorted(out.items()))
