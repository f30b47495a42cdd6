"""The page `rsi cycle --cycles N` (and `rsi demo --cycles N`) writes: per generation, every holdout part (in-skill,
unseen-template, no-forgetting), the suite rate and the in-template rate, as a table and a line chart (inline SVG,
no network).

Each cycle measures its parent and its candidate on the holdout of that cycle (discover tops it up, so a
later cycle's holdout may hold more templates); the chart plots each generation at its latest measurement,
and the table keeps every cycle's own pair, with its p-values, as the gates saw them.
"""

from __future__ import annotations

from typing import Any

from rsi.report.diff_html import _svg

PARTS = ("in_skill", "unseen", "no_forgetting")  # the holdout's parts (rsi.core.holdout_parts.EVAL_PARTS)
SERIES = (("holdout", "gated holdout (in-skill where the holdout has parts)", "#2b6cb0"),
          ("suite", "suite (no generator wrote)", "#2f855a"),
          ("in_template", "in-template (train split)", "#a0aec0"))


def per_generation(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """generation -> {holdout, suite, in_template, in_skill, unseen, no_forgetting}: each at its latest
    measurement across the cycles (a holdout part: the parent's or the candidate's rate in the cycle's parts)."""
    out: dict[str, dict[str, float | None]] = {}
    keys = ("holdout", "suite", "in_template", *PARTS)
    for r in rows:
        par = out.setdefault(r["parent"], dict.fromkeys(keys))
        pair = r.get("in_template_pair") or (None, None)  # promote's measurement, when the contract asks
        parts = r.get("parts") or {}
        par.update({k: v for k, v in (("holdout", r["holdout"][0]), ("suite", r["suite"][0]),
                                      ("in_template", pair[0] if pair[0] is not None else r["in_template"]),
                                      *((p, (parts.get(p) or {}).get("parent_rate")) for p in PARTS))
                    if v is not None})
        if r.get("candidate"):
            cand = out.setdefault(r["candidate"], dict.fromkeys(keys))
            cand.update({k: v for k, v in (("holdout", r["holdout"][1]), ("suite", r["suite"][1]),
                                           ("in_template", pair[1]),
                                           *((p, (parts.get(p) or {}).get("candidate_rate")) for p in PARTS))
                         if v is not None})
    return out


# the viewer's generations chart: each holdout part apart, as the promote gate measures them
PART_SERIES = (("in_skill", "in-skill holdout (the superiority gate)", "#2b6cb0"),
               ("unseen", "unseen-template holdout", "#dd6b20"),
               ("no_forgetting", "no-forgetting holdout (earlier cycles' in-skill)", "#805ad5"),
               ("suite", "suite (no generator wrote)", "#2f855a"),
               ("in_template", "in-template (train split)", "#a0aec0"))


def chart(gens: dict[str, dict[str, float | None]],
          series: tuple[tuple[str, str, str], ...] = SERIES) -> str | None:
    """Each series (key, label, colour) as a line over the generations; a generation without a figure: no point."""
    if not gens:
        return None
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    names = list(gens)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 2), 3.2))
    for key, label, colour in series:
        pts = [(i, float(v)) for i, n in enumerate(names) if (v := gens[n].get(key)) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, color=colour)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass rate")
    ax.legend(fontsize=8)
    return _svg(fig)


def html(data: dict[str, Any]) -> str:
    """`data`: CyclesOutcome.as_json() (its `generations` rows and why the run ended)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("rsi.report", "templates"), autoescape=select_autoescape(["html", "j2"]))
    rows = data.get("generations", [])
    gens = per_generation(rows)
    parted = any(r.get("parts") for r in rows)  # every part apart when the holdout has parts
    return env.get_template("cycles.html.j2").render(rows=rows, gens=gens, chart=chart(gens, PART_SERIES if parted
                                                                                      else SERIES),
                                                     ended=data.get("ended"))


__all__ = ["PARTS", "PART_SERIES", "SERIES", "chart", "html", "per_generation"]
