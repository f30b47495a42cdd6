"""The routing-accuracy gate of a mixture candidate: each L0 routes the holdout instructions (the route prompt a
trial sends), scored against the family's gold label; the candidate may not fall below the parent by more than
promotion.routing_margin; a failed route hop is infra, never a wrong route."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsi.core.generation import AdapterRef, GenerationManifest
from rsi.core.mol import RoutingScore, routing_gate_problem
from rsi.core.task import Task, TaskSpec
from rsi.core.trial import Usage
from rsi.loop.promote.routing import routing_evidence
from rsi.models.client import ChoiceRefused, ChoiceResult
from tests.updatekit import workspace

DOMAINS = {"L0": [], "L1": ["files"], "L2": ["data"], "L3": ["pyfix"]}


def _task(name: str, family: str) -> Task:
    spec = TaskSpec.model_validate({"metadata": {"rsi": {"family": family, "split": "holdout"}}})
    return Task(name=name, path=f"/tasks/{name}", spec=spec, instruction=f"Please handle {name}.",
                digest=name.ljust(64, "0"), env_digest="0" * 64, has_solution=True)


def _mol(base: GenerationManifest, gid: str, tag: str) -> GenerationManifest:
    return base.model_copy(update={"id": gid, "schema_version": 2, "adapters": {
        lab: AdapterRef(path=f"a/{lab}", sha256="0" * 64, serve_name=f"{tag}-{lab}", domains=fams)
        for lab, fams in DOMAINS.items()}})


class Router:
    """Routes by the serve name asked: `good-L0` answers the gold label, `bad-L0` always L1, `flaky-L0` fails."""

    def __init__(self) -> None:
        self.prompts: list[list[dict[str, Any]]] = []

    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], *, constraint: str = "choice",
               deadline: float | None = None) -> ChoiceResult:
        self.prompts.append(messages)
        text = messages[-2]["content"]
        gold = "L1" if "files" in text else "L2" if "data" in text else "L3"
        if model.startswith("flaky") and "data" in text:
            raise ChoiceRefused("answered 'Sure'")
        label = gold if not model.startswith("bad") else "L1"
        return ChoiceResult(label=label, margin=2.0, scores=None, usage=Usage(), latency_sec=0.0)


def test_the_gate_compares_candidate_and_parent_routing(tmp_path: Path) -> None:
    ctx = workspace(tmp_path)
    g0 = ctx.generation("gen-0000")
    tasks = [_task("files-a", "files"), _task("data-b", "data"), _task("pyfix-c", "pyfix"), _task("files-d", "files")]
    router = Router()
    gate, scores = routing_evidence(ctx, _mol(g0, "gen-0002", "bad"), _mol(g0, "gen-0001", "good"), tasks,
                                    lambda _g: router)
    assert scores["gen-0001"].accuracy == 1.0 and scores["gen-0002"].accuracy == 0.5
    assert not gate.passed and "below the parent's" in gate.detail
    assert scores["gen-0002"].recall() == {"L1": 1.0, "L2": 0.0, "L3": 0.0}
    # the route prompt ends with the instruction, then the route question naming every label
    assert router.prompts[0][-2]["role"] == "user" and "L3: pyfix" in router.prompts[0][-1]["content"]

    gate, scores = routing_evidence(ctx, _mol(g0, "gen-0002", "flaky"), _mol(g0, "gen-0001", "good"), tasks,
                                    lambda _g: Router())
    assert scores["gen-0002"].infra == 1 and scores["gen-0002"].total == 3 and gate.passed

    gate, _ = routing_evidence(ctx, _mol(g0, "gen-0002", "bad"), g0, tasks, lambda _g: Router())
    assert gate.passed  # a one-adapter parent has no routing to regress from


def test_gate_rules() -> None:
    good, worse = RoutingScore(), RoutingScore()
    for gold in ("L1", "L2", "L3", "L1"):
        good.add(gold, gold)
        worse.add(gold, "L1" if gold == "L2" else gold)
    assert routing_gate_problem(good, worse, 0.3) is None
    assert routing_gate_problem(good, worse, 0.2) is not None
    assert routing_gate_problem(None, RoutingScore(), 0.1) is not None  # nothing routed: never passes


def test_diff_names_the_moved_revisions_and_routing_accuracy() -> None:
    from rsi.core.generation import BaseModelRef, HarnessRef
    from rsi.report.diff import mol_changes

    def gen(gid: str, names: dict[str, str], acc: float | None) -> GenerationManifest:
        return GenerationManifest(
            id=gid, contract="1.0.0", base_model=BaseModelRef(id="b"), harness_config=HarnessRef(name="c", digest="d"),
            metrics={"routing_accuracy": acc} if acc is not None else {},
            adapters={lab: AdapterRef(path=f"a/{n}", sha256=n * 8, serve_name=n, domains=DOMAINS[lab])
                      for lab, n in names.items()})

    a = gen("gen-0001", {"L0": "a0", "L1": "a1", "L2": "a2"}, 0.9)
    b = gen("gen-0002", {"L0": "b0", "L1": "a1", "L2": "a2", "L3": "b3"}, 0.85)
    got = mol_changes(a, b)
    assert [(x["label"], x["state"]) for x in got["labels"]] == [("L0", "moved"), ("L1", "kept"), ("L2", "kept"),
                                                                 ("L3", "added")]
    assert got["routing_accuracy"] == {"a": 0.9, "b": 0.85}


def test_serving_figures_from_the_trials_call_records(tmp_path: Path) -> None:
    import json

    from rsi.loop.promote.routing import serving_figures

    calls = [{"hop": "route", "label": "L0", "prompt_tokens": 100, "cached_tokens": 0, "wall_sec": 0.1},
             {"hop": "answer", "label": "L2", "prompt_tokens": 200, "cached_tokens": 0, "wall_sec": 1.5},
             {"hop": "answer", "label": "L2", "prompt_tokens": 300, "cached_tokens": 250, "wall_sec": 0.3},
             {"hop": "summary", "label": "L2", "prompt_tokens": 320, "cached_tokens": 300, "wall_sec": 0.1}]
    d = tmp_path / "t1"
    d.mkdir()
    (d / "trajectory.json").write_text(json.dumps({"extra": {"rsi": {"mol": {"calls": calls}}}}))
    got = serving_figures(tmp_path, ["t1", "missing"])
    assert got["mol_hop_share"] == 0.1 and got["mol_route_sec"] == 0.1
    assert got["mol_cache_share_L0"] == 0.0 and got["mol_cache_share_L2"] == round(550 / 820, 4)


def test_the_hops_latency_share_counts_the_summary_only_as_long_as_the_turn_waited(tmp_path: Path) -> None:
    """A deferred summary ran while the trial was graded: only the wait after grading is on the turn's path; an
    in-line summary (no `summary_wait_sec`) is wholly on it."""
    import json

    from rsi.loop.promote.routing import serving_figures

    calls = [{"hop": "route", "label": "L0", "prompt_tokens": 1, "cached_tokens": 0, "wall_sec": 0.2},
             {"hop": "answer", "label": "L1", "prompt_tokens": 1, "cached_tokens": 0, "wall_sec": 3.0},
             {"hop": "summary", "label": "L1", "prompt_tokens": 1, "cached_tokens": 0, "wall_sec": 1.8}]
    for name, extra in (("deferred", {"summary_wait_sec": 0.3}), ("inline", {})):
        d = tmp_path / name
        d.mkdir()
        mol = {"calls": calls, "turn_sec": 9.8, **extra}
        (d / "trajectory.json").write_text(json.dumps({"extra": {"rsi": {"mol": mol}}}))
    assert serving_figures(tmp_path, ["deferred"])["mol_hop_latency_share"] == round(0.5 / 10.1, 4)
    assert serving_figures(tmp_path, ["inline"])["mol_hop_latency_share"] == round(2.0 / 11.6, 4)
    assert serving_figures(tmp_path, ["deferred"])["mol_hop_share"] == round(2.0 / 5.0, 4)  # the work: unchanged


def test_the_report_shows_the_hops_share_of_work_and_of_latency() -> None:
    import io

    from rich.console import Console

    from rsi.report.diff import DiffReport
    from rsi.report.diff_html import html
    from rsi.report.diff_render import term

    serving = {"hop_share": 0.42, "hop_latency_share": 0.061, "route_sec": 0.05, "cache_share_L1": 0.5}
    mol = {"labels": [], "routing_accuracy": {"a": None, "b": 0.5}, "serving": serving}
    cfg = {"a": {"name": "c", "digest": "d" * 64}, "b": {"name": "c", "digest": "d" * 64}, "same": True,
           "unified_diff": ""}
    r = DiffReport("gen-0000", "gen-0001", {"a": {}, "b": {}}, cfg,
                   {"a": {"adapters": {}}, "b": {"adapters": {}}, "same": True, "mol": mol},
                   {"a": "1.0.0", "b": "1.0.0", "same_major": True}, True, None)
    r.attribution = {"counts": {"a": {}, "b": {}}, "moved": {}, "kinds": []}
    rec = Console(record=True, width=200, file=io.StringIO())
    rec.print(term(r))
    text = rec.export_text()
    assert "route + summary 42.0% of model time, 6.1% of the turn's latency" in text
    assert "6.1% of the turn&#39;s latency" in html(r) or "6.1% of the turn's latency" in html(r)


def test_the_hops_service_share_leaves_out_queueing_behind_other_trials(tmp_path: Path) -> None:
    import json

    from rsi.loop.promote.routing import serving_figures

    tok = {"prompt_tokens": 1, "cached_tokens": 0}
    calls = [{"hop": "route", "label": "L0", **tok, "wall_sec": 4.2, "queue_sec": 4.0},
             {"hop": "answer", "label": "L1", **tok, "wall_sec": 3.0, "queue_sec": 0.0},
             {"hop": "summary", "label": "L1", **tok, "wall_sec": 2.8, "queue_sec": 2.0}]
    d = tmp_path / "t"
    d.mkdir()
    (d / "trajectory.json").write_text(json.dumps({"extra": {"rsi": {"mol": {"calls": calls}}}}))
    got = serving_figures(tmp_path, ["t"])
    assert got["mol_hop_share"] == round(7.0 / 10.0, 4) and got["mol_hop_service_share"] == round(1.0 / 4.0, 4)
    calls = [{**c, "queue_sec": 0.0} for c in calls]  # no queueing reported: no service figure
    (d / "trajectory.json").write_text(json.dumps({"extra": {"rsi": {"mol": {"calls": calls}}}}))
    assert "mol_hop_service_share" not in serving_figures(tmp_path, ["t"])
