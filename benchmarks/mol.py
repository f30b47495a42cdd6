"""Mixture-of-LoRA on the embedded model (issue 26): routing, hop overhead, prefix reuse, resident parameters.

Run (heavy: loads and trains the real model): `flock /tmp/rsi-heavy.lock python benchmarks/mol.py [--steps N]`.
Everything is measured in this one run, on the bundled SmolLM2-135M, in process (the engine the embedded server
runs, no HTTP):

- **E1 routing accuracy** on held-out instructions with gold labels. Instructions come from the six procedural
  families (levels 1-2); templates are split (every third template of a family is held out), so the held-out
  instructions are of templates L0 never saw. L0 is a LoRA trained (rsi.train.local) on the route prompts of
  the train instructions -> gold label, exactly the routing examples `rsi update` makes; the prompt is the one a
  trial's route hop sends (rsi.harness.mol.route_prompt under harness_configs/default.yaml). Reported: accuracy
  with a Wilson 95% interval, per-label recall, the confusion matrix; against always-L0, a seeded random router,
  the keyword router (rsi.core.mol.keyword_route) and the untrained base model as router.
- **E4 hop overhead**: a multi-turn conversation (one user message per held-out instruction, routed by the
  trained L0, one answer call of up to `sampling.max_tokens` tokens, one summary of up to `mol.summary_tokens`):
  route + summary wall time as a share of the turn; and the route by label scoring against a 24-token greedy
  decode from the same prompt (the seed's constrained decode costs at least that many decode steps).
  A real trial's answer hop is several calls plus sandbox time, so this share is an upper bound.
- **E5 prefix reuse per adapter** over the same conversation: the share of each adapter's prompt tokens served
  from the prefix cache.
- **resident parameters**: base + n adapters against n merged copies.

Not measured here (the issue's E6 quality and forgetting need trained specialists evaluated by Docker trials on
the holdout; see the note of the commit that added this script).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

print = functools.partial(print, flush=True)  # noqa: A001  (progress on a shared machine)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.contract import Contract  # noqa: E402
from rsi.core.harness_config import HarnessConfig  # noqa: E402
from rsi.core.mol import MolSpec, RoutingScore, keyword_route, route_question  # noqa: E402
from rsi.core.task import Task, TaskSpec  # noqa: E402
from rsi.core.trial import Usage  # noqa: E402
from rsi.harness.history import TurnEvent  # noqa: E402
from rsi.harness.mol import MolSession, route_prompt  # noqa: E402
from rsi.harness.prompts import initial_messages, prompt_variables  # noqa: E402
from rsi.models.client import ChatResult, ChoiceResult  # noqa: E402

DOMAINS = {"L0": [], "L1": ["files", "text", "pipeline"], "L2": ["data", "logs"], "L3": ["pyfix"]}
FAMILIES = ("files", "text", "pipeline", "data", "logs", "pyfix")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def template_drafts(families: Sequence[str], train_n: int, held_n: int) -> tuple[list[Any], list[Any]]:
    """(train, held-out) task drafts of `families` (levels 1-2); every third template of a family is held out,
    so held-out drafts are of templates no train draft has (benchmarks/mol_quality.py uses them too)."""
    from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators

    load_generators()
    train: list[Any] = []
    held: list[Any] = []
    for fam in families:
        gen: Any = GENERATORS.create(fam)
        tids = [t for lvl in (1, 2) for t in gen.template_ids(lvl)]
        for i, tid in enumerate(tids):
            into, n = (held, held_n) if i % 3 == 2 else (train, train_n)
            for seed in range(n):
                into.append(gen.generate(GenRequest(seed=1000 * i + seed, difficulty=gen.template(tid).level,
                                                    template=tid)))
    return train, held


def instructions(train_per_template: int, held_per_template: int) -> tuple[list[Task], list[Task]]:
    """(train, held-out) tasks of the six families; every third template of a family is held out."""

    def task(d: Any, seed: int) -> Task:
        spec = TaskSpec.model_validate({"metadata": {"rsi": {"family": d.family, "template": d.template}}})
        name = f"{d.template.replace('/', '-')}-{seed}"
        return Task(name=name, path=name, spec=spec, instruction=d.instruction, digest=name.ljust(64, "0"),
                    env_digest="0" * 64, has_solution=True)

    train, held = template_drafts(FAMILIES, train_per_template, held_per_template)
    return [task(d, d.seed % 1000) for d in train], [task(d, d.seed % 1000) for d in held]


class EngineModel:
    """The engine in process, spoken to as the harness speaks to an endpoint (chat + choose)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> ChatResult:
        from rsi.models.server.engine import GenRequest

        t0 = time.monotonic()
        r = self.engine.generate(GenRequest(model=model, messages=messages, max_tokens=kw.get("max_tokens", 256),
                                            stop=kw.get("stop") or []))
        return ChatResult(content=r.text, tool_calls=[], finish_reason=r.finish_reason, model=model,
                          usage=Usage(prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                                      cached_tokens=r.cached_tokens, calls=1),
                          latency_sec=time.monotonic() - t0, raw={}, queue_sec=r.queue_sec,
                          stop_reason=r.stop_reason if isinstance(r.stop_reason, str) else None)

    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], *, constraint: str = "choice",
               deadline: float | None = None) -> ChoiceResult:
        from rsi.models.server.engine import GenRequest

        t0 = time.monotonic()
        r = self.engine.generate(GenRequest(model=model, messages=messages, choice=labels))
        s = sorted((r.choice_scores or {}).values(), reverse=True)
        return ChoiceResult(label=r.text or "", margin=(s[0] - s[1]) if len(s) > 1 else 0.0, scores=r.choice_scores,
                            usage=Usage(prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                                        cached_tokens=r.cached_tokens, calls=1),
                            latency_sec=time.monotonic() - t0)


def train_router(cfg: HarnessConfig, contract: Contract, train: list[Task], steps: int, out: Path, *,
                 legend: bool = False) -> Path:
    """L0 trained on routing examples (each task's route prompt -> its family's label); `legend`: in the
    MolSpec.route_legend form (the labels in L0's system message, a short question)."""
    from rsi.core.training import TrainSettings
    from rsi.models.server.model_files import resolve_model
    from rsi.train.base import TrainRequest
    from rsi.train.dataset import DatasetLine, write_dataset
    from rsi.train.local import LocalBackend

    spec = MolSpec(domains=DOMAINS)
    lines = []
    for t in train:
        msgs = route_prompt(cfg, contract, t, DOMAINS, legend=legend)
        lines.append(DatasetLine(messages=[*msgs, {"role": "assistant", "content": spec.label_of(t.family)}], tools=[],
                                 reward=1.0, accepted=True, group_id=t.name, sample_index=0, advantage=0.0,
                                 prompt_messages=len(msgs), provenance={"routing": True}))
    info = write_dataset(out / "dataset", lines, {})
    settings = TrainSettings(steps=steps, batch_size=4, max_seq_len=1024, kl_coef=0.0, validation_every=10_000,
                             learning_rate=1e-3)
    res = LocalBackend().train(TrainRequest(dataset=info.path, output_dir=out / "adapter", base_model="base",
                                            objective="sft", settings=settings,
                                            base_model_dir=resolve_model(None)[0],
                                            log=lambda m: print(f"  train: {m}", flush=True)))
    assert res.adapter_dir is not None
    return res.adapter_dir


def score(router: Any, tasks: list[Task]) -> RoutingScore:
    spec = MolSpec(domains=DOMAINS)
    s = RoutingScore()
    for t in tasks:
        got = router(t)
        s.add(spec.label_of(t.family), got[0], got[1])
    return s


def line(name: str, s: RoutingScore) -> str:
    lo, hi = wilson(s.correct, s.total)
    return (f"E1 {name}: accuracy {s.accuracy:.3f} ({s.correct}/{s.total}, Wilson 95% [{lo:.3f}, {hi:.3f}]), "
            f"recall {json.dumps({k: round(v, 3) for k, v in s.recall().items()})}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--train-per-template", type=int, default=2)
    ap.add_argument("--held-per-template", type=int, default=2)
    ap.add_argument("--turns", type=int, default=4, help="user messages in the E4/E5 conversation")
    args = ap.parse_args()
    from rsi.models.server.engine import Engine, GenRequest
    from rsi.models.sizing import size_server

    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    cfg = HarnessConfig.model_validate(yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text()))
    train, held = instructions(args.train_per_template, args.held_per_template)
    print(f"instructions: {len(train)} train, {len(held)} held out (templates disjoint), domains {DOMAINS}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        adapter = train_router(cfg, contract, train, args.steps, Path(tmp))
        print(f"L0 trained on {len(train)} routing examples, {args.steps} steps, {time.monotonic() - t0:.0f} s",
              flush=True)
        eng = Engine(sizing=size_server(max_batch=1, env={}))
        try:
            names = {lab: f"mol-{lab.lower()}" for lab in DOMAINS}
            decode_name = "mol-l0-decode24"
            for name in [*names.values(), decode_name]:  # the same weights under each name: the cache is per name
                eng.load_adapter(name, str(adapter))
            model = EngineModel(eng)
            labels = list(DOMAINS)

            def via(serve: str) -> Any:
                def route(t: Task) -> tuple[str, float | None]:
                    r = model.choose(serve, route_prompt(cfg, contract, t, DOMAINS), labels)
                    return r.label, r.margin
                return route

            rng = random.Random(0)
            rec = Recorder("mol", "Mixture-of-LoRA routing, hop overhead, prefix reuse (E1, E4, E5)",
                           context=f"In process, no Docker: {len(held)} held-out instructions (templates disjoint "
                                   f"from the router's {len(train)} training ones); E4/E5 over one conversation.")
            trained = score(via(names["L0"]), held)
            kw = score(lambda t: (keyword_route(t.instruction, DOMAINS), None), held)
            rec.add("E1_routing_accuracy", "E1 routing accuracy, trained L0", trained.accuracy,
                    compare={"keyword router": kw.accuracy})
            print(line("trained L0 (label scoring)", trained))
            print(f"E1 confusion (gold -> predicted): {json.dumps(trained.confusion, sort_keys=True)}")
            print(line("untrained base as router", score(via(eng.model_id), held)))
            print(line("always L0", score(lambda t: ("L0", None), held)))
            print(line("random (seed 0)", score(lambda t: (rng.choice(labels), None), held)))
            print(line("keyword router", score(lambda t: (keyword_route(t.instruction, DOMAINS), None), held)))
            print(f"E1 trained L0 vs keyword router: {trained.accuracy:.3f} vs "
                  f"{score(lambda t: (keyword_route(t.instruction, DOMAINS), None), held).accuracy:.3f}")

            # E4 + E5: one conversation, a user message per held-out instruction (families interleaved)
            eng.prefix_cache.reset()
            convo = sorted(held, key=lambda t: (int(t.name.rsplit("-", 1)[1]), t.name))
            convo = [convo[i] for i in range(0, len(convo), max(1, len(convo) // args.turns))][: args.turns]
            tools = contract.openai_tools(cfg.tools)
            head = initial_messages(cfg, prompt_variables(cfg, instruction="", workdir="/app", tools=tools,
                                                          max_turns=cfg.loop.max_turns, task="conversation"))[:-1]
            spec = MolSpec(domains=DOMAINS, summary_tokens=64)
            sess = MolSession(spec, names, head)
            decode24 = 0.0
            for t in convo:
                sess.add_user(t.instruction)
                rq = sess.view("L0") + [{"role": "user", "content": route_question(DOMAINS)}]
                sess.route(model)
                # the alternative route: a 24-token greedy decode from the same prompt, under a name of its own
                # (its KV stays out of L0's cache); timed, never used to route
                d0 = time.monotonic()
                eng.generate(GenRequest(model=decode_name, messages=rq, max_tokens=24, stop=[]))
                decode24 += time.monotonic() - d0
                res = model.chat(names[sess.label], sess.messages(), max_tokens=cfg.sampling.max_tokens,
                                 stop=list(cfg.sampling.stop))
                sess.record_answer(res, res.latency_sec)
                sess.append(TurnEvent(turn=1, author=sess.label, format="text", content=res.content))
                sess.summarize(model)
            recs = sess.records
            wall = {h: sum(r.wall_sec for r in recs if r.hop == h) for h in ("route", "answer", "summary")}
            total = sum(wall.values())
            print(f"E4 {len(convo)} turns: route {wall['route']:.2f} s, answer {wall['answer']:.2f} s, summary "
                  f"{wall['summary']:.2f} s; route+summary = {(wall['route'] + wall['summary']) / total:.1%} of the "
                  f"turn (target <= 10%, seed 32%); route alone {wall['route'] / total:.1%}")
            rec.add("E4_hop_share", "E4 route + summary share of the turn's latency",
                    100 * (wall["route"] + wall["summary"]) / total, "%", target="<= 10", compare={"seed": 32.0})
            print(f"E4 route by label scoring {wall['route'] / len(convo):.3f} s/turn vs a 24-token decode "
                  f"{decode24 / len(convo):.3f} s/turn: {decode24 / max(wall['route'], 1e-9):.1f}x")
            for lab in DOMAINS:
                mine = [r for r in recs if r.label == lab]
                p = sum(r.prompt_tokens for r in mine)
                c = sum(r.cached_tokens for r in mine)
                print(f"E5 {lab}: {len(mine)} calls, {p} prompt tokens, {c} from the prefix cache "
                      f"({(c / p if p else 0):.1%})")
                rec.add(f"E5_cache_{lab}", f"E5 prefix-cache hit share, {lab}", 100 * (c / p if p else 0), "%")
            print(f"E5 routes: {[e['label'] for e in sess.as_json()['routes']]}")
            # resident parameters
            from safetensors import safe_open

            with safe_open(str(Path(adapter) / "adapter_model.safetensors"), "pt") as f:
                lora = sum(f.get_tensor(k).numel() for k in f.keys())  # noqa: SIM118
            base = sum(p.numel() for n, p in eng.model.named_parameters() if "lora_" not in n)
            n = len(DOMAINS)
            mol_params, merged = base + n * lora, n * base
            print(f"resident parameters: base {base:,} + {n} adapters x {lora:,} = {mol_params:,} vs {n} merged "
                  f"copies {merged:,}: {mol_params / merged - 1:+.1%}")
            rec.add("resident_params", "resident parameters vs merged copies", 100 * (mol_params / merged - 1), "%",
                    compare={"seed": -74.0})
            rec.write()
        finally:
            eng.close()


if __name__ == "__main__":
    main()
