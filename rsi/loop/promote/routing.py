"""The routing-accuracy gate of a Mixture-of-LoRA candidate (`rsi promote`).

L0 is retrained every generation, so routing can regress while the specialists improve. Before the
verdict is applied, each generation's L0 routes every holdout task's instruction — the route prompt a
trial's first hop sends (rsi.harness.mol.route_prompt), under that generation's own config — and is
scored against the gold label of the task's family under the *candidate's* domains. A route hop that
fails (a label outside the set, the endpoint down) is counted as infra, never as a wrong route. The
gate (rsi.core.mol.routing_gate_problem): the candidate may not fall below the parent by more than the
contract's `promotion.routing_margin`; a parent that is not a mixture has no routing to regress from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rsi.core.errors import InfraError, RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.mol import ROUTER, MolSpec, RoutingScore, routing_gate_problem
from rsi.core.promotion import Gate
from rsi.core.task import Task
from rsi.harness.mol import route_prompt
from rsi.loop.context import WorkspaceContext

ClientFactory = Callable[[str], Any]  # endpoint URL -> a client with `choose` (ChatClient fits)


def measure_routing(ctx: WorkspaceContext, gen: GenerationManifest, tasks: list[Task], domains: dict[str, list[str]],
                    client: Any) -> RoutingScore:
    """`gen`'s L0 on every task's instruction, gold labels from `domains` (the candidate's grouping)."""
    cfg = ctx.harness_config_for(gen)
    spec = MolSpec(domains=domains)
    own = gen.mol_domains()
    labels = list(own)
    constraint = cfg.mol.constraint if cfg.mol is not None else "choice"
    score = RoutingScore()
    for t in sorted(tasks, key=lambda x: x.name):
        gold = spec.label_of(t.family)
        try:
            got = client.choose(gen.serve_name(ROUTER), route_prompt(cfg, ctx.contract, t, own), labels,
                                constraint=constraint)
        except (InfraError, RsiError):
            score.infra += 1
            continue
        score.add(gold, got.label, got.margin)
    return score


def routing_evidence(ctx: WorkspaceContext, cand: GenerationManifest, parent: GenerationManifest, tasks: list[Task],
                     client_for: ClientFactory | None = None) -> tuple[Gate, dict[str, RoutingScore]]:
    """The gate and both generations' scores (the parent's only when it is a mixture)."""
    from contextlib import ExitStack

    from rsi.models.adapters import ensure_adapters
    from rsi.models.client import ChatClient
    from rsi.models.embedded import ensure_server

    domains = cand.mol_domains()
    margin = ctx.contract.promotion.routing_margin
    gens = [g for g in (parent, cand) if g.is_mol]
    scores: dict[str, RoutingScore] = {}
    with ExitStack() as stack:
        if client_for is None:
            cfg = ctx.harness_config_for(cand)
            ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
            url, _ = stack.enter_context(ensure_server(cfg.model.endpoint,
                                                       log_path=ctx.ws.logs_dir / "model-server.log"))
            ensure_adapters(url, gens, ctx.ws.root)
            client = stack.enter_context(ChatClient(url, max_attempts=3))
        else:
            client = client_for(cand.id)
        for g in gens:
            scores[g.id] = measure_routing(ctx, g, tasks, domains, client)
    c, p = scores[cand.id], scores.get(parent.id)
    problem = routing_gate_problem(p, c, margin)
    measured = f"{c.accuracy:.3f} ({c.correct}/{c.total}" + (f", {c.infra} infra" if c.infra else "") + ")"
    if p is not None:
        measured += f" vs parent {p.accuracy:.3f}"
    return Gate("routing_accuracy", f">= parent - {margin:g}", measured, problem is None, problem or ""), scores


def serving_figures(root: Any, trial_dirs: list[str]) -> dict[str, float]:
    """From a mixture's trials (their trajectories' per-call records): the route + summary hops' share of the
    model wall time (the hops' work), their share of the turn's latency (route, plus the summary only as long
    as the trial still waited for it: a deferred summary runs while the trial is graded, rsi.harness.deferred),
    their share of the model's service time (queueing behind other trials' calls left out, when the server
    reported it), the mean route hop, and per adapter the share of prompt tokens the prefix cache served."""
    import json
    from pathlib import Path

    wall = {"route": 0.0, "answer": 0.0, "summary": 0.0}
    queued = {"route": 0.0, "answer": 0.0, "summary": 0.0}  # of those, seconds waiting in the server's queue
    prompt: dict[str, int] = {}
    cached: dict[str, int] = {}
    routes = 0
    on_path, turn = 0.0, 0.0  # hop seconds the turn waited for, and the turns' seconds (with that wait)
    for d in trial_dirs:
        p = Path(d) if Path(d).is_absolute() else Path(root) / d
        try:
            mol = json.loads((p / "trajectory.json").read_text())["extra"]["rsi"].get("mol") or {}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for c in mol.get("calls") or []:
            wall[c["hop"]] = wall.get(c["hop"], 0.0) + float(c["wall_sec"])
            queued[c["hop"]] = queued.get(c["hop"], 0.0) + float(c.get("queue_sec") or 0.0)
            prompt[c["label"]] = prompt.get(c["label"], 0) + int(c["prompt_tokens"])
            cached[c["label"]] = cached.get(c["label"], 0) + int(c["cached_tokens"])
            routes += c["hop"] == "route"
        if mol.get("turn_sec") is not None:
            own = {h: sum(float(c["wall_sec"]) for c in mol.get("calls") or [] if c["hop"] == h)
                   for h in ("route", "summary")}
            waited = float(mol["summary_wait_sec"]) if "summary_wait_sec" in mol else own["summary"]
            on_path += own["route"] + waited
            turn += float(mol["turn_sec"]) + waited
    total = sum(wall.values())
    if not total:
        return {}
    out = {"mol_hop_share": round((wall["route"] + wall["summary"]) / total, 4),
           "mol_route_sec": round(wall["route"] / max(routes, 1), 4)}
    if turn:
        out["mol_hop_latency_share"] = round(on_path / turn, 4)
    served = {h: wall[h] - queued.get(h, 0.0) for h in wall}
    if any(queued.values()) and sum(served.values()) > 0:  # the hops' own cost, queueing behind other trials left out
        out["mol_hop_service_share"] = round((served["route"] + served["summary"]) / sum(served.values()), 4)
    for lab, n in sorted(prompt.items()):
        out[f"mol_cache_share_{lab}"] = round(cached[lab] / n, 4) if n else 0.0
    return out


__all__ = ["measure_routing", "routing_evidence", "serving_figures"]
