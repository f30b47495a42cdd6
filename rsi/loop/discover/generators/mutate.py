"""`mutate`: a harder (or easier) variant of a pool task, by moving its family's difficulty knob.

It picks a pool task made by a procedural generator (the request's seed chooses which), keeps that
task's seed and generator and asks for the next level up; down instead when the task's last probe
saw the current generation solve none of it (the family is out of reach there) or it is at the top.
The variant is drawn for the request's side and cycle (not the parent's): it is a new instance.
The variant names the pool task as its `parent_task`.
"""

from __future__ import annotations

import random

from rsi.core.discover import TaskDraft
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest
from rsi.loop.discover.generators.procedural import ProceduralFamily


class MutateGenerator:
    name = "mutate"
    families = ("*",)
    max_level = 10

    def generate(self, req: GenRequest) -> TaskDraft:
        parents = [p for p in req.pool if p.generator in GENERATORS.names() and p.seed is not None
                   and p.generator not in ("mutate", "model") and (req.family is None or p.family == req.family)]
        if not parents:
            raise GeneratorError("mutate: no pool task made by a procedural generator to vary"
                                 + (f" in family {req.family}" if req.family else ""))
        parent = random.Random(f"mutate:{req.seed}").choice(sorted(parents, key=lambda p: p.name))
        family = GENERATORS.create(parent.generator or "")
        assert isinstance(family, ProceduralFamily)
        step = -1 if (parent.probe_pass_rate == 0 or parent.difficulty >= family.max_level) else 1
        level = parent.difficulty + step
        if level not in family.levels:
            raise GeneratorError(f"mutate: {parent.name} is at difficulty {parent.difficulty}; "
                                 f"{family.name} has no level {level}")
        draft = family.generate(GenRequest(seed=parent.seed or 0, difficulty=level, phrasing_side=req.phrasing_side,
                                           holdout_phrasings=req.holdout_phrasings, side=req.side, cycle=req.cycle))
        return draft.model_copy(update={"parent_task": parent.name, "tags": [*draft.tags, "mutated"]})


GENERATORS.add("mutate", MutateGenerator)
