"""The `compose` generator: 2-3 operations of the `files`, `text` and `data` templates chained into one task
(levels 3 and 4 of the curriculum), so a task asks for a *combination* of skills, not one trained command shape.

The steps share paths and values: step 1's output file is step 2's input (an operation that writes in place, like
append, changes its input file; delete removes the chain's original input). The instruction says the whole job
once, in a person's words (several phrasings, the last `holdout_phrasings` held out as for every template), the
environment holds the first step's input, the verifier checks every step's effect (each intermediate file, the
final one, and what must stay untouched), the reference solution is the steps' commands in order, and the
known-wrong answers do part of the work: the first step(s) only, or every step with one done carelessly (the
template's own careless answer). A composition is a template of this generator, recorded as
`template = "compose/<op1>+<op2>[+<op3>]"` with family `compose` and the operations' templates as `ops`.

The steps' shell shapes are their templates' (rsi.loop.discover.generators.shapes): reference shape k does every
step its k-th way (cycling where a step has fewer), and the instance uses one of them (`shape_index`), so the
replays of compositions vary in shape as the templates' do. A third of the instances describe the chain's input
rather than name it ("the only .csv file in /app"); the reference then looks in /app first, as a template's does.

Which combinations train and which are held out is a split like the template split (rsi.core.discover.unit_split
of the template id; see `held_out_compositions`), so a held-out composition of trained operations asks for
skills the model was trained on in a combination (and words) it never was: the in-skill question.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from itertools import permutations
from typing import Any

from rsi.core.discover import PhrasingSide, TaskDraft, unit_split
from rsi.loop.discover.generators import GeneratorError, GenRequest
from rsi.loop.discover.generators.compose_ops import (
    EXT,
    OP_BY_NAME,
    OPS,
    SOURCE_KINDS,
    TERMINAL,
    Op,
    StepIn,
    Value,
    pair_of,
    source,
)
from rsi.loop.discover.generators.procedural import (
    WORDS,
    Level,
    ProceduralFamily,
    Template,
    answer_check,
    lines_check,
    register,
    say,
)

FAMILY = "compose"
DEFAULT_FRACTION = 0.2  # the shipped contract's promotion.holdout_fraction
COPIES = frozenset({"copy", "nested"})
# the environment's one input of a kind, as a person describes it (a pair of files has no such description)
DESCRIBED = {"lines": "the only .txt file in /app", "numbers": "the only .txt file in /app",
             "csv": "the only .csv file in /app", "json_list": "the only .json file in /app",
             "json_obj": "the only .json file in /app", "dir": "the only folder in /app"}
# the frames that say the whole job: {c1}..{c3} are the steps' clauses, {C1} the first one capitalised
FRAMES: dict[int, tuple[str, ...]] = {
    2: (
        "First, {c1}. Then {c2}.",
        "{C1}, and after that {c2}.",
        "There is a small job to do in /app. {C1}. Once that is done, {c2}.",
        "Could you {c1}? Once that is in place, {c2}.",
    ),
    3: (
        "First, {c1}. Next, {c2}. Finally, {c3}.",
        "{C1}; after that, {c2}; and to finish, {c3}.",
        "There is a three-part job to do in /app. {C1}. Once that is done, {c2}. Last of all, {c3}.",
        "Could you {c1}? Then {c2}, and when that is in place, {c3}.",
    ),
}


def flow(names: tuple[str, ...], start: str) -> list[str] | None:
    """The kinds a chain of operations passes through from an input of kind `start` (None: it does not fit)."""
    kinds, ops = [start], [OP_BY_NAME[n] for n in names]
    for i, op in enumerate(ops):
        if kinds[-1] not in op.takes or (op.last_only and i != len(ops) - 1):
            return None
        kinds.append(op.gives or kinds[-1])
    return kinds


def _sensible(names: tuple[str, ...]) -> bool:
    """Chains a person would ask for: no operation twice, no copy of a copy, no count of lines after a step that
    said how many lines to keep, and delete (of the original input) only where no step wrote over that input first."""
    if len(set(names)) != len(names):
        return False
    for a, b in zip(names, names[1:], strict=False):
        if a in COPIES and b in COPIES:
            return False
    if "count-lines" in names and {"head", "tail"} & set(names[:names.index("count-lines")]):
        return False  # the count is the number the instruction just gave
    return not ("delete" in names and any(OP_BY_NAME[n].in_place for n in names))


def start_kinds(names: tuple[str, ...]) -> list[str]:
    """The environment kinds a chain fits (delete needs a single original file)."""
    out = []
    for k in SOURCE_KINDS:
        kinds = flow(names, k)
        if kinds is None or any(x in TERMINAL for x in kinds[1:-1]):
            continue
        if "delete" in names and k in ("dir", "pair"):
            continue
        out.append(k)
    return out


def _all_combinations() -> dict[int, list[tuple[str, ...]]]:
    out: dict[int, list[tuple[str, ...]]] = {2: [], 3: []}
    names = [o.name for o in OPS]
    for k in (2, 3):
        for combo in permutations(names, k):
            if _sensible(combo) and start_kinds(combo):
                out[k].append(combo)
    return out


COMBINATIONS = _all_combinations()


def combination_id(names: tuple[str, ...]) -> str:
    return "+".join(names)


def template_id(names: tuple[str, ...]) -> str:
    return f"{FAMILY}/{combination_id(names)}"


def ops_of(template: str) -> tuple[str, ...]:
    """The operations' templates (`text/sort`, ...) of a composition's template id."""
    short = template.removeprefix(f"{FAMILY}/")
    try:
        return tuple(OP_BY_NAME[n].template for n in short.split("+"))
    except KeyError as e:
        raise GeneratorError(f"{template!r} is not a composition of known operations ({e})") from None


def compositions(level: int | None = None) -> list[str]:
    """Every composition's template id (of level 3: pairs, 4: triples, or both)."""
    return [template_id(c) for k, cs in COMBINATIONS.items() if level in (None, k + 1) for c in cs]


def composition_side(template: str, fraction: float = DEFAULT_FRACTION) -> str:
    """`holdout` or `train`: the template split of the composition's id (what discover's placement uses too)."""
    return unit_split("template", template, fraction)


def trained_operations(template: str, fraction: float = DEFAULT_FRACTION) -> bool:
    """Whether every operation of the composition comes from a template the split trains on."""
    return all(unit_split("template", t, fraction) == "train" for t in ops_of(template))


def held_out_compositions(fraction: float = DEFAULT_FRACTION, level: int | None = None) -> list[str]:
    """The held-out compositions of trained operations: never trained as a combination, every step trained."""
    return [t for t in compositions(level) if composition_side(t, fraction) == "holdout"
            and trained_operations(t, fraction)]


def train_compositions(fraction: float = DEFAULT_FRACTION, level: int | None = None) -> list[str]:
    """The compositions the split trains on (of trained operations only: one step from an unseen template would
    leak that template into training)."""
    return [t for t in compositions(level) if composition_side(t, fraction) == "train"
            and trained_operations(t, fraction)]


def draw_held_out(seed: int, fraction: float = DEFAULT_FRACTION, level: int | None = None,
                  phrasing_side: PhrasingSide = "any", holdout_phrasings: int = 1, **request: Any) -> TaskDraft:
    """A held-out composition's task for `seed`: the seed draws the composition among the held-out ones (of
    `level`, else of both), then its instance, as `generate` would for that template. `request` passes further
    `GenRequest` fields (the side and cycle the instance stream is keyed by)."""
    options = held_out_compositions(fraction, level)
    if not options:
        raise GeneratorError(f"no held-out composition at fraction {fraction:g} (level {level})")
    tid = random.Random(f"{FAMILY}-held-out:{seed}:{level}").choice(options)
    lv = len(tid.split("+")) + 1
    return ComposeGenerator().generate(GenRequest(seed=seed, difficulty=lv, template=tid, phrasing_side=phrasing_side,
                                                  holdout_phrasings=holdout_phrasings, **request))


def _fresh(rng: random.Random) -> Callable[[], str]:
    taken: set[str] = set()

    def fresh() -> str:
        w = rng.choice([w for w in WORDS if w not in taken])
        taken.add(w)
        return w
    return fresh


def _check(path: str, v: Value) -> str:
    if v.kind == "gone":
        return f"if Path({path!r}).exists():\n    fail('{path} must no longer exist')\n"
    if v.kind == "scalar":
        return answer_check(path, v.text.strip())
    if v.kind in ("json_list", "json_obj"):
        return f"if read({path!r}) != {v.text!r}:\n    fail('{path} is not the expected file, byte for byte')\n"
    return lines_check(path, v.lines)


def _script(shells: list[str]) -> str:
    return "\n".join(shells)


def compose(names: tuple[str, ...], rng: random.Random) -> Level:
    """One instance of the chain `names`: the environment, steps, checks, instruction and wrong answers."""
    ops: list[Op] = [OP_BY_NAME[n] for n in names]
    fresh = _fresh(rng)
    env, value, origin = source(rng.choice(start_kinds(names)), rng, fresh)
    described = DESCRIBED.get(value.kind)
    expect: dict[str, Value] = {}  # path -> what it holds at the end (env files first: they must stay)
    declared: dict[str, str] = {}  # path checked -> path declared in reads
    if value.kind == "pair":
        pa, pb, a, b = pair_of(value)
        expect[pa], expect[pb] = Value("lines", "\n".join(a) + "\n"), Value("lines", "\n".join(b) + "\n")
    elif value.kind != "dir":
        expect[origin] = value
    steps, src = [], origin
    for i, op in enumerate(ops):
        kind_out = op.gives or value.kind
        out = src if op.in_place else f"/app/{fresh()}.{EXT.get(kind_out, 'txt')}"
        step = op.step(StepIn(rng=rng, value=value, src=src, out=out, origin=origin, fresh=fresh))
        steps.append(step)
        expect.pop(step.out, None)
        expect[step.out] = step.value
        declared[step.out] = step.reads or step.out
        value, src = step.value, step.out
        if i < len(ops) - 1 and value.kind in TERMINAL:
            raise GeneratorError(f"composition {combination_id(names)}: step {i + 1} ends the chain")
    clauses = [rng.choice(s.clauses) for s in steps]
    fields = {f"c{i + 1}": c for i, c in enumerate(clauses)}
    instruction, ph = say(rng, FRAMES[len(steps)], C1=clauses[0][0].upper() + clauses[0][1:], **fields)
    # a third of the instances say the input as a person would, by what is unique about it in /app (drawn last:
    # nothing else the instance draws moves); not where the clause says `X`'s
    if described and f"`{origin}`'s" not in instruction and rng.random() < 1 / 3:
        instruction = instruction.replace(f"`{origin}`", described, 1)
    checks = "\n".join(_check(p, v) for p, v in expect.items())
    # each step's own effect, measured apart (reward.json's step_<k>): a step whose output a later step rewrote in
    # place has no effect of its own left to check
    per_step = [(f"step_{i + 1}", _check(s.out, s.value)) for i, s in enumerate(steps) if expect.get(s.out) is s.value]
    # careless: every step, one of them (seeded) done the template's careless way, among the steps where that
    # changes the outcome (a sort of one line does not; a copy made a move does not where the original is removed)
    careless_at = [i for i, (op, s) in enumerate(zip(ops, steps, strict=True))
                   if s.careless_differs and not (op.name == "copy" and "delete" in names)]
    wrong = [_script([s.shell for s in steps[:k]]) for k in range(1, len(steps))]
    if careless_at:
        c = careless_at[rng.randrange(len(careless_at))]
        wrong.append(_script([s.careless if i == c else s.shell for i, s in enumerate(steps)]))
    reads = list(dict.fromkeys(declared.get(p, p) for p in expect))
    chains = [_script([s.shapes[k % len(s.shapes)] for s in steps]) for k in range(max(len(s.shapes) for s in steps))]
    return Level(instruction=instruction, env_files=env, test_checks=checks, solve=chains[0], shapes=chains[1:],
                 wrong=wrong, reads=reads, what=f"{combination_id(names)}: every step's effect", phrasing=ph,
                 steps=per_step)


TEMPLATES = tuple(Template(combination_id(c), k + 1, partial(compose, c)) for k, cs in COMBINATIONS.items() for c in cs)
_BY_ID = {t.id: t for t in TEMPLATES}
_LEVELS = {lv: [t for t in TEMPLATES if t.level == lv] for lv in (3, 4)}


@register
class ComposeGenerator(ProceduralFamily):
    """The compositions as templates of one family (`compose`): levels 3 (pairs) and 4 (triples)."""

    name = FAMILY
    family = FAMILY
    templates = TEMPLATES

    @property
    def levels(self) -> dict[int, list[Template]]:
        return _LEVELS  # hundreds of templates: looked up, not regrouped on every draw

    def template(self, tid: str) -> Template:
        return _BY_ID.get(tid.removeprefix(f"{FAMILY}/")) or super().template(tid)

    def draft(self, req: GenRequest, tpl: Template, lv: Level, shape: int | None = None) -> TaskDraft:
        draft = super().draft(req, tpl, lv, shape)
        assert draft.template is not None
        return draft.model_copy(update={"ops": list(ops_of(draft.template))})


__all__ = ["COMBINATIONS", "ComposeGenerator", "combination_id", "composition_side", "compositions", "draw_held_out",
           "flow", "held_out_compositions", "ops_of", "start_kinds", "train_compositions", "trained_operations"]
