"""Render docs/results.md from the newest benchmark records (benchmarks/records/*.json).

    python scripts/render_results.py            # write docs/results.md
    python scripts/render_results.py --check    # exit 1 when docs/results.md is not what the records render

Each benchmark script writes its record when it runs (benchmarks/_records.py); nothing on the results page is
typed by hand: the figure, its target, whether it is met, the seed's or a peer's number, the command, commit,
date and machine all come from the record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _records import RECORDS, Figure, Record, load_records  # noqa: E402

OUT = ROOT / "docs" / "results.md"
BENCH_README = ROOT / "benchmarks" / "README.md"
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"
# The order a reader wants: what the loop achieves first, then the parts' speed.
ORDER = ["demo", "cycle_profile", "train_validation", "sources_ablation", "train_throughput", "sequential",
         "noninferiority", "trial_overhead", "engines", "harness_throughput", "model_server", "prefix_reuse", "search_efficiency",
         "store_scale", "ray_executor", "adapter_handoff", "mol", "mol_quality", "mol_turns", "gateway",
         "external_harness"]


def fmt(value: float | int | str | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = f"{value:,}".replace(",", " ") if abs(value) >= 10_000 else str(value)
    elif isinstance(value, float):
        a = abs(value)
        text = (f"{value:.1f}" if unit == "%" else f"{value:.0f}" if a >= 1000 else f"{value:.1f}" if a >= 10
                else f"{value:.2f}" if a >= 1 else f"{value:.3g}" if a >= 0.001 or a == 0 else f"{value:.2e}")
    else:
        text = str(value)
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "x") else f"{text} {unit}"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _met(f: Figure) -> str:
    if f.target is None:
        return ""
    return "met" if f.met else "**not met**" if f.met is False else "?"


def machine_line(r: Record) -> str:
    m = r.machine
    gpu = "no GPU" if m.gpu == "none" else m.gpu
    mem = f", {m.memory_gib:g} GiB" if m.memory_gib else ""
    pk = ", ".join(f"{k} {v}" for k, v in m.packages.items() if k in ("torch", "rsi"))
    return f"{m.cpus} CPUs ({m.cpu_model}){mem}, {gpu}; Python {m.python}" + (f", {pk}" if pk else "")


def render_record(r: Record) -> str:
    if r.script == "cycle_profile":
        return _header(r) + render_profile(r)
    rows = ["", "| figure | value | target | | compare | note |", "|---|---|---|---|---|---|"]
    for f in r.figures:
        comp = "; ".join(f"{c.who}: {fmt(c.value, f.unit)}" for c in f.compare)
        rows.append(f"| {_cell(f.label)} | **{_cell(fmt(f.value, f.unit))}** | {_cell(f.target or '')} "
                    f"| {_met(f)} | {_cell(comp)} | {_cell(f.note)} |")
    return _header(r) + "\n".join(rows) + "\n"


def render_profile(r: Record) -> str:
    """benchmarks/cycle_profile.py's figures as two tables per cycle: its phases with their parts (wall and share of
    the cycle), and its trial steps (trial-seconds summed over concurrent trials, and the wall attributed to each)."""
    import re

    figs = {f.id: f for f in r.figures}
    out: list[str] = []
    for c in dict.fromkeys(f.id.split(".")[0] for f in r.figures if re.match(r"c\d+\.", f.id)):
        total = figs.get(f"{c}.wall")
        if total is not None:
            out += ["", f"**{_cell(total.label)}: {fmt(total.value, total.unit)}**"]
        out += ["", "| phase / part | wall | share of the cycle |", "|---|---|---|"]
        for f in r.figures:
            m = re.fullmatch(rf"{c}\.phase\.(.+)\.wall", f.id)
            if m is None:
                continue
            share = figs.get(f"{c}.phase.{m.group(1)}.share")
            out.append(f"| {_cell(f.label.split(': ', 1)[-1])} | **{fmt(f.value, f.unit)}** | "
                       f"{fmt(share.value, share.unit) if share else ''} |")
            for part in (p for p in r.figures if p.id.startswith(f"{c}.part.{m.group(1)}.")):
                out.append(f"| ↳ {_cell(part.label.split(' · ', 1)[-1])} | {fmt(part.value, part.unit)} | |")
        out += ["", "| step | trial-seconds | share of trial-seconds | wall (attributed) | share of the wall |",
                "|---|---|---|---|---|"]
        for f in r.figures:
            m = re.fullmatch(rf"{c}\.step\.(.+)\.wall", f.id)
            if m is None:
                continue
            cells = [figs.get(f"{c}.step.{m.group(1)}.{k}") for k in ("trial", "trial_share", "wall", "wall_share")]
            name = re.sub(r"^cycle \d+: |, attributed wall$", "", f.label)
            out.append(f"| {_cell(name)} | " + " | ".join(fmt(x.value, x.unit) if x else "—" for x in cells) + " |")
    return "\n".join(out) + "\n"


def _header(r: Record) -> str:
    head = [f"## {r.title}", ""]
    wall = ("" if not r.wall_sec else f" in {r.wall_sec:.0f} s" if r.wall_sec < 120
            else f" in {r.wall_sec / 60:.1f} min")
    dirty = " (with uncommitted changes)" if r.dirty else ""
    head.append(f"`{r.command}` · commit `{r.commit}`{dirty} · {r.date[:10]}{wall} · {machine_line(r)}")
    if r.provenance == "transcribed":
        head += ["", "*Transcribed from the run's own output into a record; the script has not re-run since it "
                     "began writing records.*"]
    if r.context:
        head += ["", r.context]
    return "\n".join(head) + "\n"


# What the labels on this page mean (the benchmark scripts name figures as the issues that set their targets did).
LEGEND = [
    ("in-skill / unseen / suite / no-forgetting", "the parts of the sealed holdout promote measures: held-out "
     "combinations of trained skills (gated for improvement), templates no training task used, the fixed "
     "regression suite `suites/starter`, and earlier cycles' in-skill tasks (each gated: not worse beyond a margin)"),
    ("p", "a one-sided p-value of the gate's paired test; a gate passes when it is below the bound shown"),
    ("P1, P2, P6", "per-trial overhead over the raw docker CLI; speed-up of 4 trials at a time over 1; image reuse"),
    ("P3, P4, P5", "prompt-prefix reuse; the store at 100k trials; config search, adaptive against random"),
    ("E6", "Mixture-of-LoRA quality: routed specialists against one adapter"),
    ("issue N", "the project issue whose target the figure measures"),
    ("x", "a ratio against a baseline measured in the same run"),
]


def summary(records: list[Record]) -> list[str]:
    """Three sentences on what the newest demo showed, from its record (none when there is no demo record)."""
    demo = next((r for r in records if r.script == "demo"), None)
    if demo is None:
        return []
    f = {x.id: x for x in demo.figures}
    if "decision" in f:  # a one-cycle record names its figures without the cycle suffix
        f = {**f, **{f"{k}_c1": v for k, v in f.items() if not k.startswith(("wall", "phase"))}}
    cycles = sorted({int(k.rsplit("_c", 1)[1]) for k in f if k.startswith("decision_c")})
    if not cycles:
        return []
    wall = f.get("wall_total_min") or f.get("wall_min")
    one = (f"The newest `rsi demo` ({demo.date[:10]}, commit `{demo.commit}`) ran {len(cycles)} cycle(s) on the "
           f"bundled SmolLM2-135M in Docker on {demo.machine.cpus} CPUs" +
           (f" in {float(wall.value):.0f} min." if wall and isinstance(wall.value, (int, float)) else "."))
    said = []
    for c in cycles:
        dec = f[f"decision_c{c}"].value
        samples = f.get(f"samples_c{c}")
        rate = f.get(f"in_skill_rate_c{c}")
        p = f.get(f"in_skill_p_c{c}")
        bits = [f"cycle {c} trained on {samples.value} verified samples" if samples else f"cycle {c}"]
        if rate and rate.note:
            bits.append(f"in-skill holdout {rate.note}" + (f" (p = {float(p.value):.3g})" if p and
                                                          isinstance(p.value, (int, float)) else ""))
        said.append(", ".join(bits) + f": {dec}")
    two = "; ".join(said).capitalize() + "."
    promoted = [c for c in cycles if f[f"decision_c{c}"].value == "promoted"]
    three = ("Gains compounded: every cycle's candidate was promoted over its parent." if len(promoted) == len(cycles)
             and len(cycles) > 1 else
             f"The loop improved the model in {len(promoted)} of {len(cycles)} cycle(s); the figures below say where "
             "each gate stood.")
    return [" ".join([one, two, three]), ""]


def legend() -> list[str]:
    return ["Labels:", ""] + [f"- **{k}**: {v}" for k, v in LEGEND] + [""]


def render(records: list[Record]) -> str:
    rank = {name: i for i, name in enumerate(ORDER)}
    records = sorted(records, key=lambda r: (rank.get(r.script, len(ORDER)), r.script))
    targets = [(r, f) for r in records for f in r.figures if f.target is not None]
    missed = [(r, f) for r, f in targets if f.met is False]
    lines = [
        "<!-- generated by scripts/render_results.py from benchmarks/records/*.json: edit those (run the "
        "benchmark), not this page -->",
        "# Results",
        "",
        *summary(records),
        "Every figure here comes from the newest record a benchmark script wrote when it ran "
        "(`benchmarks/records/<script>.json`): the value, the target beside it, the seed's or a peer's number "
        "where one exists, and the command, commit, date and machine it was measured on. "
        "How each script measures is on [Benchmarks](benchmarks.md). "
        f"Targets: {len(targets) - len(missed)} of {len(targets)} met.",
        "",
    ]
    if missed:
        lines += ["Not met:", ""]
        lines += [f"- {f.label} ({r.title}): {fmt(f.value, f.unit)}, target {f.target}" for r, f in missed]
        lines.append("")
    lines += legend()
    lines += ["Contents: " + " · ".join(f"[{r.title}](#{anchor(r.title)})" for r in records), ""]
    return "\n".join(lines) + "\n" + "\n".join(render_record(r) for r in records)


def benchmarks_page() -> str:
    """docs/benchmarks.md: benchmarks/README.md as the docs site shows it (links made relative to docs/)."""
    text = BENCH_README.read_text().replace("](../docs/", "](")
    return "<!-- copied from benchmarks/README.md by scripts/render_results.py; edit that file -->\n" + text


def anchor(title: str) -> str:
    """MkDocs' (Python-Markdown toc) slug of a heading."""
    import re
    import unicodedata

    s = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    s = re.sub(r"[^\w\s-]", "", s).strip().lower()
    return re.sub(r"[-\s]+", "-", s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=Path, default=RECORDS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 when the page is not what the records render")
    args = ap.parse_args()
    try:
        text = render(load_records(args.records))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pages = {args.out: text}
    if args.out == OUT:
        pages[BENCH_PAGE] = benchmarks_page()
    if args.check:
        stale = [str(p) for p, t in pages.items() if not p.exists() or p.read_text() != t]
        if stale:
            print(f"{', '.join(stale)}: not what {args.records} and benchmarks/README.md render: run "
                  "python scripts/render_results.py", file=sys.stderr)
            return 1
        return 0
    for path, t in pages.items():
        path.write_text(t)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
