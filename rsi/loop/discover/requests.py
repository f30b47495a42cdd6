"""The deterministic sequence of generator calls a discover job makes (rsi.loop.discover.phase).

Generators take turns, seeds count up from the job's base seed, and the level is the request's (`levels`
cycles through several, `difficulty` pins one) or the family's curriculum level. Plain requests ask for train
phrasings (`phrasing_side="train"`): a train template then never yields a task in a held-out phrasing. A
holdout-only job under a template (or family) split asks the procedural generators for templates by name, those
not yet in that part of the holdout first, so `rsi discover --holdout-only --n K` adds K templates where it can
(the paired test counts templates, not tasks): for the `unseen` part (the default) the holdout templates in any
phrasing; for the `in_skill` part the *train* templates in their held-out phrasings only, or the templates the
request names (`templates`: the cycle names held-out compositions of trained operations, in any phrasing).

Every request names the side its instance is drawn for (`GenRequest.side`: `train`, or the holdout part a
holdout-only job tops up) and the job's cycle: the instance's names, data and reference come from a stream keyed
by both, so a train seed of one job that equals a holdout seed of another still draws another instance.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from rsi.core.contract import HoldoutUnit
from rsi.core.discover import PhrasingSide, unit_split
from rsi.core.task import HoldoutPart, InstanceSide
from rsi.loop.discover.generators import GENERATORS, GenRequest
from rsi.loop.discover.generators.procedural import ProceduralFamily

HOLDOUT_TRIES = 25  # requests per wanted candidate when holdout-only must filter drafts by their split


class Asked(Protocol):
    n: int
    families: list[str]
    holdout_only: bool
    part: HoldoutPart
    difficulty: int | None
    levels: list[int]
    seed: int | None
    cycle: int


def side_of(req: Asked) -> InstanceSide:
    """The side a request's instances are drawn for: the holdout part a holdout-only job tops up, else train (a
    plain draft that lands on a held-out template records `train`: the stream it was drawn from)."""
    return req.part if req.holdout_only else "train"


def seed_of(req: Asked, i: int) -> int:
    return (req.seed or 0) * 100_003 + i


def plain_requests(req: Asked, gens: list[str], levels: dict[str, int], max_level: int,
                   holdout_phrasings: int = 0) -> list[tuple[str, GenRequest]]:
    """(generator, request) pairs: generators round-robin, then families, then the request's levels; each asks
    for a train phrasing (the last `holdout_phrasings` of a template are the in-skill holdout's)."""
    out = []
    families: list[str | None] = list(req.families) or [None]
    budget = req.n * (HOLDOUT_TRIES if req.holdout_only else 1)  # holdout-only keeps going until n holdout ones
    for i in range(budget):
        gname = gens[i % len(gens)]
        fam = families[(i // len(gens)) % len(families)]
        g = GENERATORS.create(gname)
        fam = fam if fam is not None else (g.families[0] if g.families[0] != "*" else None)
        if req.families and g.families[0] != "*" and fam not in g.families:
            continue
        if req.levels:
            level = req.levels[(i // (len(gens) * len(families))) % len(req.levels)]
        else:
            level = req.difficulty or levels.get(fam or "", 1)
        out.append((gname, GenRequest(seed=seed_of(req, i), difficulty=min(level, g.max_level, max_level),
                                      family=fam, phrasing_side="train", holdout_phrasings=holdout_phrasings,
                                      side=side_of(req), cycle=req.cycle)))
    return out


def holdout_templates(req: Asked, gens: list[str], levels: dict[str, int], max_level: int, unit: HoldoutUnit,
                      fraction: float, part: HoldoutPart = "unseen") -> list[tuple[str, int, str]]:
    """(generator, level, template) of every template the request allows (its levels, else its difficulty,
    else every level up to the family's curriculum level) that feeds the holdout's `part`: the templates the
    unit split holds out (`unseen`), or the train templates (`in_skill`, asked for in held-out phrasings)."""
    want = "holdout" if part == "unseen" else "train"
    named = set(aimed_templates(req))
    out = []
    for gname in dict.fromkeys(gens):  # a generator named twice (to weigh it in plain requests) counts once
        g = GENERATORS.create(gname)
        if not isinstance(g, ProceduralFamily) or (req.families and g.family not in req.families):
            continue
        allowed = req.levels or ([req.difficulty] if req.difficulty else range(1, levels.get(g.family, 1) + 1))
        for lv in dict.fromkeys(allowed):  # a level given twice (to weigh it in plain requests) counts once
            if lv not in g.levels or lv > max_level:
                continue
            for tid in g.template_ids(lv):
                if named:  # the caller chose them (e.g. held-out compositions of trained operations)
                    if tid in named:
                        out.append((gname, lv, tid))
                elif unit_split(unit, tid if unit == "template" else g.family, fraction) == want:
                    out.append((gname, lv, tid))
    return out


def aimed_templates(req: Asked) -> list[str]:
    """The templates a request names to aim at (`templates`; none: the split decides)."""
    return list(getattr(req, "templates", None) or [])


def holdout_requests(req: Asked, gens: list[str], levels: dict[str, int], max_level: int, unit: HoldoutUnit,
                     fraction: float, covered: Collection[str],
                     holdout_phrasings: int = 0) -> list[tuple[str, GenRequest]] | None:
    """Holdout-only requests aimed at the templates of the request's part (`covered`: those that part already
    has, asked for last); None when the split is by task (nothing to aim at: drafts are filtered by their
    placement) or no procedural generator is asked for. `in_skill` requests draw held-out phrasings only, and
    there are none without held-out phrasings."""
    if unit == "task":
        return None
    if req.part == "in_skill" and holdout_phrasings < 1 and not aimed_templates(req):
        return []
    options = holdout_templates(req, gens, levels, max_level, unit, fraction, req.part)
    if not options:
        return None if not any(isinstance(GENERATORS.create(g), ProceduralFamily) for g in gens) else []
    ordered = _interleave([o for o in options if o[2] not in covered]) + \
        _interleave([o for o in options if o[2] in covered])
    out = []
    for i in range(req.n * HOLDOUT_TRIES):
        gname, lv, tid = ordered[i % len(ordered)]
        fam = tid.split("/", 1)[0]
        # a template the split holds out was never trained in any words; a train template only in held-out ones
        held = unit_split(unit, tid if unit == "template" else fam, fraction) == "holdout"
        side: PhrasingSide = "holdout" if req.part == "in_skill" and not held else "any"
        out.append((gname, GenRequest(seed=seed_of(req, i), difficulty=lv, family=fam, template=tid,
                                      phrasing_side=side, holdout_phrasings=holdout_phrasings, side=req.part,
                                      cycle=req.cycle)))
    return out


def train_template_requests(req: Asked, gens: list[str], levels: dict[str, int], max_level: int, unit: HoldoutUnit,
                            fraction: float, holdout_phrasings: int = 0) -> list[tuple[str, GenRequest]] | None:
    """Requests aimed at the train templates in turn (families interleaved), each in a train phrasing: n
    candidates spread evenly over every template the split trains on, none wasted on a held-out template. None
    where there is nothing to aim at (the split is by task, or no procedural generator is asked for)."""
    if unit == "task":
        return None
    options = _interleave(holdout_templates(req, gens, levels, max_level, unit, fraction, "in_skill"))
    if not options:
        return None
    out = []
    for i in range(req.n):
        gname, lv, tid = options[i % len(options)]
        out.append((gname, GenRequest(seed=seed_of(req, i), difficulty=lv, family=tid.split("/", 1)[0], template=tid,
                                      phrasing_side="train", holdout_phrasings=holdout_phrasings, side="train",
                                      cycle=req.cycle)))
    return out


def _interleave(options: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """Families take turns (each family's templates in their own order), so a few requests span families."""
    by: dict[str, list[tuple[str, int, str]]] = {}
    for o in options:
        by.setdefault(o[2].split("/", 1)[0], []).append(o)
    out = []
    for i in range(max((len(v) for v in by.values()), default=0)):
        out += [v[i] for v in by.values() if i < len(v)]
    return out


__all__ = ["HOLDOUT_TRIES", "aimed_templates", "holdout_requests", "holdout_templates", "plain_requests", "side_of",
           "train_template_requests"]
