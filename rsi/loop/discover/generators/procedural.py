"""Procedural task families: each an integer difficulty knob and a seed, so `(generator, seed,
difficulty)` reproduces a task byte for byte.

A family holds *templates*, each at one level: a distinct operation with its own output shape (files:
create, append, copy, delete, chmod, ...; text: count lines, head, sort, dedupe, ...). Levels 1 and 2
offer several templates each, levels 3 and 4 one; the seed draws the template, then the template draws
its names, data (from a stream keyed by the side it is drawn for and the cycle, `instance_rng`) and one of its
phrasings of the instruction (4+ at levels 1 and 2) on the side the request
asks for (`GenRequest.phrasing_side`: the last `holdout_phrasings` are the in-skill holdout's only). A task
records its template id (`<family>/<template>`): the unit of evaluation, so the holdout split can keep whole
templates apart.

Level 1 of every family is one obvious command with every name given (the reach of a 135M model);
each level up adds a step or a trap that a careless answer falls into. Instances of one template
differ in file names, words, data and wording, not only in a number. Each template writes its
verifier in python3 (present in every base image), checks the output exactly, declares the paths it
reads (integrity level 1), and ships known-wrong solutions: the careless answers the verifier must refuse.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rsi.core.discover import PhrasingSide, TaskDraft, instance_seed, phrasings_on
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest

WORDS = (
    "amber", "apple", "arrow", "aspen", "badge", "basil", "beacon", "birch", "bison", "cabin", "canyon", "cedar",
    "cider", "cloud", "cobalt", "comet", "coral", "cotton", "crane", "delta", "dune", "ember", "falcon", "fern",
    "fjord", "flint", "forest", "galaxy", "garnet", "ginger", "glacier", "granite", "harbor", "hazel", "heron",
    "indigo", "iris", "island", "jade", "jasper", "juniper", "kayak", "kettle", "lagoon", "lantern", "lemon",
    "lilac", "lotus", "maple", "marble", "meadow", "mango", "mint", "nectar", "nickel", "oasis", "olive", "onyx",
    "orchid", "otter", "pebble", "pepper", "pine", "plum", "prairie", "quartz", "quill", "raven", "reef", "river",
    "robin", "saffron", "salmon", "sequoia", "shadow", "spruce", "summit", "tango", "thistle", "tulip", "tundra",
    "velvet", "violet", "walnut", "willow", "yarrow", "zephyr"
)
USERS = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj", "olivia",
    "peggy", "rupert", "sybil", "trent", "victor"
)

DOCKERFILE_HEAD = "ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nWORKDIR /app\n"


def dockerfile(env_files: dict[str, str]) -> str:
    """The base image with each environment file copied to /app at the same relative path."""
    lines = [DOCKERFILE_HEAD.rstrip("\n")]
    for rel in sorted(env_files):
        lines.append(f"COPY {rel} /app/{rel}")
    return "\n".join(lines) + "\n"


def verifier(checks: str, what: str) -> str:
    """test.sh: run python3 `checks` (which call fail(msg) on a wrong answer); always write the reward."""
    return (
        "#!/bin/bash\n"
        f"# Verifier: {what}\n"
        "# Checks with python3 only and always writes /logs/verifier/reward.txt (1 or 0).\n"
        "mkdir -p /logs/verifier\n"
        "if python3 - <<'PY'\n"
        "import sys\n"
        "from pathlib import Path\n\n"
        "def fail(msg):\n"
        "    print('FAIL:', msg)\n"
        "    sys.exit(1)\n\n"
        "def read(path):\n"
        "    p = Path(path)\n"
        "    if not p.is_file():\n"
        "        fail(f'{path} does not exist or is not a regular file')\n"
        "    return p.read_text(errors='replace')\n\n"
        f"{checks.strip()}\n\n"
        "print('PASS')\n"
        "PY\n"
        "then\n"
        "  echo 1 > /logs/verifier/reward.txt\n"
        "else\n"
        "  echo 0 > /logs/verifier/reward.txt\n"
        "fi\n"
    )


def script(body: str) -> str:
    return "#!/bin/bash\nset -e\ncd /app\n" + body.strip() + "\n"


def answer_check(path: str, expected: str) -> str:
    """Checks that `path` holds exactly `expected` (surrounding whitespace ignored)."""
    return (
        f"got = read({path!r}).strip()\n"
        f"if got != {expected!r}:\n"
        f"    fail(f'{path} holds {{got!r}}, expected ' + {expected!r})\n"
    )


def lines_check(path: str, expected: list[str]) -> str:
    return (
        f"got = read({path!r}).splitlines()\n"
        f"want = {expected!r}\n"
        "if got != want:\n"
        f"    fail(f'{path} holds {{got!r}}, expected {{want!r}}')\n"
    )


def q(s: str) -> str:
    return shlex.quote(s)


@dataclass
class Level:
    """What one template writes for one seed; `generate` fills the generator's name, family and knobs.

    `phrasing` is (which, of how many) instruction wordings the template drew (tests check there are 4+ at
    levels 1 and 2, 3+ above); the task records both, and the split holds the last ones out.
    """

    instruction: str
    env_files: dict[str, str]
    test_checks: str
    solve: str
    wrong: list[str]
    reads: list[str]
    what: str
    phrasing: tuple[int, int] = (0, 1)


LevelFn = Callable[[random.Random], Level]


class TemplateRng(random.Random):
    """The seeded RNG a template draws from, told which of its phrasings it may use (`say` reads it)."""

    side: PhrasingSide = "any"
    holdout_phrasings: int = 0


def say(rng: random.Random, phrasings: Sequence[str], **fields: object) -> tuple[str, tuple[int, int]]:
    """One of a template's phrasings, drawn by the seed among those on the requested side (a plain RNG: any),
    filled with `fields`; and (which, how many)."""
    n = len(phrasings)
    side, held = (rng.side, rng.holdout_phrasings) if isinstance(rng, TemplateRng) else ("any", 0)
    allowed = phrasings_on(side, n, held)
    if not allowed:
        raise GeneratorError(f"no {side} phrasing among {n} with {held} held out")
    i = allowed[rng.randrange(len(allowed))]
    return phrasings[i].format(**fields), (i, n)


@dataclass(frozen=True)
class Template:
    """One task shape of a family at one level: `fn` writes an instance from a seeded RNG."""

    id: str  # short id within the family ("create"); the task records "<family>/<id>"
    level: int
    fn: LevelFn = field(compare=False)


class ProceduralFamily:
    """A family of tasks: its templates, each at one level; the seed draws one of the requested level's."""

    name: str = ""
    family: str = ""
    templates: tuple[Template, ...] = ()

    @property
    def families(self) -> tuple[str, ...]:
        return (self.family,)

    @property
    def levels(self) -> dict[int, list[Template]]:
        out: dict[int, list[Template]] = {}
        for t in self.templates:
            out.setdefault(t.level, []).append(t)
        return dict(sorted(out.items()))

    @property
    def max_level(self) -> int:
        return max(self.levels)

    def template_ids(self, level: int | None = None) -> list[str]:
        """Full template ids (`<family>/<template>`), of one level or of all."""
        return [f"{self.family}/{t.id}" for t in self.templates if level is None or t.level == level]

    def template(self, tid: str) -> Template:
        short = tid.split("/", 1)[1] if tid.startswith(f"{self.family}/") else tid
        for t in self.templates:
            if t.id == short:
                return t
        raise GeneratorError(f"generator {self.name}: no template {tid!r}; known: {', '.join(self.template_ids())}")

    def generate(self, req: GenRequest) -> TaskDraft:
        levels = self.levels
        if req.difficulty not in levels:
            raise GeneratorError(f"generator {self.name}: difficulty {req.difficulty} is not one of "
                                 f"{', '.join(map(str, sorted(levels)))}")
        if req.template is not None:
            tpl = self.template(req.template)
            if tpl.level != req.difficulty:
                raise GeneratorError(f"generator {self.name}: template {self.family}/{tpl.id} is level {tpl.level}, "
                                     f"not {req.difficulty}")
        else:
            # A string seed is hashed with sha512 by `random`: the same on every run and platform.
            tpl = random.Random(f"{self.name}:{req.seed}:{req.difficulty}").choice(levels[req.difficulty])
        # The instance depends on (template, side, cycle, seed, level), however the template was chosen.
        # The phrasing is drawn among those on the requested phrasing side only.
        rng = instance_rng(self.name, tpl.id, req)
        lv = _name_answer(tpl.fn(rng), rng)
        return TaskDraft(
            generator=self.name, family=self.family, template=f"{self.family}/{tpl.id}", difficulty=req.difficulty,
            seed=req.seed, side=req.side, cycle=req.cycle, phrasing=lv.phrasing[0], phrasings=lv.phrasing[1],
            instruction=lv.instruction,
            dockerfile=dockerfile(lv.env_files), env_files=lv.env_files,
            test_sh=verifier(lv.test_checks, lv.what), solve_sh=script(lv.solve),
            known_wrong=[script(w) for w in lv.wrong], reads=lv.reads, tags=[self.family, f"level-{req.difficulty}"],
        )


def instance_rng(generator: str, template: str, req: GenRequest) -> TemplateRng:
    """The RNG a template draws an instance from: seeded by (generator, template, side, cycle, seed, level)
    (rsi.core.discover.instance_seed), told the request's phrasing side. The same (template, seed, level) drawn
    for train and for a holdout part gives other names, data and reference."""
    rng = TemplateRng(instance_seed(generator, template, req.side, req.cycle, req.seed, req.difficulty))
    rng.side, rng.holdout_phrasings = req.phrasing_side, req.holdout_phrasings
    return rng


ANSWER = "/app/answer.txt"


def _name_answer(lv: Level, rng: random.Random) -> Level:
    """Give the answer file a seeded name of its own: instances of a family then differ in every name
    (two instructions that differ in one word are near-duplicates to the gate)."""
    if ANSWER not in lv.instruction:
        return lv
    taken = lv.instruction + " ".join(lv.env_files)
    path = f"/app/{rng.choice([w for w in WORDS if w not in taken])}.txt"
    return Level(instruction=lv.instruction.replace(ANSWER, path), env_files=lv.env_files,
                 test_checks=lv.test_checks.replace(ANSWER, path), solve=lv.solve.replace(ANSWER, path),
                 wrong=[w.replace(ANSWER, path) for w in lv.wrong], reads=[r.replace(ANSWER, path) for r in lv.reads],
                 what=lv.what.replace(ANSWER, path), phrasing=lv.phrasing)


def register(cls: type[ProceduralFamily]) -> type[ProceduralFamily]:
    GENERATORS.add(cls.name, cls)
    return cls


def pick(rng: random.Random, pool: list[str] | tuple[str, ...], k: int) -> list[str]:
    return rng.sample(list(pool), k)


def word_lines(rng: random.Random, n: int, per_line: tuple[int, int] = (2, 4)) -> list[str]:
    """`n` lines of 2-4 (by default) random words."""
    return [" ".join(rng.choices(WORDS, k=rng.randint(*per_line))) for _ in range(n)]


# Words no other word contains (and that contain none): a grep for one matches it alone.
PLAIN = tuple(w for w in WORDS if not any(w in o or o in w for o in WORDS if o != w))
