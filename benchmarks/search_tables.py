"""Solving tables for the P5 search benchmark, drawn at random, and a pure simulation of a search on one.

A solving table says which task each candidate config solves, as benchmarks/policy_server.py will
answer it: 4 tasks any config solves (the baseline too), 18 tasks that exactly one of six useful
search_space values fixes, 2 tasks no config solves. What varies from table to table, drawn from the
table's seed:
- how many of the 18 tasks each useful value fixes (a uniformly random composition of 18 into six
  parts, each at least 1: [3, 3, 3, 3, 3, 3] is as likely as [1, 1, 1, 2, 5, 8]), and so which value
  is the true best single config;
- where the useful values sit among the 14 decoys that fix nothing (the order of each path's values).

`simulate` runs rsi.core.search on a table without sandboxes or a server (every cell's result is the
table's), with the baseline solving the four `any-*` tasks in one attempt each, as the end-to-end
benchmark's template workspace does; `adopted` is what rsi.core.pareto adopts from that evidence.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from benchmarks.policy_server import BASE, CONFIG, FIXES, rule_for
from rsi.core.harness_config import HarnessConfig
from rsi.core.pareto import outcome
from rsi.core.search import SearchState, next_cells
from rsi.core.variants import single_field_variants, variant_label

NEED = 18
ANY = 4
NEVER = 2
# Values that fix no task (the policy server solves a `need-*` task only with its one required value).
DECOYS: dict[str, list[object]] = {
    "sampling.temperature": [0.0, 0.1, 0.3, 0.4, 0.5, 0.9],
    "loop.max_turns": [2, 4, 6, 7, 10],
    "prompt.system": [f"Variant {v}. Reply with one bash block. You have {{{{ max_turns }}}} turns." for v in "CDE"],
}
# The search_space value each FIXES entry stands for, by path.
_PATH = {"temperature": "sampling.temperature", "turns": "loop.max_turns", "variant": "prompt.system",
         "few_shot": "prompt.few_shot"}


def _value(fix: dict[str, Any]) -> tuple[str, Any]:
    (key, v), = fix.items()
    if key == "variant":
        return _PATH[key], f"Variant {v}. Reply with one bash block. You have {{{{ max_turns }}}} turns."
    if key == "few_shot":
        return _PATH[key], []
    return _PATH[key], v


@dataclass(frozen=True)
class Table:
    index: int
    counts: tuple[int, ...]  # tasks fixed by FIXES[i], in FIXES order
    space: dict[str, list[Any]]  # the search_space, each path's values in this table's order
    decoys: bool

    @property
    def useful(self) -> list[str]:
        """Candidate labels of FIXES, in FIXES order."""
        return [variant_label(dict([_value(f)])) for f in FIXES]

    @property
    def best(self) -> set[str]:
        """The true best single config(s): the useful value(s) that fix the most tasks."""
        top = max(self.counts)
        return {lab for lab, n in zip(self.useful, self.counts, strict=True) if n == top}

    def rules(self) -> dict[str, dict[str, Any] | None]:
        """Task name -> the policy server's rule."""
        out: dict[str, dict[str, Any] | None] = {f"any-{i}": {} for i in range(ANY)}
        for j, (fix, n) in enumerate(zip(FIXES, self.counts, strict=True)):
            for i in range(n):
                out[f"need-{j}-{i}"] = rule_for(fix)
        out.update({f"never-{i}": None for i in range(NEVER)})
        return out

    def fixer(self) -> dict[str, str]:
        """need-task -> the one candidate label that solves it."""
        return {f"need-{j}-{i}": lab for j, (lab, n) in enumerate(zip(self.useful, self.counts, strict=True))
                for i in range(n)}

    def config_text(self, url: str) -> str:
        raw = yaml.safe_load(CONFIG.format(endpoint=url))
        raw["search_space"] = self.space
        return str(yaml.safe_dump(raw, sort_keys=False))

    def describe(self) -> str:
        short = {"sampling.temperature": "t", "loop.max_turns": "turns", "prompt.system": "variant",
                 "prompt.few_shot": "few_shot"}
        parts = [f"{short[_PATH[k]]}={'[]' if k == 'few_shot' else v}:{n}"
                 for f, n in zip(FIXES, self.counts, strict=True) for k, v in f.items()]
        return f"table {self.index}: " + " ".join(parts)


def draw_table(index: int, decoys: bool = True) -> Table:
    rng = random.Random(f"p5-table-{index}")
    cuts = sorted(rng.sample(range(1, NEED), len(FIXES) - 1))
    counts = tuple(b - a for a, b in zip([0, *cuts], [*cuts, NEED], strict=True))
    raw = yaml.safe_load(CONFIG.format(endpoint="http://x"))
    space: dict[str, list[Any]] = {}
    for path, values in raw["search_space"].items():
        extra = list(DECOYS.get(path, [])) if decoys else []
        vals = [*values, *extra]
        rng.shuffle(vals)
        space[path] = vals
    return Table(index, counts, space, decoys)


def candidates(table: Table) -> list[str]:
    """The candidate labels `rsi expand` makes of the table's search_space, in its order."""
    cfg = HarnessConfig.model_validate({**yaml.safe_load(table.config_text("http://x")), "search_space": table.space})
    return [variant_label(a) for a in single_field_variants(cfg)]


def simulate(table: Table, strategy: str, budget: int, seed: int, round_size: int = 8) -> SearchState:
    rules = table.rules()
    fix = table.fixer()
    # tasks in the order rsi expand's pool has them (task directories sorted by name)
    state = SearchState(candidates=candidates(table), tasks=sorted(rules),
                        base_solved={t for t in rules if t.startswith("any")})
    spent = r = 0
    while spent < budget:
        cells = next_cells(strategy, state, min(round_size, budget - spent), seed, r, budget - spent)
        if not cells:
            break
        for cand, task, attempts in cells:
            for _ in range(attempts):
                state.add(cand, task, task.startswith("any") or fix.get(task) == cand)
                spent += 1
        r += 1
    return state


def new_coverage(state: SearchState) -> int:
    return len(state.solved() - state.base_solved)


def adopted(state: SearchState) -> str:
    tally = {k: (v[0], v[1]) for k, v in state.runs.items()}
    for t in state.tasks:
        tally[("baseline", t)] = (1, int(t in state.base_solved))
    return outcome(tally, state.tasks, "baseline").adopted


__all__ = ["BASE", "DECOYS", "Table", "adopted", "candidates", "draw_table", "new_coverage", "simulate"]
