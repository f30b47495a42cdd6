"""Procedural task families: each an integer difficulty knob and a seed, so `(generator, seed,
difficulty)` reproduces a task byte for byte.

A family holds *templates*, each at one level: a distinct operation with its own output shape (files:
create, append, copy, delete, chmod, ...; text: count lines, head, sort, dedupe, ...). Levels 1 and 2
offer several templates each, levels 3 and 4 one; the seed draws the template, then the template draws
its names, data (from a stream keyed by the side it is drawn for and the cycle, `instance_rng`) and one of its
phrasings of the instruction (6 at levels 1 and 2, the last two in a person's words: a file described, "the only
.log file in /app", or a value spelt out, "the first three lines", rather than every value handed over in
backticks) on the side the request asks for (`GenRequest.phrasing_side`: the last `holdout_phrasings` are the
in-skill holdout's only). A task records its template id (`<family>/<template>`): the unit of evaluation, so the
holdout split can keep whole templates apart.

A template offers every natural shell shape of its answer where the shell has several (`wc -l <`, `grep -c ''`,
`awk 'END {print NR}'`, `sed -n '$='`: `Level.shapes` beside `solve`), and the instance's reference is one of them
(`shape_index`), so the oracle replays that become training data vary in shape across instances, not only in
names; the verifier checks effects, so each passes. Where the instruction describes a file rather than naming it,
the reference first lists the folder it is in (`look_lines`): a replay then never uses a name it was not shown.

Level 1 of every family is one obvious command with every name given or plainly described (the reach of a
135M model); each level up adds a step or a trap that a careless answer falls into. Instances of one template
differ in file names, words, data and wording, not only in a number. Each template writes its verifier in
python3 (present in every base image), checks the output exactly, declares the paths it reads (integrity level
1), and ships known-wrong solutions: the careless answers the verifier must refuse (none of them a shape).
"""

from __future__ import annotations

import json
import random
import re
import shlex
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256

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


def verifier(checks: str, what: str, steps: Sequence[tuple[str, str]] = ()) -> str:
    """test.sh: run python3 `checks` (which call fail(msg) on a wrong answer); always write the reward. With
    `steps` ((metric name, checks) per step of a composition), each step's checks are run on their own first and
    reward.json holds a 1/0 per step beside `reward`, which is still `checks` alone: which step an agent got
    wrong is measured, never rewarded."""
    head = (
        "#!/bin/bash\n"
        f"# Verifier: {what}\n"
        "# Checks with python3 only and always writes /logs/verifier/reward.txt (1 or 0).\n"
        "mkdir -p /logs/verifier\n"
    )
    helpers = (
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
    )
    if not steps:
        return (
            head + "if python3 - <<'PY'\n" + helpers + f"{checks.strip()}\n\n" + "print('PASS')\n" + "PY\n"
            "then\n"
            "  echo 1 > /logs/verifier/reward.txt\n"
            "else\n"
            "  echo 0 > /logs/verifier/reward.txt\n"
            "fi\n"
        )
    parts = [f"def _{name}():\n{textwrap.indent(code.strip(), '    ')}\n\n" for name, code in steps]
    parts.append(f"def _all():\n{textwrap.indent(checks.strip(), '    ')}\n\n")
    names = ", ".join(f"({name!r}, _{name})" for name, _ in steps)
    return (
        head + "echo 0 > /logs/verifier/reward.txt\n" + "python3 - <<'PY'\n" + helpers + "import json\n\n"
        + "".join(parts)
        + "def ok(fn):\n"
        "    try:\n"
        "        fn()\n"
        "    except SystemExit:\n"
        "        return 0\n"
        "    return 1\n\n"
        f"metrics = {{name: ok(fn) for name, fn in [{names}]}}\n"
        "reward = ok(_all)\n"
        "print('PASS' if reward else 'FAIL: see above', metrics)\n"
        "Path('/logs/verifier/reward.json').write_text(json.dumps({'reward': reward, **metrics}))\n"
        "Path('/logs/verifier/reward.txt').write_text(f'{reward}\\n')\n"
        "PY\n"
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
    levels 1 and 2, 3+ above); the task records both, and the split holds the last ones out. `shapes` are other
    correct answers, each a whole script as `solve` is, that the shell offers for the same effect: the instance's
    reference is one of `references` (`shape_index`).
    """

    instruction: str
    env_files: dict[str, str]
    test_checks: str
    solve: str
    wrong: list[str]
    reads: list[str]
    what: str
    phrasing: tuple[int, int] = (0, 1)
    shapes: list[str] = field(default_factory=list)
    steps: list[tuple[str, str]] = field(default_factory=list)  # (metric, checks) per step (compositions)

    @property
    def references(self) -> list[str]:
        """Every correct reference the template wrote: `solve` first, then the other shapes."""
        return [self.solve, *self.shapes]


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
        tpl, lv = self.draw(req)
        return self.draft(req, tpl, lv)

    def draw(self, req: GenRequest) -> tuple[Template, Level]:
        """The template the request asks for (or the seed draws) and its instance, with every reference shape."""
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
        return tpl, _name_answer(tpl.fn(rng), rng)

    def draft(self, req: GenRequest, tpl: Template, lv: Level, shape: int | None = None) -> TaskDraft:
        """The task of an instance `draw` gave, its reference the instance's own shape (`shape_index`) or, for a
        test that runs each, shape `shape` of `lv.references`."""
        tid = f"{self.family}/{tpl.id}"
        k = shape_index(tid, lv) if shape is None else shape
        return TaskDraft(
            generator=self.name, family=self.family, template=tid, difficulty=req.difficulty,
            seed=req.seed, side=req.side, cycle=req.cycle, phrasing=lv.phrasing[0], phrasings=lv.phrasing[1],
            instruction=lv.instruction,
            dockerfile=dockerfile(lv.env_files), env_files=lv.env_files,
            test_sh=verifier(lv.test_checks, lv.what, lv.steps), solve_sh=script(reference(lv, k)),
            known_wrong=[script(w) for w in lv.wrong], reads=lv.reads, tags=[self.family, f"level-{req.difficulty}"],
        )


def shape_index(template: str, lv: Level) -> int:
    """Which of the instance's reference shapes is its reference: a stable hash (sha256) of the template, the
    environment and every shape, so it is a function of the instance (its names and data come from the instance's
    stream, `instance_rng`) and draws nothing from that stream (no name, datum or phrasing moves). Two instances
    equal in environment and answer get the same reference bytes, so `rsi update`'s `same_instance` rule (a train
    task equal to a sealed one in environment and reference) still sees them as one."""
    refs = lv.references
    if len(refs) == 1:
        return 0
    key = json.dumps([template, sorted(lv.env_files.items()), refs])
    return int(sha256(key.encode()).hexdigest()[:16], 16) % len(refs)


def _named(path: str, text: str) -> bool:
    """Whether `text` names `path` (or a path under it)."""
    return re.search(re.escape(path) + r"(?![\w.-])", text) is not None


def look_lines(lv: Level, ref: str) -> list[str]:
    """`ls DIR` for each folder holding an environment file or folder that `ref` uses and the instruction does not
    name (it describes it: "the only .log file in /app"), so the reference, and a replay of it, first looks where
    the thing described is rather than using a name it was never given."""
    places: set[str] = set()
    for rel in lv.env_files:
        parts = rel.split("/")
        places.update("/app/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
    used = sorted((p for p in places if _named(p, ref) and not _named(p, lv.instruction)),
                  key=lambda p: ref.index(p))
    dirs = list(dict.fromkeys(p.rsplit("/", 1)[0] for p in used))
    return [f"ls {d}" for d in dirs]


def reference(lv: Level, k: int) -> str:
    """Shape `k` of the instance's references, after the look at what the instruction only describes."""
    ref = lv.references[k]
    return "\n".join([*look_lines(lv, ref), ref])


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
    return replace(lv, instruction=lv.instruction.replace(ANSWER, path),
                   test_checks=lv.test_checks.replace(ANSWER, path), solve=lv.solve.replace(ANSWER, path),
                   wrong=[w.replace(ANSWER, path) for w in lv.wrong], reads=[r.replace(ANSWER, path) for r in lv.reads],
                   what=lv.what.replace(ANSWER, path), shapes=[x.replace(ANSWER, path) for x in lv.shapes])


def register(cls: type[ProceduralFamily]) -> type[ProceduralFamily]:
    GENERATORS.add(cls.name, cls)
    return cls


def pick(rng: random.Random, pool: list[str] | tuple[str, ...], k: int) -> list[str]:
    return rng.sample(list(pool), k)


def word_lines(rng: random.Random, n: int, per_line: tuple[int, int] = (2, 4)) -> list[str]:
    """`n` lines of 2-4 (by default) random words."""
    return [" ".join(rng.choices(WORDS, k=rng.randint(*per_line))) for _ in range(n)]


NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}

# Words no other word contains (and that contain none): a grep for one matches it alone.
PLAIN = tuple(w for w in WORDS if not any(w in o or o in w for o in WORDS if o != w))
