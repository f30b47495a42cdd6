"""`rsi diff --format html`: one self-contained page (inline SVG charts drawn with matplotlib, no network).

Charts: pass rate per family for A and B with Wilson intervals, per-task flips, attribution breakdown, and
the training run that made B (loss per step, the validation slice's mean log-probability).

The page body is `diff_body.html.j2`, which `rsi view`'s Diff page includes too; only the links differ
(here each flipped task's trials link to their trajectory.json files, there to the viewer's trial pages).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsi.report.diff import DiffReport
from rsi.report.diff_render import gate_line, gate_rows, headline
from rsi.report.rates import role_words

A_COLOUR, B_COLOUR = "#8a9bb0", "#2b6cb0"


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML


def charts(r: DiffReport) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text (smaller, searchable)
    import matplotlib.pyplot as plt
    import numpy as np

    out: dict[str, str] = {}
    if r.families:
        fams = [f.family for f in r.families]
        x = np.arange(len(fams))
        fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(fams) + 2), 3.2))
        for off, label, rates, cis, colour in (
            (-0.2, r.a, [f.a_rate for f in r.families], [f.a_ci for f in r.families], A_COLOUR),
            (0.2, r.b, [f.b_rate for f in r.families], [f.b_ci for f in r.families], B_COLOUR),
        ):
            err = np.array([[rt - lo for rt, (lo, _) in zip(rates, cis, strict=True)],
                            [hi - rt for rt, (_, hi) in zip(rates, cis, strict=True)]])
            ax.bar(x + off, rates, 0.4, yerr=np.clip(err, 0, None), capsize=3, label=label, color=colour)
        ax.set_xticks(x, fams)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("pass rate")
        ax.legend()
        out["families"] = _svg(fig)
    if r.flips:
        fig, ax = plt.subplots(figsize=(5.5, 2.6))
        names = list(r.flips)
        colours = ["#2f855a", "#c53030", "#a0aec0", "#4a5568"]
        ax.barh(names, [r.flips[n] for n in names], color=colours)
        ax.invert_yaxis()
        ax.set_xlabel(f"tasks ({r.a} -> {r.b})")
        out["flips"] = _svg(fig)
    tr = r.training
    if tr.get("loss_curve") or tr.get("validation_curve"):
        fig, ax = plt.subplots(figsize=(6.0, 2.8))
        if tr.get("loss_curve"):
            ls = tr["loss_curve"]
            ax.plot(range(1, len(ls) + 1), ls, color=B_COLOUR, label="training loss")
            ax.set_ylabel("loss")
        ax.set_xlabel("step")
        if tr.get("validation_curve"):
            ax2 = ax.twinx()
            vc = tr["validation_curve"]
            ax2.plot([v[0] for v in vc], [v[1] for v in vc], marker="o", color="#2f855a",
                     label="validation log-probability")
            ax2.set_ylabel("mean log-probability")
            ax2.legend(loc="upper right", fontsize=8)
        ax.legend(loc="upper left", fontsize=8)
        out["training"] = _svg(fig)
    att = r.attribution
    kinds = att["kinds"]
    x = np.arange(len(kinds))
    fig, ax = plt.subplots(figsize=(5.5, 2.8))
    ax.bar(x - 0.2, [att["counts"]["a"][k] for k in kinds], 0.4, label=r.a, color=A_COLOUR)
    ax.bar(x + 0.2, [att["counts"]["b"][k] for k in kinds], 0.4, label=r.b, color=B_COLOUR)
    ax.set_xticks(x, kinds)
    ax.set_ylabel("failed tasks")
    ax.legend()
    out["attribution"] = _svg(fig)
    return out


def file_href(root: str) -> Callable[[dict[str, Any]], str]:
    """Links from a flip to a trial's trajectory.json on disk (the report is one file; no server to ask)."""

    def href(t: dict[str, Any]) -> str:
        d = Path(t["trial_dir"])
        return ((d if d.is_absolute() else Path(root) / d) / "trajectory.json").resolve().as_uri()

    return href


def report_context(r: DiffReport, trial_href: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """What `diff_body.html.j2` renders: the report, its charts, the gate table and how to link a trial."""
    spend = sorted(r.spend, key=lambda s: (s["generation"], s["phase"]))
    flipped = [t for t in r.tasks if "a_trial_ids" in t]  # the flips _flip_trials linked, regressions first
    flipped.sort(key=lambda t: (t["flip"] != "regressed", t["task"]))
    return {"r": r, "headline": headline(r), "charts": charts(r), "spend": spend, "gates": gate_rows(r),
            "gate_line": gate_line(r), "flipped": flipped, "trial_href": trial_href, "role_words": role_words,
            "flipped_more": sum(1 for t in r.tasks if t["flip"] in ("fixed", "regressed")) - len(flipped)}


def html(r: DiffReport) -> str:
    """The report as one self-contained page."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("rsi.report", "templates"), autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("diff.html.j2").render(**report_context(r, file_href(r.root)))


__all__ = ["charts", "file_href", "html", "report_context"]
