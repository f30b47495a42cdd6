"""`rsi diff` as rich tables (terminal) and as Markdown."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table

from rsi.report.diff import DiffReport
from rsi.report.rates import role_words


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(ci: tuple[float, float] | list[float]) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def headline(r: DiffReport) -> list[str]:
    """The few lines a summary shows: configs, adapters, contract, overall rates and p."""
    lines = [f"config: {r.config['a']['name']} ({r.config['a']['digest'][:12]}) -> "
             f"{r.config['b']['name']} ({r.config['b']['digest'][:12]})" + (" (same)" if r.config["same"] else ""),
             "adapter: " + _adapters(r.adapter["a"]) + " -> " + _adapters(r.adapter["b"]),
             f"contract: hcp {r.contract['a']} -> hcp {r.contract['b']}"]
    mol = r.adapter.get("mol")
    if mol:  # Mixture-of-LoRA: which revisions moved, routing accuracy per generation
        lines.append("adapters (MoL): " + ", ".join(f"{x['label']} {x['state']}" for x in mol["labels"]))
        ra = mol["routing_accuracy"]
        lines.append(f"routing accuracy (holdout instructions): {r.a} {_pct(ra['a'])} -> {r.b} {_pct(ra['b'])}")
        sv = mol.get("serving") or {}
        if "hop_share" in sv:
            cache = ", ".join(f"{k.removeprefix('cache_share_')} {_pct(v)}" for k, v in sorted(sv.items())
                              if k.startswith("cache_share_"))
            latency = (f", {_pct(sv['hop_latency_share'])} of the turn's latency"
                       if sv.get("hop_latency_share") is not None else "")
            lines.append(f"{r.b} hops: route + summary {_pct(sv['hop_share'])} of model time{latency} (route "
                         f"{sv.get('route_sec', 0):.2f} s); prefix-cache share per adapter: {cache}")
    if r.refusal:
        lines.append(r.refusal)
    elif r.overall.get("tasks"):
        o = r.overall
        p = o["p_value"]
        lines += part_lines(r)
        lines.append(f"pass rate ({o['scope']}, {o['tasks']} tasks): {r.a} {_pct(o['a_rate'])} {_ci(o['a_ci'])} -> "
                     f"{r.b} {_pct(o['b_rate'])} {_ci(o['b_ci'])}, delta {100 * (o['delta'] or 0):+.1f} pts, "
                     f"p = {'n/a' if p is None else f'{p:.4g}'} ({o['test']})")
        if r.counts:
            lines.append(f"counted: {r.a} {r.counts['a']}; {r.b} {r.counts['b']} ({r.counts['scope']}); "
                         "model arms only, never the oracle, nop or known-wrong controls")
        if o.get("unit") not in (None, "task"):
            up = o.get("unit_p_value")
            lines.append(f"per {o['unit']} ({o['units']} {o['unit']}s, the unit promotion gates on): delta "
                         f"{100 * (o.get('unit_delta') or 0):+.1f} pts, p = {'n/a' if up is None else f'{up:.4g}'} "
                         f"({o['unit_test']})")
    else:
        lines.append("no task was run by both generations under their own configs: no rates to compare")
    return lines


def part_lines(r: DiffReport) -> list[str]:
    """One line per holdout part and the suite, as the promote gate figures them (pooled over the part's tasks
    both generations ran); none for a holdout that names no part (its one part is the pooled holdout line)."""
    rows = r.parts
    if [x["part"] for x in rows if x["part"] != "suite"] == ["unseen"]:
        rows = [x for x in rows if x["part"] == "suite"]
    out = []
    gate_bound = ((r.gate or {}).get("verdict") or {}).get("ni_bound")
    for x in rows:
        p = x["ni_p_value"] if x["role"] == "non_inferiority" else x["p_value"]
        which = f"one-sided, that {r.b} is better, clustered on units"
        if x["role"] == "non_inferiority":
            lb, lvl = x.get("ni_lower"), x.get("ni_level")
            which = (f"score test, H0 {r.b} worse by >= the margin, one-sided; lower bound "
                     f"{'n/a' if lb is None else f'{lb:+.3f}'}, passes below {'n/a' if lvl is None else f'{lvl:.4g}'}"
                     + ("" if x.get("ni_tie_passes", True) else "; too small to pass a tie")
                     # the gate may have decided at an earlier look, at that look's bound, on fewer trials
                     + (f"; promote's gate decided at its look's bound, {gate_bound:.4g}" if gate_bound is not None
                        and lvl is not None and abs(gate_bound - lvl) > 1e-9 else ""))
        out.append(f"{x['label']} ({role_words(x)}, {x['tasks']} tasks): {r.a} {_pct(x['a_rate'])} "
                   f"({x['a_passes']}/{x['a_trials']}) -> {r.b} {_pct(x['b_rate'])} ({x['b_passes']}/{x['b_trials']}), "
                   f"delta {100 * (x['delta'] or 0):+.1f} pts, p = {'n/a' if p is None else f'{p:.4g}'} ({which})")
    return out


def _adapters(a: dict[str, Any]) -> str:
    ads = a.get("adapters") or {}
    if not ads:
        return "base model only"
    parts = []
    for name, info in ads.items():
        rank = f", rank {info['rank']}" if info.get("rank") else ""
        parts.append(f"{name}={info['serve_name']} (sha256 {info['sha256'][:12]}{rank})")
    data = a.get("dataset") or {}
    if data:
        parts.append(f"trained on {data.get('trajectories', '?')} trajectories ({data.get('accepted', '?')} accepted)")
    return ", ".join(parts)


def gate_rows(r: DiffReport) -> list[tuple[str, str, str, str, str]]:
    """The promotion gate table of `rsi promote B` over A (the decision): name, threshold, measured, pass, detail."""
    v = (r.gate or {}).get("verdict") or {}
    return [(g["name"], g["threshold"], g["measured"], "pass" if g["passed"] else "FAIL", g.get("detail", ""))
            for g in v.get("gates", [])]


def gate_line(r: DiffReport) -> str | None:
    v = (r.gate or {}).get("verdict")
    if not v:
        return None
    failing = ", ".join(v.get("failing") or [])
    return (f"decision (promote job {r.gate['job']}): " + ("promoted: every gate passed" if v.get("passed")
                                                          else f"rejected: failing {failing}"))


def term(r: DiffReport) -> Group:
    items: list[Any] = [f"[bold]diff {r.a} -> {r.b}[/]", *[x.replace("[", "\\[") for x in headline(r)]]
    if rows := gate_rows(r):
        t = Table(title=(gate_line(r) or "").replace("[", "\\["))
        for c in ("gate", "threshold", "measured", "result", "detail"):
            t.add_column(c)
        for row in rows:
            t.add_row(*[x.replace("[", "\\[") for x in row])
        items.append(t)
    if r.config["unified_diff"]:
        items.append(Syntax(r.config["unified_diff"], "diff", theme="ansi_dark", background_color="default"))
    if r.families:
        t = Table(title="pass rate per family (Wilson 95%)")
        for c in ("family", "tasks", r.a, r.b, "delta"):
            t.add_column(c)
        for f in r.families:
            t.add_row(f.family, str(f.tasks), f"{_pct(f.a_rate)} {_ci(f.a_ci)}", f"{_pct(f.b_rate)} {_ci(f.b_ci)}",
                      f"{100 * (f.b_rate - f.a_rate):+.1f}")
        items.append(t)
    if r.templates and r.overall.get("unit") not in (None, "task"):
        t = Table(title=f"pass rate per {r.overall['unit']} ({r.overall['scope']}; mean of per-task rates)")
        for c in (r.overall["unit"], "tasks", r.a, r.b, "delta"):
            t.add_column(c)
        for u in r.templates:
            t.add_row(u["unit"], str(u["tasks"]), _pct(u["a_rate"]), _pct(u["b_rate"]), f"{100 * u['delta']:+.1f}")
        items.append(t)
    if r.flips:
        t = Table(title="per-task flips (solved = pass rate >= 0.5)")
        for c in r.flips:
            t.add_column(c)
        t.add_row(*[str(v) for v in r.flips.values()])
        items.append(t)
        changed = [x for x in r.tasks if x["flip"] in ("fixed", "regressed")][:20]
        if changed:
            t = Table(title="tasks that flipped (first 20)")
            for c in ("task", "family", "split", r.a, r.b, "flip"):
                t.add_column(c)
            for x in changed:
                t.add_row(x["task"], x["family"], x["split"], f"{x['a_passes']}/{x['a_trials']}",
                          f"{x['b_passes']}/{x['b_trials']}", x["flip"])
            items.append(t)
    items.append(_attr_table(r))
    items.append(_spend_table(r))
    return Group(*items)


def _attr_table(r: DiffReport) -> Table:
    att = r.attribution
    t = Table(title="attribution of failures (verdicts per kind)")
    t.add_column("generation")
    for k in att["kinds"]:
        t.add_column(k)
    t.add_column("moved")
    t.add_row(r.a, *[str(att["counts"]["a"][k]) for k in att["kinds"]], "")
    t.add_row(r.b, *[str(att["counts"]["b"][k]) for k in att["kinds"]],
              ", ".join(f"{k}: {v}" for k, v in att["moved"].items()) or "none")
    return t


def _spend_table(r: DiffReport) -> Table:
    t = Table(title="spend per generation and phase")
    for c in ("generation", "phase", "trials", "tokens", "wall"):
        t.add_column(c)
    for s in sorted(r.spend, key=lambda s: (s["generation"], s["phase"])):
        t.add_row(s["generation"], s["phase"], str(s["trials"]), f"{s['prompt_tokens'] + s['completion_tokens']:,}",
                  f"{s['wall_sec'] / 60:.1f} min")
    return t


def markdown(r: DiffReport) -> str:
    out = [f"# rsi diff {r.a} -> {r.b}", "", *[f"- {x}" for x in headline(r)], ""]
    if r.config["unified_diff"]:
        out += ["## Harness config", "", "```diff", r.config["unified_diff"].rstrip("\n"), "```", ""]
    if r.families:
        out += ["## Pass rate per family (Wilson 95%)", "", f"| family | tasks | {r.a} | {r.b} | delta |",
                "|---|---|---|---|---|"]
        out += [f"| {f.family} | {f.tasks} | {_pct(f.a_rate)} {_ci(f.a_ci)} | {_pct(f.b_rate)} {_ci(f.b_ci)} | "
                f"{100 * (f.b_rate - f.a_rate):+.1f} |" for f in r.families]
        out.append("")
    if r.templates and r.overall.get("unit") not in (None, "task"):
        unit = r.overall["unit"]
        out += [f"## Pass rate per {unit} ({r.overall['scope']}; mean of per-task rates)", "",
                f"| {unit} | tasks | {r.a} | {r.b} | delta |", "|---|---|---|---|---|"]
        out += [f"| {u['unit']} | {u['tasks']} | {_pct(u['a_rate'])} | {_pct(u['b_rate'])} | "
                f"{100 * u['delta']:+.1f} |" for u in r.templates]
        out.append("")
    if r.flips:
        out += ["## Per-task flips", "", "| " + " | ".join(r.flips) + " |", "|" + "---|" * len(r.flips),
                "| " + " | ".join(str(v) for v in r.flips.values()) + " |", ""]
    att = r.attribution
    out += ["## Attribution shift", "", "| generation | " + " | ".join(att["kinds"]) + " |",
            "|---|" + "---|" * len(att["kinds"])]
    for g, key in ((r.a, "a"), (r.b, "b")):
        out.append(f"| {g} | " + " | ".join(str(att["counts"][key][k]) for k in att["kinds"]) + " |")
    out += ["", "moved: " + (", ".join(f"{k}: {v}" for k, v in att["moved"].items()) or "none"), ""]
    out += ["## Spend", "", "| generation | phase | trials | tokens | wall (min) |", "|---|---|---|---|---|"]
    out += [f"| {s['generation']} | {s['phase']} | {s['trials']} | {s['prompt_tokens'] + s['completion_tokens']} | "
            f"{s['wall_sec'] / 60:.1f} |" for s in sorted(r.spend, key=lambda s: (s["generation"], s["phase"]))]
    return "\n".join(out) + "\n"


__all__ = ["headline", "markdown", "part_lines", "term"]
