"""`rsi update`: accepted trajectories -> training backend -> new LoRA revision -> candidate generation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rsi.cli.common import WorkspaceOpt, console, err_console, errors, open_context, print_json, workspace_root
from rsi.cli.tracking import ReportToOpt, close_tracking, open_tracking, track_phase


def register(app: typer.Typer) -> None:
    app.command("update")(update)


def _tracked(ctx: typer.Context) -> bool:
    """Whether rsi.yaml names trackers (the workspace is opened for them only then)."""
    from rsi.store.paths import Workspace

    return bool(Workspace.locate(workspace_root(ctx)).settings().tracking.report_to)


def update(
    ctx: typer.Context,
    gen: Annotated[str | None, typer.Option("--gen", help="Generation whose trials train (default: current).")] = None,
    backend: Annotated[str, typer.Option("--backend", help="export | command | local")] = "local",
    from_job: Annotated[list[str] | None, typer.Option(
        "--from-job", help="Only these jobs (and their child jobs).")] = None,
    objective: Annotated[str, typer.Option("--objective", help="sft | pg | sft+pg")] = "sft+pg",
    out: Annotated[Path | None, typer.Option("--out", help="Where the dataset and adapter go.")] = None,
    command: Annotated[str | None, typer.Option(
        "--command",
        help="The command backend's template: {dataset} {output_dir} {base_model} {parent_adapter}.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Optimiser steps (default: train.steps).")] = None,
    init: Annotated[str | None, typer.Option(
        "--init", help="parent: continue the parent's adapter with replay | base: a fresh LoRA from the base on "
                       "the union of the lineage's accepted samples (default: rsi.yaml train.init).")] = None,
    load: Annotated[bool, typer.Option("--load/--no-load", help="Load the adapter into the running endpoint.")] = True,
    add_specialist: Annotated[str | None, typer.Option(
        "--add-specialist", help="Mixture-of-LoRA: register a new adapter LABEL (L<k>) for new families.")] = None,
    domains: Annotated[str | None, typer.Option(
        "--domains", help="With --add-specialist: the families it serves, comma-separated.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Select, check leakage and count samples per source, template and family; write and "
                          "train nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Update: select accepted trajectories, train a LoRA revision, register a candidate generation."""
    from rsi.loop.update.phase import UpdateRequest, run_update

    with errors():
        wctx = open_context(ctx) if report_to or _tracked(ctx) else None
        tracking = open_tracking(wctx, report_to) if wctx is not None else None
        cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn())
        with Progress(*cols, console=err_console, transient=as_json) as p:
            bar: dict[str, TaskID] = {}

            def progress(step: int, total: int, loss: float) -> None:
                if "id" not in bar:
                    bar["id"] = p.add_task("training", total=total, loss="-")
                p.update(bar["id"], completed=step, loss=f"{loss:.4f}")

            def log(msg: str) -> None:
                if not as_json:
                    p.console.print(msg, highlight=False, soft_wrap=True, markup=False)

            req = UpdateRequest(gen=gen, backend=backend, from_jobs=list(from_job or []), objective=objective,
                                out=out, command=command, steps=steps, init=init, load=load, log=log,
                                progress=progress,
                                dry_run=dry_run,
                                add_specialist=add_specialist,
                                domains=[d.strip() for d in (domains or "").split(",") if d.strip()])
            try:
                o = run_update(req, workspace_root(ctx))
                if not dry_run:
                    track_phase(tracking, wctx, "update", o)
            finally:
                close_tracking(tracking, as_json)
        if as_json:
            print_json(o.as_json())
            return
        if "mol" in o.training:  # a mixture: one row per adapter
            t = Table(title=f"update {o.run_id} ({o.generation} -> {o.candidate}, Mixture-of-LoRA)")
            for col in ("adapter", "domains", "trials", "routing examples", "revision"):
                t.add_column(col)
            for lab, info in o.training["mol"].items():
                a = (o.adapter or {}).get(lab, {})
                moved = "new " if info.get("changed") else "kept "
                t.add_row(lab, ", ".join(info.get("domains") or []) or "chat", str(info.get("trials", 0)),
                          str(info.get("routing_examples", 0)), moved + str(a.get("serve_name", "-")))
            console.print(t)
            return
        t = Table(title=f"update {o.run_id} ({o.generation}, backend {o.backend}, objective {o.objective})")
        t.add_column("figure")
        t.add_column("value")
        t.add_row("serving config", f"{o.config['name']} ({o.config['digest'][:12]}), {o.config['source']}")
        s = o.selection
        t.add_row("trajectories", f"{s['usable']} usable, {s['accepted']} accepted, {s['excluded']} excluded")
        t.add_row("refused (train/serve mismatch etc.)", ", ".join(f"{k} {v}" for k, v in o.refused.items()) or "none")
        t.add_row("groups", f"{s['groups_with_signal']}/{s['groups']} with policy-gradient signal")
        smp = s.get("samples") or {}
        if smp:
            t.add_row("samples by source", ", ".join(f"{k} {v}" for k, v in smp.get("by_source", {}).items()) or "none")
            t.add_row("samples by family", ", ".join(f"{k} {v}" for k, v in smp.get("by_family", {}).items()) or "none")
            t.add_row("templates with samples", str(len(smp.get("by_template", {}))))
        lk = s.get("leakage") or {}
        if lk:
            t.add_row("leakage check", f"{'passed' if lk.get('ok') else 'REFUSED'}: {lk.get('samples')} samples; "
                                       f"highest overlap with an unseen-template reference "
                                       f"{lk.get('max_reference_overlap', 0):.0%}")
        v = s.get("validation") or {}
        t.add_row("templates", f"{s.get('templates', 0)} trained on, {s.get('capped', 0)} trajectories over the "
                               f"per-template cap; replayed {o.replay.get('used', 0)} from earlier generations")
        t.add_row("validation slice", f"{v.get('accepted', 0)} accepted of {', '.join(v.get('templates') or [])}"
                  if v.get("templates") else f"none ({v.get('note', '-')})")
        if o.dataset.get("path") is None:
            t.add_row("dataset", "none written (--dry-run)")
            console.print(t)
            return
        t.add_row("dataset", f"{o.dataset['path']} (sha256 {o.dataset['digest'][:12]})")
        tr = o.training
        if tr:
            t.add_row("training", f"{tr.get('steps', 0)} steps, loss {tr.get('loss_first', '-')} -> "
                                  f"{tr.get('loss_last', '-')}, {tr.get('wall_sec', '-')} s")
            if "logprob_before" in tr:
                t.add_row("mean logprob (accepted)", f"{tr['logprob_before']:.4f} -> {tr['logprob_after']:.4f}")
            if tr.get("kl_coef"):
                t.add_row("KL to the parent", f"coef {tr['kl_coef']:g} ({tr.get('kl_reference')}), "
                                              f"last step {tr.get('kl_last')}")
            tv = tr.get("validation") or {}
            if tv.get("curve"):
                stop = f", stopped at step {tv['stopped_at']}" if tv.get("stopped_at") is not None else ""
                kept = f", kept step {tv['restored_step']}" if tv.get("restored_step") is not None else ""
                t.add_row("validation logprob", " ".join(f"{st}:{val:.3f}" for st, val in tv["curve"]) + stop + kept)
        if o.adapter:
            a = o.adapter
            t.add_row("adapter", f"{a['serve_name']} at {a['path']} "
                                 f"({a['bytes'] / 1e6:.2f} MB, sha256 {a['sha256'][:12]})")
            t.add_row("endpoint", "loaded" if o.loaded.get("loaded") else str(o.loaded.get("note", "not loaded")))
        t.add_row("candidate", f"{o.candidate} ({o.manifest_path})" if o.candidate else "none (export only)")
        console.print(t)
