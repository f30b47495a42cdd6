"""No leakage (DESIGN §12): what a training dataset may not hold, decided from provenance and measured on actions.

Pure: the update gathers each sample's provenance (task digest, template, phrasing, its actions) and the sealed
side's facts (holdout and suite digests, unseen-template holdout templates, held-out phrasings, the unseen
templates' reference commands), and this module says which samples leak and why:

- `sealed_task`: the sample's task is a holdout or suite task;
- `unseen_template`: its template is an unseen-template holdout template (never trained on at all);
- `holdout_phrasing`: its task is worded in a phrasing the in-skill holdout keeps (a phrasing is on one side only);
- `reference_overlap`: its actions hold most of an unseen-template reference's command n-grams (the reference
  reached training by another road: a hint, a replay, a demonstration);
- `same_instance`: its task equals a holdout or suite task in environment and reference (`instance_digest` of the
  environment's files and solution/solve.sh): another name and wording of a sealed task is the sealed task.

The overlap is also reported as a figure (the highest share over all samples), refused or not; and for every
in-skill holdout task the nearest reference among the train tasks that feed the dataset (`nearest_references`:
how close the training data came to the question the superiority gate asks).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from hashlib import sha256

from rsi.core.digest import digest_obj

NGRAM = 4
# A reference of fewer n-grams (under six words) is too generic to say where a sample's command came from
# (`echo ok > out.txt` is anyone's answer): it is counted (`short_references`) and not used for the overlap rule.
MIN_REFERENCE_NGRAMS = 3


@dataclass(frozen=True)
class SampleFacts:
    """One training sample's provenance."""

    sample_id: str  # the trial id (or a label such as `few_shot:2` for a config's demonstration)
    task_digest: str | None
    template: str | None
    phrasing: int | None
    phrasings: int | None
    actions: tuple[str, ...] = ()
    task_name: str | None = None
    instance: str | None = None  # instance_digest of its task (environment + reference)
    # its own task's reference commands: what the sample's task itself needs is never counted as another's
    own_reference: tuple[str, ...] = ()


@dataclass(frozen=True)
class SealedFacts:
    """What no sample may touch."""

    sealed_digests: frozenset[str] = frozenset()  # holdout and suite tasks
    unseen_templates: frozenset[str] = frozenset()
    holdout_phrasings: frozenset[tuple[str, int]] = frozenset()  # (template, phrasing) the in-skill holdout uses
    holdout_phrasing_count: int = 0  # the last N phrasings of every template are held out (the contract's)
    unseen_references: dict[str, tuple[str, ...]] = field(default_factory=dict)  # task name -> reference commands
    max_overlap: float = 0.5
    # instance_digest -> "holdout task NAME" / "suite task NAME": what no train task may equal
    sealed_instances: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Leak:
    sample_id: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.sample_id}: {self.rule} ({self.detail})"


@dataclass
class LeakReport:
    leaks: list[Leak]
    max_overlap: float  # the highest share of an unseen reference's n-grams found in one sample
    max_overlap_with: str | None  # (sample, reference task) of that figure
    samples: int
    references: int
    short_references: int = 0  # unseen references too short to attribute a sample's command to (not used)
    nearest: list[Nearest] = field(default_factory=list)  # per in-skill holdout task (update fills it in)

    @property
    def ok(self) -> bool:
        return not self.leaks

    def as_json(self) -> dict[str, object]:
        by_rule: dict[str, int] = {}
        for leak in self.leaks:
            by_rule[leak.rule] = by_rule.get(leak.rule, 0) + 1
        return {"ok": self.ok, "samples": self.samples, "unseen_references": self.references,
                "short_references": self.short_references,
                "max_reference_overlap": round(self.max_overlap, 4), "max_overlap_with": self.max_overlap_with,
                "leaks": by_rule, "examples": [str(x) for x in self.leaks[:5]],
                **nearest_summary(self.nearest)}


@dataclass(frozen=True)
class Nearest:
    """The train reference most similar to a sealed task's (0..1, rapidfuzz's ratio on the reference commands)."""

    task: str  # the sealed (in-skill holdout) task
    train_task: str | None  # None: no train reference to compare with
    similarity: float

    def as_json(self) -> dict[str, object]:
        return {"task": self.task, "train_task": self.train_task, "similarity": round(self.similarity, 4)}


def instance_digest(env_digest: str, solve_sh: bytes) -> str:
    """What a task *is*, its name, wording and verifier aside: the digest of its environment's files (the
    loader's `env_digest`) and its reference solution's bytes."""
    return digest_obj(["instance", env_digest, sha256(solve_sh).hexdigest()])


def reference_text(actions: Iterable[str]) -> str:
    """A reference's commands as one text to compare (whitespace runs folded)."""
    return "\n".join(" ".join(a.split()) for a in actions if a.strip())


def nearest_references(sealed: Mapping[str, str], train: Mapping[str, str]) -> list[Nearest]:
    """For each sealed task (name -> reference text), the train task (name -> reference text) whose reference
    is most similar (rapidfuzz's normalised Levenshtein ratio, 0..1), sealed tasks in name order; ties go to the
    first train name in order."""
    from rapidfuzz import fuzz  # here: only update compares references, and every command imports this module

    names = sorted(train)
    out = []
    for task in sorted(sealed):
        best: tuple[str | None, float] = (None, 0.0)
        for other in names:
            score = fuzz.ratio(sealed[task], train[other]) / 100.0
            if best[0] is None or score > best[1]:
                best = (other, score)
        out.append(Nearest(task=task, train_task=best[0], similarity=best[1]))
    return out


def nearest_summary(nearest: list[Nearest]) -> dict[str, object]:
    """The report's part: every in-skill task's nearest train reference, and the highest similarity."""
    if not nearest:
        return {}
    top = max(nearest, key=lambda n: n.similarity)
    return {"in_skill_nearest_train_reference": [n.as_json() for n in nearest],
            "in_skill_max_similarity": round(top.similarity, 4),
            "in_skill_max_similarity_with": f"{top.task} ~ {top.train_task}" if top.train_task else None}


def command_ngrams(actions: Iterable[str], n: int = NGRAM) -> set[tuple[str, ...]]:
    """Word n-grams of shell commands (the words of each command line; fences and the finish word are not)."""
    grams: set[tuple[str, ...]] = set()
    for text in actions:
        for line in _command_lines(text):
            try:
                words = shlex.split(line, comments=True, posix=True)
            except ValueError:
                words = line.split()
            if len(words) < n:
                if words:
                    grams.add(tuple(words))
                continue
            grams.update(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return grams


def _command_lines(text: str) -> list[str]:
    """The lines of the shell blocks in a reply (the whole text when it has no fence)."""
    blocks = re.findall(r"```(?:bash|sh|shell)?\n(.*?)(?:```|$)", text, flags=re.DOTALL)
    body = "\n".join(blocks) if blocks else text
    return [ln.strip() for ln in body.splitlines() if ln.strip()]


def overlap(sample: set[tuple[str, ...]], reference: set[tuple[str, ...]]) -> float:
    """The share of a reference's n-grams present in a sample (0 when the reference has none)."""
    return len(sample & reference) / len(reference) if reference else 0.0


def held_out_phrasing(phrasing: int | None, phrasings: int | None, holdout_count: int) -> bool:
    """Whether a task's wording is one of its template's held-out phrasings (the last `holdout_count`)."""
    if phrasing is None or phrasings is None or holdout_count <= 0:
        return False
    return phrasing >= phrasings - holdout_count


def find_leaks(samples: list[SampleFacts], sealed: SealedFacts) -> LeakReport:
    leaks: list[Leak] = []
    grams_of = {name: command_ngrams(cmds) for name, cmds in sealed.unseen_references.items()}
    refs = {name: g for name, g in grams_of.items() if len(g) >= MIN_REFERENCE_NGRAMS}
    best, best_with = 0.0, None
    for s in samples:
        if s.task_digest is not None and s.task_digest in sealed.sealed_digests:
            leaks.append(Leak(s.sample_id, "sealed_task", f"task {s.task_digest[:12]} is a holdout or suite task"))
        if s.template is not None and s.template in sealed.unseen_templates:
            leaks.append(Leak(s.sample_id, "unseen_template", f"template {s.template} is an unseen-template "
                                                              "holdout template"))
        if s.template is not None and s.phrasing is not None and (
                (s.template, s.phrasing) in sealed.holdout_phrasings
                or held_out_phrasing(s.phrasing, s.phrasings, sealed.holdout_phrasing_count)):
            leaks.append(Leak(s.sample_id, "holdout_phrasing", f"phrasing {s.phrasing} of {s.template} is the "
                                                               "in-skill holdout's"))
        sealed_as = sealed.sealed_instances.get(s.instance or "") if s.instance else None
        if sealed_as is not None:
            leaks.append(Leak(s.sample_id, "same_instance", f"train task {s.task_name or s.task_digest} equals "
                                                            f"{sealed_as} in environment and reference (instance "
                                                            f"{(s.instance or '')[:12]})"))
        # n-grams its own task's reference holds are that task's work: a train template and an unseen one may share
        # plumbing (`| sort | uniq -c | awk ...`), and a replay of the train one must not read as a leak of the other
        grams = command_ngrams(s.actions) - command_ngrams(s.own_reference)
        for name, ref in refs.items():
            share = overlap(grams, ref)
            if share > best:
                best, best_with = share, f"{s.sample_id} ~ {name}"
            if share > sealed.max_overlap:
                leaks.append(Leak(s.sample_id, "reference_overlap",
                                  f"{share:.0%} of unseen holdout task {name}'s reference command n-grams"))
    return LeakReport(leaks=leaks, max_overlap=best, max_overlap_with=best_with, samples=len(samples),
                      references=len(refs), short_references=len(grams_of) - len(refs))


__all__ = ["MIN_REFERENCE_NGRAMS", "NGRAM", "Leak", "LeakReport", "Nearest", "SampleFacts", "SealedFacts",
           "command_ngrams", "find_leaks", "held_out_phrasing", "instance_digest", "nearest_references",
           "nearest_summary", "overlap", "reference_text"]
