"""Composable operations for the `compose` generator (rsi.loop.discover.generators.compose): the everyday steps of
the `files`, `text` and `data` templates written as data, so one step's output file can be the next one's input.

An operation takes a file of one *kind* (word lines, sorted lines, numbers, a CSV, a JSON list or object, a
directory, a pair of files) and writes a file of another (or the same) kind. Its step knows its reference command,
its other shell shapes (the template's own, from `shapes`), a careless variant (the template's known-wrong answer,
which must change the step's output), what the output holds afterwards (computed here, checked by the verifier)
and a few natural wordings of itself. Each operation names the
template it comes from (`ops` in a composed task's metadata), so a composition of trained operations can be told
from one that uses a held-out template.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from rsi.loop.discover.generators import shapes
from rsi.loop.discover.generators.procedural import NUMBER_WORDS, USERS, WORDS, pick, q, word_lines

Kind = str  # lines | sorted | numbers | numbers_sorted | csv | csv_sorted | json_list | json_obj | dir | pair
# | scalar | gone
TERMINAL = frozenset({"scalar", "gone"})
FILE_KINDS = frozenset({"lines", "sorted", "numbers", "numbers_sorted", "csv", "csv_sorted", "json_list",
                        "json_obj"})
SOURCE_KINDS = ("lines", "numbers", "csv", "json_list", "json_obj", "dir", "pair")  # what an environment holds
EXT = {"csv": "csv", "csv_sorted": "csv", "json_list": "json", "json_obj": "json"}  # else txt


@dataclass(frozen=True)
class Value:
    """What a file holds: its kind, its text and (for CSV and JSON) the parsed data."""

    kind: Kind
    text: str
    data: object = None

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


# what `Value.data` holds, by kind
Pair = tuple[str, str, list[str], list[str]]  # pair: the two paths and their lines
CsvData = tuple[list[str], list[tuple[str, int, int]]]  # csv: the header and the rows
JsonList = tuple[str, int, list[dict[str, Any]]]  # json_list: the numeric key, the threshold, the items


def pair_of(v: Value) -> Pair:
    return cast(Pair, v.data)


def csv_of(v: Value) -> CsvData:
    return cast(CsvData, v.data)


def json_list_of(v: Value) -> JsonList:
    return cast(JsonList, v.data)


@dataclass(frozen=True)
class StepIn:
    """What a step is given: the seeded RNG, the input file's value and path, the path its output should take,
    the chain's original input (`origin`) and a source of fresh names."""

    rng: random.Random
    value: Value
    src: str
    out: str
    origin: str
    fresh: Callable[[], str]


@dataclass(frozen=True)
class Step:
    shell: str  # the reference command(s)
    careless: str  # the template's careless answer for this step: it must change what `out` holds
    value: Value  # what `out` holds afterwards (kind `gone`: `out` no longer exists)
    out: str
    clauses: tuple[str, ...]  # natural wordings of the step (imperative, lower case, paths in backticks)
    reads: str | None = None  # the path to declare instead of `out` (a new directory's top)
    careless_differs: bool = True  # False where the careless answer happens to give the same output here
    alts: tuple[str, ...] = ()  # other shapes of the reference, each with the same effect as `shell`

    @property
    def shapes(self) -> tuple[str, ...]:
        """Every shape of the step's reference: `shell` first."""
        return (self.shell, *self.alts)


def stepped(ways: list[str], careless: str, value: Value, out: str, clauses: tuple[str, ...],
            **kw: Any) -> Step:
    """A step whose reference is the first of `ways` (a `shapes` list) and whose other shapes are the rest."""
    return Step(ways[0], careless, value, out, clauses, alts=tuple(ways[1:]), **kw)


@dataclass(frozen=True)
class Op:
    name: str  # short and unique across families: the composition id joins these with "+"
    template: str  # the `<family>/<template>` it composes
    takes: frozenset[Kind]
    gives: Kind | None  # None: the kind it was given
    step: Callable[[StepIn], Step]
    in_place: bool = False  # writes over its input (`out` is `src`)
    last_only: bool = False  # removes the chain's original input: nothing may follow


def text_of(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def lines_value(kind: Kind, lines: list[str]) -> Value:
    return Value(kind, text_of(lines))


def n_lines(n: int, which: str) -> str:
    """`the first line`, `the last three lines`."""
    return f"the {which} line" if n == 1 else f"the {which} {NUMBER_WORDS.get(n, str(n))} lines"


# -- environments: a chain's first input ---------------------------------------------------------


def source(kind: Kind, rng: random.Random, fresh: Callable[[], str]) -> tuple[dict[str, str], Value, str]:
    """An environment holding one input of `kind`: (files relative to /app, its value, its path)."""
    if kind == "lines":
        lines = word_lines(rng, rng.randint(7, 10))
        while len(set(lines)) < len(lines) or lines == sorted(lines):
            lines = word_lines(rng, rng.randint(7, 10))
        v = lines_value("lines", lines)
    elif kind == "numbers":
        nums = rng.sample(range(5, 10), 2) + rng.sample(range(10, 100), 3) + rng.sample(range(100, 1000), 2)
        while nums == sorted(nums) or [str(n) for n in nums] == sorted(str(n) for n in nums):
            rng.shuffle(nums)
        v = lines_value("numbers", [str(n) for n in nums])
    elif kind == "csv":
        v = _csv(rng)
    elif kind == "json_list":
        v = _json_list(rng)
    elif kind == "json_obj":
        keys = pick(rng, WORDS, rng.randint(5, 7))
        while keys == sorted(keys):
            rng.shuffle(keys)
        obj = {k: rng.randint(1, 99) for k in keys}
        v = Value("json_obj", json.dumps(obj, indent=2) + "\n", obj)
    elif kind == "dir":
        d = fresh()
        names = sorted(f"{fresh()}.{rng.choice(['txt', 'md', 'csv', 'log'])}" for _ in range(rng.randint(5, 7)))
        files = {f"{d}/{n}": f"{n}\n" for n in names}
        return files, Value("dir", "", names), f"/app/{d}"
    elif kind == "pair":
        a, b = word_lines(rng, rng.randint(2, 3)), word_lines(rng, rng.randint(2, 4))
        pa, pb = f"/app/{fresh()}.txt", f"/app/{fresh()}.txt"
        return {pa[5:]: text_of(a), pb[5:]: text_of(b)}, Value("pair", "", (pa, pb, a, b)), pa
    else:
        raise ValueError(f"no environment holds a {kind} input")
    path = f"/app/{fresh()}.{EXT.get(kind, 'txt')}"
    return {path[5:]: v.text}, v, path


def _csv(rng: random.Random) -> Value:
    header = pick(rng, WORDS, 3)
    while True:
        n = rng.randint(6, 9)
        names = pick(rng, [w for w in WORDS if w not in header], n)
        v2 = rng.sample(range(5, 10), 2) + rng.sample(range(10, 100), n - 2)  # one and two digits
        v3 = rng.sample(range(100, 1000), n)
        rng.shuffle(v2)
        rows = list(zip(names, v2, v3, strict=True))
        best2, best3 = max(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[2])
        if best2 is not best3 and rows[0] is not best2:
            break
    text = ",".join(header) + "\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    return Value("csv", text, (header, rows))


def _json_list(rng: random.Random) -> Value:
    key = rng.choice(["score", "age", "points", "level", "visits"])
    while True:
        users = pick(rng, USERS, rng.randint(7, 9))
        t = rng.randint(30, 60)
        vals = [rng.choice([rng.randint(1, t - 1), rng.randint(t + 1, 99)]) for _ in users]
        vals[rng.randrange(len(vals))] = t  # on the threshold: `>=` takes it, "greater than" does not
        above = [u for u, v in zip(users, vals, strict=True) if v > t]
        if 3 <= len(above) <= len(users) - 2 and above != sorted(above):
            break
    items = [{"name": u, key: v} for u, v in zip(users, vals, strict=True)]
    return Value("json_list", json.dumps(items, indent=2) + "\n", (key, t, items))


# -- text ------------------------------------------------------------------------------------------


def _sort(s: StepIn) -> Step:
    out = sorted(s.value.lines)
    return stepped(shapes.sort_lines(s.src, s.out), f"LC_ALL=C sort -r {s.src} > {s.out}",
                   lines_value("sorted", out), s.out, (
                       f"sort the lines of `{s.src}` alphabetically and save them as `{s.out}`",
                       f"put the lines of `{s.src}` in A-to-Z order in a new file `{s.out}`",
                       f"write `{s.src}`'s lines to `{s.out}` in dictionary order"), careless_differs=len(set(out)) > 1)


def _cut(which: str) -> Callable[[StepIn], Step]:
    def step(s: StepIn) -> Step:
        lines = s.value.lines
        n = s.rng.randint(2, min(4, len(lines) - 1)) if len(lines) >= 3 else 1
        got = lines[:n] if which == "first" else lines[-n:]
        cmd = "head" if which == "first" else "tail"
        top = "top" if which == "first" else "bottom"
        ways = shapes.head(s.src, s.out, n) if which == "first" else shapes.tail(s.src, s.out, n)
        return stepped(ways, f"{cmd} -n {n + 1} {s.src} > {s.out}",
                       lines_value(s.value.kind, got), s.out, (
                           f"write {n_lines(n, which)} of `{s.src}` to `{s.out}`",
                           f"keep just {n_lines(n, which)} of `{s.src}`{', in order,' if n > 1 else ''} in `{s.out}`",
                           f"copy the {top} {NUMBER_WORDS.get(n, str(n))} line{'s' if n > 1 else ''} of `{s.src}` "
                           f"into `{s.out}`"), careless_differs=n < len(lines))
    return step


def _upper(s: StepIn) -> Step:
    return stepped(shapes.upper(s.src, s.out), f"cp {s.src} {s.out}",
                   lines_value(s.value.kind, [ln.upper() for ln in s.value.lines]), s.out, (
                       f"write `{s.src}` in capital letters to `{s.out}`",
                       f"turn every letter of `{s.src}` into upper case and save the result as `{s.out}`",
                       f"make an upper-case version of `{s.src}` called `{s.out}`"))


def _count_lines(s: StepIn) -> Step:
    n = len(s.value.lines)
    return stepped(shapes.count_lines(s.src, s.out), f"wc -c < {s.src} > {s.out}", Value("scalar", f"{n}\n"), s.out, (
        f"count the lines of `{s.src}` and write that number to `{s.out}`",
        f"put the number of lines in `{s.src}` (just the number) into `{s.out}`",
        f"record how many lines `{s.src}` has in `{s.out}`"))


def _sort_numeric(s: StepIn) -> Step:
    nums = sorted(int(x) for x in s.value.lines)
    return stepped(shapes.sort_numeric(s.src, s.out), f"sort -rn {s.src} > {s.out}",
                   lines_value("numbers_sorted", [str(n) for n in nums]), s.out, (
                       f"sort the numbers in `{s.src}` from smallest to largest into `{s.out}`",
                       f"write the numbers of `{s.src}` to `{s.out}` in increasing numeric order",
                       f"order `{s.src}`'s numbers by value, lowest first, and save them as `{s.out}`"),
                   careless_differs=len(set(nums)) > 1)


# -- files -----------------------------------------------------------------------------------------


def _copy(s: StepIn) -> Step:
    return stepped(shapes.copy(s.src, s.out), f"mv {s.src} {s.out}", s.value, s.out, (
        f"make a copy of `{s.src}` named `{s.out}`, keeping the original",
        f"back up `{s.src}` as `{s.out}` (the original stays where it is)",
        f"duplicate `{s.src}` to `{s.out}`"))


def _append(s: StepIn) -> Step:
    text = " ".join(pick(s.rng, [w for w in WORDS if w not in s.value.text], 2))
    return stepped(shapes.append(s.src, text), f"printf '%s\\n' {q(text)} > {s.src}",
                   lines_value("lines", [*s.value.lines, text]), s.src, (
                       f"add the line \"{text}\" at the end of `{s.src}`, keeping what is already there",
                       f"append one more line, \"{text}\", to `{s.src}`",
                       f"extend `{s.src}` with a last line reading \"{text}\""))


def _nested(s: StepIn) -> Step:
    a, b = s.fresh(), s.fresh()
    out = f"/app/{a}/{b}/{s.src.rsplit('/', 1)[1]}"
    return stepped(shapes.copy_into(s.src, f"/app/{a}/{b}", out), f"mkdir -p /app/{b}\ncp {s.src} /app/{b}/",
                   s.value, out, (
                       f"file a copy of `{s.src}` under a new folder `/app/{a}/{b}`, same file name",
                       f"create the directories `/app/{a}/{b}` and put a copy of `{s.src}` in there under its own "
                       "name",
                       f"keep a copy of `{s.src}` as `{out}`, creating the folders it needs"), reads=f"/app/{a}")


def _delete(s: StepIn) -> Step:
    return stepped(shapes.remove(s.origin), f": > {s.origin}", Value("gone", ""), s.origin, (
        f"delete `{s.origin}`, which is no longer needed",
        f"remove the original `{s.origin}` from the disk",
        f"get rid of `{s.origin}` now that you are done with it"))


def _list(s: StepIn) -> Step:
    names = cast(list[str], s.value.data)
    return stepped(shapes.list_dir(s.src, s.out), f"LC_ALL=C ls -1a {s.src} > {s.out}",
                   lines_value("sorted", sorted(names)), s.out, (
                       f"list the files in `{s.src}` into `{s.out}`: bare names, one per line, A to Z",
                       f"write the names of the files inside `{s.src}` to `{s.out}`, alphabetically, one a line",
                       f"save a sorted listing of `{s.src}` (just the file names) as `{s.out}`"))


def _concat(s: StepIn) -> Step:
    pa, pb, a, b = pair_of(s.value)
    return stepped(shapes.concat(pa, pb, s.out), f"cat {pb} {pa} > {s.out}", lines_value("lines", [*a, *b]), s.out, (
        f"join `{pa}` and then `{pb}` into one file `{s.out}`",
        f"write the content of `{pa}` followed by that of `{pb}` to `{s.out}`",
        f"combine `{pa}` (first) and `{pb}` (second) into `{s.out}`"))


# -- data ------------------------------------------------------------------------------------------


def _csv_rows(s: StepIn) -> CsvData:
    return csv_of(s.value)


def _csv_sort(s: StepIn) -> Step:
    header, rows = _csv_rows(s)
    ordered = sorted(rows, key=lambda r: r[1])
    text = ",".join(header) + "\n" + "".join(f"{a},{b},{c}\n" for a, b, c in ordered)
    col = header[1]
    return stepped(shapes.csv_sort(s.src, s.out), f"tail -n +2 {s.src} | LC_ALL=C sort -t, -k2,2 -n > {s.out}",
                   Value("csv_sorted", text, (header, ordered)), s.out, (
                       f"sort the rows of `{s.src}` by their {col}, smallest first, keeping the header line on top, "
                       f"into `{s.out}`",
                       f"write `{s.src}` to `{s.out}` with the data rows in ascending order of {col} (header first)",
                       f"order the records of `{s.src}` by increasing {col} and save them, header included, as "
                       f"`{s.out}`"))


def _csv_count(s: StepIn) -> Step:
    _, rows = _csv_rows(s)
    return stepped(shapes.csv_rows(s.src, s.out), f"wc -l < {s.src} > {s.out}",
                   Value("scalar", f"{len(rows)}\n"), s.out, (
                       f"count the data rows of `{s.src}` (not the header) and write the number to `{s.out}`",
                       f"put the number of records in `{s.src}`, header line not counted, into `{s.out}`",
                       f"write to `{s.out}` how many rows of data `{s.src}` holds below its header"))


def _csv_sum(s: StepIn) -> Step:
    header, rows = _csv_rows(s)
    col = header[1]
    return stepped(shapes.csv_sum(s.src, s.out),
                   f"tail -n +2 {s.src} | awk -F, '{{s += $3}} END {{print s}}' > {s.out}",
                   Value("scalar", f"{sum(r[1] for r in rows)}\n"), s.out, (
                       f"add up the {col} column of `{s.src}` and write the total to `{s.out}`",
                       f"put the sum of every {col} in `{s.src}` into `{s.out}`",
                       f"total the {col} values of `{s.src}` and save the result as `{s.out}`"))


def _csv_max(s: StepIn) -> Step:
    header, rows = _csv_rows(s)
    best = max(rows, key=lambda r: r[1])
    c0, c1 = header[0], header[1]
    return stepped(shapes.csv_max(s.src, s.out),
                   f"tail -n +2 {s.src} | LC_ALL=C sort -t, -k3,3 -rn | head -n 1 | cut -d, -f1 > {s.out}",
                   Value("scalar", f"{best[0]}\n"), s.out, (
                       f"find the row of `{s.src}` with the largest {c1} and write its {c0} to `{s.out}`",
                       f"write to `{s.out}` the {c0} of the record in `{s.src}` whose {c1} is highest",
                       f"look up which {c0} in `{s.src}` has the biggest {c1} and save just that {c0} as `{s.out}`"))


def _json_filter(s: StepIn) -> Step:
    key, t, items = json_list_of(s.value)
    want = [o["name"] for o in items if o[key] > t]
    return stepped(shapes.json_filter(s.src, s.out, key, t),
                   shapes.py(f"'\\n'.join(o['name'] for o in d if o['{key}'] >= {t})", s.src, s.out),
                   lines_value("lines", want), s.out, (
                       f"write the names of the people in `{s.src}` whose {key} is above {t} to `{s.out}`, one per "
                       f"line, in the list's order",
                       f"pick the entries of `{s.src}` with a {key} greater than {t} and put their names, one a line "
                       f"and in file order, in `{s.out}`",
                       f"save in `{s.out}` the name of everyone in `{s.src}` with a {key} higher than {t}, one per "
                       f"line, as they are listed"))


def _json_keys(s: StepIn) -> Step:
    obj = cast(dict[str, int], s.value.data)
    return stepped(shapes.json_keys(s.src, s.out), shapes.py("'\\n'.join(d)", s.src, s.out),
                   lines_value("sorted", sorted(obj)), s.out, (
                       f"write the keys of the JSON object in `{s.src}` to `{s.out}`, alphabetically, one per line",
                       f"list the field names of `{s.src}` in A-to-Z order, one a line, in `{s.out}`",
                       f"save the sorted top-level keys of `{s.src}` as `{s.out}`, a key on each line"))


def _json_len(s: StepIn) -> Step:
    _, _, items = json_list_of(s.value)
    return stepped(shapes.json_len(s.src, s.out, "name"), f"wc -l < {s.src} > {s.out}",
                   Value("scalar", f"{len(items)}\n"), s.out, (
                       f"count the entries of the JSON list in `{s.src}` and write the count to `{s.out}`",
                       f"put the number of items in the list `{s.src}` holds into `{s.out}`",
                       f"write to `{s.out}` how many records the JSON array in `{s.src}` has"))


LINES = frozenset({"lines", "sorted"})
NUMS = frozenset({"numbers", "numbers_sorted"})
CSVS = frozenset({"csv", "csv_sorted"})

OPS: tuple[Op, ...] = (
    Op("sort", "text/sort", frozenset({"lines"}), "sorted", _sort),
    Op("head", "text/head", LINES | NUMS, None, _cut("first")),
    Op("tail", "text/tail", LINES | NUMS, None, _cut("last")),
    Op("upper", "text/upper", LINES, None, _upper),
    Op("count-lines", "text/count-lines", LINES | NUMS, "scalar", _count_lines),
    Op("sort-numeric", "text/sort-numeric", frozenset({"numbers"}), "numbers_sorted", _sort_numeric),
    Op("copy", "files/copy", FILE_KINDS, None, _copy),
    Op("append", "files/append", LINES, "lines", _append, in_place=True),
    Op("nested", "files/nested", FILE_KINDS, None, _nested),
    Op("delete", "files/delete", FILE_KINDS, "gone", _delete, last_only=True),
    Op("list", "files/list", frozenset({"dir"}), "sorted", _list),
    Op("concat", "files/concat", frozenset({"pair"}), "lines", _concat),
    Op("csv-sort", "data/csv-sort", frozenset({"csv"}), "csv_sorted", _csv_sort),
    Op("csv-rows", "data/csv-rows", CSVS, "scalar", _csv_count),
    Op("csv-sum", "data/csv-sum", CSVS, "scalar", _csv_sum),
    Op("csv-max", "data/csv-max", CSVS, "scalar", _csv_max),
    Op("json-filter", "data/json-filter", frozenset({"json_list"}), "lines", _json_filter),
    Op("json-keys", "data/json-keys", frozenset({"json_obj"}), "sorted", _json_keys),
    Op("json-len", "data/json-len", frozenset({"json_list"}), "scalar", _json_len),
)
OP_BY_NAME: dict[str, Op] = {o.name: o for o in OPS}
