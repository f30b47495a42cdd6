"""Procedural task families: each an integer difficulty knob and a seed, so `(generator, seed,
difficulty)` reproduces a task byte for byte.

Level 1 of every family is one obvious command with every name given (the reach of a 135M model);
each level up adds a step or a trap that a careless answer falls into. Instances of one family
differ in file names, words and data, not only in a number. Each level writes its verifier in
python3 (present in every base image), declares the paths it reads (integrity level 1), and ships
known-wrong solutions: the careless answers the verifier must refuse.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from rsi.core.discover import TaskDraft
from rsi.loop.generators import GENERATORS, GeneratorError, GenRequest

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
    """What one difficulty level writes; `draft` fills the generator's name, family and knobs."""

    instruction: str
    env_files: dict[str, str]
    test_checks: str
    solve: str
    wrong: list[str]
    reads: list[str]
    what: str


LevelFn = Callable[[random.Random], Level]


class ProceduralFamily:
    """A family of tasks: `levels[d]` writes the task of difficulty d from a seeded RNG."""

    name: str = ""
    family: str = ""
    levels: dict[int, LevelFn] = {}

    @property
    def families(self) -> tuple[str, ...]:
        return (self.family,)

    @property
    def max_level(self) -> int:
        return max(self.levels)

    def generate(self, req: GenRequest) -> TaskDraft:
        if req.difficulty not in self.levels:
            raise GeneratorError(f"generator {self.name}: difficulty {req.difficulty} is not one of "
                                 f"{', '.join(map(str, sorted(self.levels)))}")
        # A string seed is hashed with sha512 by `random`: the same on every run and platform.
        rng = random.Random(f"{self.name}:{req.seed}:{req.difficulty}")
        lv = _name_answer(self.levels[req.difficulty](rng), rng)
        return TaskDraft(
            generator=self.name, family=self.family, difficulty=req.difficulty, seed=req.seed,
            instruction=lv.instruction, dockerfile=dockerfile(lv.env_files), env_files=lv.env_files,
            test_sh=verifier(lv.test_checks, lv.what), solve_sh=script(lv.solve),
            known_wrong=[script(w) for w in lv.wrong], reads=lv.reads, tags=[self.family, f"level-{req.difficulty}"],
        )


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
                 what=lv.what.replace(ANSWER, path))


def register(cls: type[ProceduralFamily]) -> type[ProceduralFamily]:
    GENERATORS.add(cls.name, cls)
    return cls


def pick(rng: random.Random, pool: list[str] | tuple[str, ...], k: int) -> list[str]:
    return rng.sample(list(pool), k)
