"""Mixture-of-LoRA hops as the user waits for them (issue 41): multi-turn conversations, before and after.

Run (heavy: the real model in process and Docker sandboxes): `flock /tmp/heavy.lock python benchmarks/mol_turns.py`
(`--router DIR` reuses a trained L0; without it L0 is trained first, `--steps` steps, as benchmarks/mol.py E1).

Conversations of `--turns` user messages, each a held-out task instruction of templates L0 never saw (families
interleaved, so the turns go to different specialists). Each user turn: L0 routes it; the chosen adapter acts in a
real Docker sandbox of that task (the harness's own parser and tool runner, up to `--max-steps` replies, the
default config's prompts and limits); the task's own test.sh grades it in that sandbox (Harbor's shared mode);
then the user "reads" for `--think` seconds before the next message. Two arms, interleaved per conversation
(their order alternating) on one engine, each under serve names of its own so neither reuses the other's cache:

- **before** (main before issue 41): the answering adapter summarises its turn right after its answer, in line (the
  seed's three-hop turn); the route prefills the prompt, then scores the labels in a second pass, one row each.
- **after**: lazy summaries (rsi.harness.mol: a slot per turn, filled between user turns or when a view first needs
  it, never before the answer; an action-only turn gets the deterministic digest, no model call), L0's view warmed
  into the prefix cache between turns, the route in one pass (the labels' common `L` prefilled with the prompt).
  `--arms before,after,lazy` adds **lazy**: lazy summaries without the digest (every summary the model's), to read
  the digest against model summaries. The after and lazy arms route in the `MolSpec.route_legend` form (the labels
  explained once in L0's system message, a short question per turn: ~40 fewer tokens to prefill per route) with an
  L0 trained on that form (`--router-legend`, trained like `--router` when missing); **after0** is after without
  the legend (the old question, the `--router` L0), to read the legend's saving alone.

Equal answers: the arms' answers differ (a different view or route gives a different answer, and a longer answer
flatters the hop share), so besides each arm's raw share the script reports every arm's hop seconds on the path
against the SAME answer seconds, the before arm's on each paired turn (`*_hop_share_equal_answers`, the figure the
target is read on), and the mean hop seconds per turn (the robust number). Hop seconds on the path count the
route, the summary (in line, or waited for) and any wait behind idle-time hop work (a settle still holding the
session when the message arrives, an answer call queued behind a warm-up).

Per turn: the user-visible latency (message in -> the adapter's last reply and its tool runs out; `before` also
waits for its summary, since its next turn cannot start without it), the hops on that path (route; the summary, or
the wait for one idle time had not finished), and the compute spent on hops wherever it ran (route, summary,
warm-up). Per arm: hop share of latency (sum over turns) and route share; routing accuracy against gold labels;
pass rate; prefix-cache share per adapter; the first turn of each conversation alone (the single-turn figure). One-
sided tests (scipy): after's routing and pass not lower (exact McNemar on the paired turns), after's per-turn hop
share lower (Wilcoxon signed-rank). L0 is the trained router; each specialist is an identity LoRA (answers as the
base model, as `rsi demo --mol`'s untrained specialists do), each under a serve name of its own; `--specialist
DIR` serves a trained adapter instead (e.g. the demo's promoted generation), so answers pass and the pass-rate test
can show a loss (recorded as mol_turns_trained).
"""

from __future__ import annotations

import argparse
import functools
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

print = functools.partial(print, flush=True)  # noqa: A001  (progress on a shared machine)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mol import EngineModel, instructions, template_drafts, train_router  # noqa: E402  (benchmarks/mol.py)

from rsi.core.contract import Contract  # noqa: E402
from rsi.core.digest import merge_digests  # noqa: E402
from rsi.core.discover import render_task  # noqa: E402
from rsi.core.harness_config import HarnessConfig  # noqa: E402
from rsi.core.limits import effective_limits  # noqa: E402
from rsi.core.mol import MolSpec  # noqa: E402
from rsi.core.task import Task  # noqa: E402
from rsi.harness.actions import parse_text_reply, run_invocation, truncate_middle  # noqa: E402
from rsi.harness.history import CallRecord, TurnEvent  # noqa: E402
from rsi.harness.mol import MolSession  # noqa: E402
from rsi.harness.prompts import initial_messages, prompt_variables  # noqa: E402
from rsi.sandbox.base import LABEL_JOB, LABEL_KIND, LABEL_TRIAL, SandboxSpec  # noqa: E402

DOMAINS = {"L0": [], "L1": ["files", "text", "pipeline"], "L2": ["data", "logs"], "L3": ["pyfix"]}
FAMILIES = ("files", "text", "pipeline", "data", "logs", "pyfix")
BASE_IMAGE = "rsi-base:bookworm"
JOB = "bench-mol-turns"
LEGEND = {"after": True, "lazy": True}  # arms routing in the MolSpec.route_legend form (their own trained L0)
DIGEST = ("after", "after0")  # arms whose action-only turns get the digest
# arms the target (<= 10 % at equal answers) is read on: every lever (after) and every lever the
# measurements keep (lazy: the digest lengthened the answers, docs/mol.md)
TARGET_ARMS = ("after", "lazy")


@dataclass
class TurnRow:
    arm: str
    convo: int
    turn: int
    task: str
    gold: str
    label: str
    latency: float
    route: float  # the route hop's own call
    summary_path: float  # summary seconds on the path (in line, or waited for)
    passed: bool
    steps: int
    wait_in: float = 0.0  # the message waited for idle-time work holding the session (on the path)
    answer_queue: float = 0.0  # the answer calls waited in the engine's queue behind idle-time work (on the path)
    answer_tokens: int = 0  # tokens the answering adapter decoded this turn

    @property
    def hop(self) -> float:
        """Hop seconds on the user's path: the route, the summary (in line or waited for), and any wait behind
        idle-time hop work (settle, warm-up) that spilled into this turn."""
        return self.route + self.summary_path + self.wait_in + self.answer_queue

    @property
    def answer(self) -> float:
        """The rest of the turn: the answer's own work (its model calls and tool runs)."""
        return self.latency - self.hop


@dataclass
class Arm:
    name: str
    rows: list[TurnRow] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)  # every HopRecord of every conversation
    digests: int = 0
    model_summaries: int = 0


    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], **kw: Any) -> Any:
        self.engine.choice_one_pass = not model.startswith("before-")  # `before`: prefill, then a label pass
        return super().choose(model, messages, labels, **kw)


def held_out_tasks(per_template: int, into: Path) -> list[Task]:
    from rsi.store.files import load_task

    _, held = template_drafts(FAMILIES, 1, per_template)
    out = []
    for i, d in enumerate(held):
        name = f"{(d.template or d.family).replace('/', '-')}-{i}"
        for rel, text in render_task(d, name=name, split="holdout", discovered_by=None).items():
            p = into / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            if rel.endswith(".sh"):
                p.chmod(0o755)
        out.append(load_task(into / name))
    return out


def conversations(tasks: list[Task], n: int, turns: int, seed: int) -> list[list[Task]]:
    """`n` conversations of `turns` tasks; consecutive turns of different specialists where possible."""
    spec = MolSpec(domains=DOMAINS)
    rng = random.Random(seed)
    by_label: dict[str, list[Task]] = {}
    for t in tasks:
        by_label.setdefault(spec.label_of(t.family), []).append(t)
    for v in by_label.values():
        rng.shuffle(v)
    labels = sorted(by_label)
    out, k = [], 0
    for _ in range(n):
        convo, prev = [], None
        for _ in range(turns):
            choices = [lab for lab in labels if lab != prev] or labels
            lab = choices[k % len(choices)]
            k += 1
            pool = by_label[lab]
            convo.append(pool[k % len(pool)])
            prev = lab
        out.append(convo)
    return out


def grade(box: Any, task: Task, contract: Contract, timeout: float) -> bool:
    """The task's test.sh in the agent's sandbox (Harbor's shared mode); pass as the contract reads the reward."""
    box.exec("rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier", timeout=60)
    box.put_dir(Path(task.path) / "tests", "/tests")
    box.exec("bash /tests/test.sh", timeout=timeout, workdir=task.spec.environment.workdir)
    raw = box.get_file("/logs/verifier/reward.txt")
    try:
        return raw is not None and float(raw.decode().strip() or "nan") >= contract.grading.pass_threshold
    except ValueError:
        return False


def run_turn(arm: Arm, sess: MolSession, model: Any, task: Task, cfg: HarnessConfig, contract: Contract,
             provider: Any, images: dict[str, str], convo: int, turn: int, max_steps: int,
             on_answer: Any = None) -> float:
    """One user turn in a fresh sandbox of `task` (started before the message arrives: a served conversation's
    sandbox is already up); `on_answer` runs as the answer is out (idle-time work); the answer's time."""
    lim = effective_limits(task.spec, contract, cfg)
    workdir = task.spec.environment.workdir
    box = provider.start(SandboxSpec(image=images[task.name], cpus=1.0, memory_mb=1024, workdir=workdir,
                                     labels={LABEL_JOB: JOB, LABEL_TRIAL: f"{arm.name}-{convo}-{turn}",
                                             LABEL_KIND: "trial"}))
    try:
        time.sleep(1.0)  # the conversation's sandbox is up and idle before the message arrives
        n_rec = len(sess.records)
        t0 = time.monotonic()  # the user's message arrives
        sess.add_user(task.instruction)  # blocks while idle-time work (settle) holds the session
        wait_in = time.monotonic() - t0
        sess.route(model)
        steps = 0
        for step in range(1, max_steps + 1):
            res = model.chat(sess.serve_names[sess.label], sess.messages(), max_tokens=lim.max_tokens_per_turn,
                             stop=list(cfg.sampling.stop))
            content = (res.content or "") + (res.stop_reason or "")  # the closing fence back, as the loop does
            sess.record_answer(res, res.latency_sec)
            parsed = parse_text_reply(content, cfg.loop.finish_word, turn=step)
            outs = [run_invocation(box, inv, workdir=workdir, command_timeout=lim.command_timeout_sec)
                    for inv in parsed.invocations]
            for o in outs:
                o.content = truncate_middle(o.content, lim.observation_max_chars)
            sess.append(TurnEvent(
                turn=step, author=sess.label, format="text", content=content,
                calls=tuple(CallRecord("", i.name, i.raw_arguments, i.arguments) for i in parsed.invocations),
                observations=tuple(o.content for o in outs),
                note=truncate_middle(parsed.error, lim.observation_max_chars) if parsed.error else None))
            steps = step
            if parsed.finish:
                break
        if sess.summaries == "inline":
            sess.summarize(model)  # the seed's third hop: the turn ends with it
        t_answer = time.monotonic()
        latency = t_answer - t0
        sess.end_turn()
        if on_answer is not None:
            on_answer()
        new = sess.records[n_rec:]
        route = sum(r.wall_sec for r in new if r.hop == "route")
        on_path = (sum(r.wall_sec for r in new if r.hop == "summary") if sess.summaries == "inline"
                   else sess.summary_wait.get(sess.user_turn, 0.0))
        answers = [r for r in new if r.hop == "answer"]
        passed = grade(box, task, contract, lim.verifier_timeout_sec)
    finally:
        box.stop()
    gold = MolSpec(domains=DOMAINS).label_of(task.family)
    arm.rows.append(TurnRow(arm.name, convo, turn, task.name, gold, sess.label, latency, route, on_path, passed,
                            steps, wait_in=wait_in, answer_queue=sum(r.queue_sec for r in answers),
                            answer_tokens=sum(r.completion_tokens for r in answers)))
    return t_answer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", type=Path, help="a trained L0 adapter directory (reused), or where to train one")
    ap.add_argument("--router-legend", type=Path,
                    help="the L0 of the legend arms (after, lazy), trained on the route_legend form: a trained "
                         "adapter directory, or where to train one (as --router)")
    ap.add_argument("--steps", type=int, default=12, help="L0 training steps when no --router is given")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4, help="user messages per conversation")
    ap.add_argument("--max-steps", type=int, default=3, help="replies per user turn at most")
    ap.add_argument("--think", type=float, default=4.0, help="seconds from an answer to the next user message")
    ap.add_argument("--arms", default="before,after")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--specialist", type=Path,
                    help="a trained LoRA adapter directory every specialist (L1-L3) serves instead of the identity "
                         "LoRA, e.g. a demo generation's adapters/agent/g0001-*: answers that pass, so the pass-rate "
                         "test has something to lose; records as mol_turns_trained")
    args = ap.parse_args()
    t_start = time.monotonic()
    if args.specialist is not None and not (args.specialist / "adapter_config.json").is_file():
        ap.error(f"--specialist {args.specialist}: no adapter_config.json there (a PEFT LoRA adapter directory)")
    import rsi.models.server.engine as engine_mod
    from rsi.models.server.choice import score_labels
    from rsi.models.server.engine import Engine
    from rsi.models.sizing import size_server
    from rsi.sandbox.docker import DockerSandboxProvider

    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    cfg = HarnessConfig.model_validate(yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text()))
    arms = [Arm(a) for a in args.arms.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        tasks = held_out_tasks(1, Path(tmp) / "tasks")
        convos = conversations(tasks, args.conversations, args.turns, args.seed)
        used = {t.name: t for c in convos for t in c}
        provider = DockerSandboxProvider()
        base_id = provider.image_id(BASE_IMAGE)
        images = {}
        for t in used.values():
            ref = provider.ensure_image(Path(t.path) / "environment",
                                        merge_digests({"env": t.env_digest, "base": base_id or BASE_IMAGE}),
                                        build_args={"BASE_IMAGE": BASE_IMAGE}, timeout=600)
            images[t.name] = ref.tag
        print(f"{len(convos)} conversations x {args.turns} turns over {len(used)} held-out tasks; images ready")
        routers: dict[bool, Path] = {}
        for legend, given in ((False, args.router), (True, args.router_legend)):
            if not any(LEGEND.get(a.name, False) is legend for a in arms):
                continue
            for cand in (given, given / "adapter" if given else None):
                if cand is not None and (cand / "adapter_config.json").is_file():
                    routers[legend] = cand
                    break
            else:
                train, _ = instructions(2, 1)
                routers[legend] = train_router(cfg, contract, train, args.steps,
                                               given or Path(tmp) / f"router-{int(legend)}", legend=legend)
                print(f"L0 trained ({args.steps} steps{', legend form' if legend else ''}): {routers[legend]}")
        eng = Engine(sizing=size_server(max_batch=1, env={}))

        def scoring(*a: Any, **kw: Any) -> list[float]:  # `before` scores one row per label, as main did
            return score_labels(*a, shared=not str(a[4] or "").startswith("before-"), **kw)

        engine_mod.score_labels = scoring  # type: ignore[assignment]
        try:
            from rsi.train.peft_dir import write_identity_adapter

            identity = Path(tmp) / "identity"  # specialists answer as the base does (the demo's new specialists)
            write_identity_adapter(next(iter(routers.values())), identity, "base")
            specialist = args.specialist or identity
            for arm in arms:
                for lab in DOMAINS:
                    l0 = routers[LEGEND.get(arm.name, False)]
                    eng.load_adapter(f"{arm.name}-{lab.lower()}", str(l0 if lab == "L0" else specialist))
            model = EngineModel(eng)
            head = initial_messages(cfg, prompt_variables(cfg, instruction="", workdir="/app",
                                                          tools=contract.openai_tools(cfg.tools),
                                                          max_turns=cfg.loop.max_turns, task="conversation"))[:-1]
            t_all = time.monotonic()
            signal.signal(signal.SIGTERM, _stop)
            try:
                run_all(convos, arms, model, cfg, contract, provider, images, head, args)
            except KeyboardInterrupt:  # out of time: report the turns measured so far (paired turns only)
                print("stopped early: reporting the turns measured so far")
            print(f"measured in {time.monotonic() - t_all:.0f} s")
        finally:
            eng.close()
            provider.gc(set(), scope={JOB})
    report(arms, args, time.monotonic() - t_start)


def _stop(*_: Any) -> None:
    raise KeyboardInterrupt


def run_all(convos: list[list[Task]], arms: list[Arm], model: Any, cfg: HarnessConfig, contract: Contract,
            provider: Any, images: dict[str, str], head: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Every conversation in every arm, the arms' order alternating per conversation."""
    for ci, convo in enumerate(convos):
        order = arms if ci % 2 == 0 else list(reversed(arms))
        for arm in order:
            names = {lab: f"{arm.name}-{lab.lower()}" for lab in DOMAINS}
            spec = MolSpec(domains=DOMAINS, summary_tokens=64, route_legend=LEGEND.get(arm.name, False))
            sess = MolSession(spec, names, head, summaries="inline" if arm.name == "before" else "lazy",
                              finish_word=cfg.loop.finish_word if arm.name in DIGEST else None)
            idle: list[threading.Thread] = []
            for ti, task in enumerate(convo, 1):

                def between(s: MolSession = sess) -> None:  # the user is reading the answer
                    s.settle(model)
                    s.prewarm(model)

                def start_idle(last: bool = ti == len(convo), idle: list[threading.Thread] = idle) -> None:
                    if not last:
                        idle.append(threading.Thread(target=between, daemon=True))
                        idle[-1].start()

                t_out = run_turn(arm, sess, model, task, cfg, contract, provider, images, ci, ti,
                                 args.max_steps, on_answer=None if arm.name == "before" else start_idle)
                r = arm.rows[-1]
                print(f"  {arm.name} c{ci} t{ti} {task.name[:28]:28} gold {r.gold} -> {r.label}: "
                      f"{r.latency:.2f} s (route {r.route:.2f}, summary on path {r.summary_path:.2f}, "
                      f"idle work spilled {r.wait_in + r.answer_queue:.2f}; answer {r.answer:.2f} s, "
                      f"{r.answer_tokens} tok), {r.steps} step(s), pass {int(r.passed)}")
                time.sleep(max(0.0, args.think - (time.monotonic() - t_out)))
            for th in idle:
                th.join()
            arm.records += sess.records
            for ev in sess.as_json()["summaries"]:
                arm.digests += ev.get("source") == "digest"
                arm.model_summaries += ev.get("source") == "model" or ("source" not in ev)


def report(arms: list[Arm], args: argparse.Namespace, wall_sec: float | None = None) -> None:
    from scipy.stats import binomtest, wilcoxon

    try:
        from _records import Recorder
    except ImportError:  # pragma: no cover - records helper not present
        Recorder = None  # type: ignore[assignment,misc]  # noqa: N806
    trained = args.specialist is not None
    who = f"every specialist serves a trained adapter ({args.specialist.name}), not the identity LoRA; " \
        if trained else ""
    rec = Recorder("mol_turns_trained" if trained else "mol_turns",
                   "MoL hops in multi-turn conversations (issue 41)"
                   + (", trained specialists (answers that pass)" if trained else ""),
                   context=f"{who}{args.conversations} conversations x {args.turns} turns, think {args.think:g} s, "
                           f"max {args.max_steps} replies per turn; arms {','.join(a.name for a in arms)} interleaved "
                           "on one in-process engine; 2 shared CPU cores") if Recorder else None
    if rec is not None:  # the run is the script's, whichever record it writes; its wall time is the whole run's
        rec.command = " ".join(["python", "benchmarks/mol_turns.py", *sys.argv[1:]])
        rec.wall_sec = wall_sec

    def fig(fid: str, label: str, value: Any, unit: str = "", **kw: Any) -> None:
        if rec is not None:
            rec.add(fid, label, value, unit, **kw)
        print(f"{fid}: {value if not isinstance(value, float) else round(value, 4)} {unit}  ({label})")

    by = {a.name: a for a in arms}
    for a in arms:
        rows = a.rows
        lat = sum(r.latency for r in rows)
        hop = sum(r.hop for r in rows)
        first = [r for r in rows if r.turn == 1]
        calls = {h: [x for x in a.records if x.hop == h] for h in ("route", "answer", "summary", "warm")}
        fig(f"{a.name}_hop_share", f"{a.name}: route + summary on the path / user-visible latency (raw: each arm's "
            "own answers)", hop / lat, compare={"seed": 0.32})
        fig(f"{a.name}_hop_sec_mean", f"{a.name}: mean hop seconds on the path per turn (route + summary + waits "
            "behind idle-time hop work)", hop / len(rows), "s")
        fig(f"{a.name}_answer_sec_mean", f"{a.name}: mean answer seconds per turn (latency less the hops on the "
            "path)", sum(r.answer for r in rows) / len(rows), "s")
        fig(f"{a.name}_answer_tokens_mean", f"{a.name}: mean answer tokens decoded per turn",
            statistics.mean(r.answer_tokens for r in rows))
        fig(f"{a.name}_idle_spill_mean", f"{a.name}: mean wait per turn behind idle-time hop work (in the hop "
            "seconds)", sum(r.wait_in + r.answer_queue for r in rows) / len(rows), "s")
        fig(f"{a.name}_route_share", f"{a.name}: route / user-visible latency", sum(r.route for r in rows) / lat)
        fig(f"{a.name}_latency_mean", f"{a.name}: mean user-visible latency per turn", lat / len(rows), "s")
        fig(f"{a.name}_latency_median", f"{a.name}: median user-visible latency per turn",
            statistics.median(r.latency for r in rows), "s")
        fig(f"{a.name}_route_mean", f"{a.name}: mean route hop", statistics.mean(r.route for r in rows), "s")
        fig(f"{a.name}_summary_path_mean", f"{a.name}: mean summary seconds on the path",
            statistics.mean(r.summary_path for r in rows), "s")
        fig(f"{a.name}_single_turn_hop_share", f"{a.name}: first turns alone (single-turn): hop share",
            sum(r.hop for r in first) / sum(r.latency for r in first))
        model_sec = {h: sum(x.wall_sec for x in v) for h, v in calls.items()}
        fig(f"{a.name}_hop_compute_sec", f"{a.name}: compute on hops wherever it ran (route+summary+warm)",
            model_sec["route"] + model_sec["summary"] + model_sec["warm"], "s")
        fig(f"{a.name}_hop_model_share", f"{a.name}: hops' share of all model seconds",
            (model_sec["route"] + model_sec["summary"] + model_sec["warm"]) / max(sum(model_sec.values()), 1e-9))
        fig(f"{a.name}_summaries", f"{a.name}: model summaries made / digests", f"{a.model_summaries}/{a.digests}")
        acc = sum(r.gold == r.label for r in rows)
        fig(f"{a.name}_routing_accuracy", f"{a.name}: routing accuracy ({acc}/{len(rows)})", acc / len(rows))
        ok = sum(r.passed for r in rows)
        fig(f"{a.name}_pass_rate", f"{a.name}: pass rate ({ok}/{len(rows)})", ok / len(rows))
        for lab in DOMAINS:
            mine = [x for x in a.records if x.label == lab and x.hop != "warm"]
            p = sum(x.prompt_tokens for x in mine)
            fig(f"{a.name}_cache_share_{lab}", f"{a.name}: prefix-cache share of {lab}'s prompt tokens "
                f"({len(mine)} calls, warm-ups left out)", sum(x.cached_tokens for x in mine) / p if p else 0.0)
        rt = calls["route"]
        p = sum(x.prompt_tokens for x in rt)
        fig(f"{a.name}_route_uncached_tokens", f"{a.name}: mean tokens a route prefilled (not from the cache)",
            (p - sum(x.cached_tokens for x in rt)) / max(len(rt), 1))
        new_tokens = [x.prompt_tokens - x.cached_tokens for x in rt]
        if len(set(new_tokens)) > 1:  # what one route costs: a forward's fixed part + its new tokens' prefill
            from scipy.stats import linregress

            fit = linregress(new_tokens, [x.wall_sec - x.queue_sec for x in rt])
            fig(f"{a.name}_route_fixed_sec", f"{a.name}: a route's fixed seconds (least-squares intercept of route "
                f"seconds on new tokens, {len(rt)} routes, r = {fit.rvalue:.2f})", float(fit.intercept), "s")
            fig(f"{a.name}_route_sec_per_token", f"{a.name}: a route's seconds per new token (the slope)",
                float(fit.slope) * 1000, "ms")
    if "before" in by:
        b = by["before"]
        others = [a.name for a in arms if a.name != "before"]
        for name in others:
            a = by[name]
            key = {(r.convo, r.turn): r for r in b.rows}
            pairs = [(key[(r.convo, r.turn)], r) for r in a.rows if (r.convo, r.turn) in key]
            for what, get in (("routing", lambda r: r.gold == r.label), ("pass", lambda r: r.passed)):
                worse = sum(get(x) and not get(y) for x, y in pairs)
                better = sum(get(y) and not get(x) for x, y in pairs)
                p = binomtest(worse, worse + better, 0.5, alternative="greater").pvalue if worse + better else 1.0
                fig(f"{name}_{what}_not_lower_p", f"{name} vs before: {what}, exact McNemar one-sided p that "
                    f"{name} is lower ({worse} worse, {better} better turns)", float(p))
            # equal answers: both arms' hop seconds against the SAME answer seconds (the before arm's, turn by
            # turn), so answers that ran longer in one arm cannot flatter its share; pooled: against the mean of
            # both arms' answer seconds on that turn (the symmetric reading)
            hb, ha = sum(x.hop for x, _ in pairs), sum(y.hop for _, y in pairs)
            ans_b = sum(x.answer for x, _ in pairs)
            ans_p = sum((x.answer + y.answer) / 2 for x, y in pairs)
            if name == others[0]:  # (the before arm's raw share on the paired turns: its answers are the reference)
                fig("before_hop_share_equal_answers", f"before: hop seconds on the path / (those + the before arm's "
                    f"answer seconds) ({len(pairs)} turns paired with {name})", hb / (hb + ans_b),
                    compare={"seed": 0.32})
            fig(f"{name}_hop_share_equal_answers", f"{name}: hop seconds on the path / (those + the before arm's "
                f"answer seconds on the same turns): the share at equal answers ({len(pairs)} turns)",
                ha / (ha + ans_b), target="<= 0.10" if name in TARGET_ARMS else None, compare={"seed": 0.32})
            rng = random.Random(0)  # paired bootstrap over turns: how sure the equal-answers share is
            boot = []
            for _ in range(10_000):
                idx = [rng.randrange(len(pairs)) for _ in pairs]
                h, ans = sum(pairs[i][1].hop for i in idx), sum(pairs[i][0].answer for i in idx)
                boot.append(h / (h + ans) if h + ans else 0.0)
            boot.sort()
            fig(f"{name}_hop_share_equal_answers_ci95", f"{name}: equal-answers share, paired bootstrap 95 % interval "
                f"(share above 10 % in {sum(b > 0.10 for b in boot) / len(boot):.0%} of resamples)",
                f"[{boot[249]:.3f}, {boot[9749]:.3f}]")
            fig(f"{name}_hop_share_equal_answers_pooled", f"{name}: hop seconds on the path / (those + the mean of "
                f"both arms' answer seconds on the same turns)", ha / (ha + ans_p))
            fig(f"{name}_hop_sec_ratio", f"{name} / before: hop seconds on the path per turn",
                ha / hb if hb else float("nan"), "x")
            hd = [y.hop - x.hop for x, y in pairs]
            p = float(wilcoxon(hd, alternative="less").pvalue) if any(hd) else 1.0
            fig(f"{name}_hop_sec_lower_p", f"{name} vs before: per-turn hop seconds on the path, Wilcoxon "
                "one-sided p that they are lower", p)
            sb = [x.hop / x.latency for x, _ in pairs]
            sa = [y.hop / y.latency for _, y in pairs]
            differ = any(u != v for u, v in zip(sa, sb, strict=True))
            p = float(wilcoxon(sa, sb, alternative="less").pvalue) if differ else 1.0
            fig(f"{name}_hop_share_lower_p", f"{name} vs before: per-turn hop share, Wilcoxon one-sided p", p)
            fig(f"{name}_latency_ratio", f"{name} / before: mean user-visible latency",
                statistics.mean(y.latency for _, y in pairs) / statistics.mean(x.latency for x, _ in pairs), "x")
    if "after" in by and "after0" in by:  # the route legend alone: after (legend) against after0 (without)
        key = {(r.convo, r.turn): r for r in by["after0"].rows}
        pairs = [(key[(r.convo, r.turn)], r) for r in by["after"].rows if (r.convo, r.turn) in key]
        worse = sum(x.gold == x.label and y.gold != y.label for x, y in pairs)
        better = sum(y.gold == y.label and x.gold != x.label for x, y in pairs)
        p = binomtest(worse, worse + better, 0.5, alternative="greater").pvalue if worse + better else 1.0
        fig("legend_routing_not_lower_p", f"after (route legend) vs after0 (without): routing, exact McNemar "
            f"one-sided p that it is lower ({worse} worse, {better} better turns)", float(p))
        fig("legend_route_ratio", "after / after0: mean route hop (the route legend's saving)",
            statistics.mean(y.route for _, y in pairs) / statistics.mean(x.route for x, _ in pairs), "x")
    if rec is not None:
        rec.write()


if __name__ == "__main__":
    main()
