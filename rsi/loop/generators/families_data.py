"""Procedural families on data and code: `data` (CSV/JSON questions), `logs` (log analysis) and
`pyfix` (small Python fixes)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from rsi.loop.generators.procedural import (
    USERS,
    WORDS,
    Level,
    ProceduralFamily,
    answer_check,
    lines_check,
    pick,
    register,
)

# -- data ----------------------------------------------------------------------------------------


def data_1(rng: random.Random) -> Level:
    f, *keys = pick(rng, WORDS, 1 + rng.randint(3, 5))
    values = rng.sample(range(2, 500), len(keys))
    obj = dict(zip(keys, values, strict=True))
    key, other = keys[0], keys[1]
    rng.shuffle(keys)
    text = json.dumps({k: obj[k] for k in keys}, indent=2) + "\n"
    return Level(
        instruction=f"`/app/{f}.json` holds a JSON object. Write the value of its `{key}` field to `/app/answer.txt`.",
        env_files={f"{f}.json": text}, test_checks=answer_check("/app/answer.txt", str(obj[key])),
        solve=f"python3 -c \"import json; print(json.load(open('/app/{f}.json'))['{key}'])\" > /app/answer.txt",
        wrong=[f"python3 -c \"import json; print(json.load(open('/app/{f}.json'))['{other}'])\" > /app/answer.txt",
               f"python3 -c \"import json; print(sum(json.load(open('/app/{f}.json')).values()))\" > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {obj[key]}",
    )


def data_2(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    c1, c2, c3 = pick(rng, WORDS, 3)
    rows = [(w, rng.randint(1, 40), rng.randint(41, 99)) for w in pick(rng, WORDS, rng.randint(4, 9))]
    total = sum(r[1] for r in rows)
    csv = f"{c1},{c2},{c3}\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    return Level(
        instruction=(f"`/app/{f}.csv` has a header line `{c1},{c2},{c3}`. Write the sum of the `{c2}` column to "
                     "`/app/answer.txt`."),
        env_files={f"{f}.csv": csv}, test_checks=answer_check("/app/answer.txt", str(total)),
        solve=f"tail -n +2 /app/{f}.csv | awk -F, '{{s += $2}} END {{print s}}' > /app/answer.txt",
        wrong=[f"tail -n +2 /app/{f}.csv | awk -F, '{{s += $3}} END {{print s}}' > /app/answer.txt",
               f"tail -n +2 /app/{f}.csv | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {total}",
    )


def data_3(rng: random.Random) -> Level:
    f, col = pick(rng, WORDS, 2)
    cats = pick(rng, WORDS, 3)
    n_rows = rng.randint(6, 12)
    rows = [(u, rng.choice(cats)) for u in rng.choices(USERS, k=n_rows)]
    val = rows[0][1]
    n = sum(1 for r in rows if r[1] == val)
    if n == n_rows or 2 * n == n_rows:  # the wrong answers (all rows, the rest) must differ
        rows.append((rng.choice(USERS), next(c for c in cats if c != val)))
        n_rows += 1
    csv = f"name,{col}\n" + "".join(f"{u},{c}\n" for u, c in rows)
    return Level(
        instruction=(f"`/app/{f}.csv` has the columns `name,{col}`. Write the number of rows whose `{col}` is "
                     f"`{val}` to `/app/answer.txt`."),
        env_files={f"{f}.csv": csv}, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"tail -n +2 /app/{f}.csv | awk -F, '$2 == \"{val}\"' | wc -l > /app/answer.txt",
        wrong=[f"tail -n +2 /app/{f}.csv | wc -l > /app/answer.txt",
               f"tail -n +2 /app/{f}.csv | awk -F, '$2 != \"{val}\"' | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}",
    )


def data_4(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    status = rng.choice(["paid", "settled", "cleared"])
    items = [{"id": i + 1, "status": rng.choice([status, "pending", "refunded"]), "amount": rng.randint(5, 300)}
             for i in range(rng.randint(5, 9))]
    items[0]["status"], items[-1]["status"] = status, "pending"
    total = sum(int(x["amount"]) for x in items if x["status"] == status)  # type: ignore[call-overload]
    return Level(
        instruction=(f"`/app/{f}.json` holds a JSON list of orders, each with `id`, `status` and `amount`. Write "
                     f"the total `amount` of the orders whose `status` is `{status}` to `/app/answer.txt`."),
        env_files={f"{f}.json": json.dumps(items, indent=1) + "\n"},
        test_checks=answer_check("/app/answer.txt", str(total)),
        solve=(f"python3 -c \"import json; print(sum(o['amount'] for o in json.load(open('/app/{f}.json')) "
               f"if o['status'] == '{status}'))\" > /app/answer.txt"),
        wrong=[f"python3 -c \"import json; print(sum(o['amount'] for o in json.load(open('/app/{f}.json'))))\" "
               "> /app/answer.txt",
               f"python3 -c \"import json; print(len([o for o in json.load(open('/app/{f}.json')) "
               f"if o['status'] == '{status}']))\" > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {total}",
    )


@register
class DataFamily(ProceduralFamily):
    name = "data"
    family = "data"
    levels = {1: data_1, 2: data_2, 3: data_3, 4: data_4}


# -- logs ----------------------------------------------------------------------------------------

LEVELS = ("ERROR", "WARN", "INFO", "DEBUG")


def _log(rng: random.Random, n: int, level: str) -> list[tuple[str, str, str]]:
    """(level, user, message) entries; at least two of `level` and one trap line that mentions the
    level's word in lower case under another level."""
    out = []
    for i in range(n):
        lv = level if i < 2 else rng.choice(LEVELS)
        out.append((lv, rng.choice(USERS), " ".join(pick(rng, WORDS, 3))))
    other = next(x for x in LEVELS if x != level)
    out.append((other, rng.choice(USERS), f"retrying after {level.lower()} in {rng.choice(WORDS)}"))
    rng.shuffle(out)
    return out


def _fmt(entries: list[tuple[str, str, str]]) -> list[str]:
    return [f"2026-01-{(i % 28) + 1:02d} {lv} user={u} {msg}" for i, (lv, u, msg) in enumerate(entries)]


def logs_1(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(LEVELS[:2])
    lines = _fmt(_log(rng, rng.randint(6, 12), level))
    want = [ln for ln in lines if f" {level} " in ln]
    return Level(
        instruction=(f"Write every line of `/app/{log}.log` that contains the word `{level}` to `/app/{out}.txt`, "
                     "in the same order, unchanged."),
        env_files={f"{log}.log": "\n".join(lines) + "\n"}, test_checks=lines_check(f"/app/{out}.txt", want),
        solve=f"grep -w {level} /app/{log}.log > /app/{out}.txt",
        wrong=[f"grep -i {level} /app/{log}.log > /app/{out}.txt", f"grep -v {level} /app/{log}.log > /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt holds the {level} lines",
    )


def logs_2(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    level = rng.choice(LEVELS[:3])
    entries = _log(rng, rng.randint(8, 14), level)
    n = sum(1 for e in entries if e[0] == level)
    if n == len(entries) - n:
        entries.append((next(x for x in LEVELS if x != level), rng.choice(USERS), "idle"))
    return Level(
        instruction=f"Write the number of `{level}` lines in `/app/{log}.log` to `/app/answer.txt`.",
        env_files={f"{log}.log": "\n".join(_fmt(entries)) + "\n"}, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"grep -cw {level} /app/{log}.log > /app/answer.txt",
        wrong=[f"grep -ci {level} /app/{log}.log > /app/answer.txt",
               f"grep -cvw {level} /app/{log}.log > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}",
    )


def logs_3(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    top, first, *rest = pick(rng, USERS, 5)
    entries = [("ERROR", first, "disk full")] + [("INFO", first, "ok")] * 4
    entries += [("ERROR", top, " ".join(pick(rng, WORDS, 2))) for _ in range(3)]
    entries += [(rng.choice(LEVELS), u, "tick") for u in rest]
    head, tail = entries[:1], entries[1:]
    rng.shuffle(tail)
    lines = _fmt(head + tail)
    return Level(
        instruction=(f"Each line of `/app/{log}.log` has a level and a `user=NAME` field. Write the name of the user "
                     f"with the most `ERROR` lines to `/app/answer.txt` (just the name)."),
        env_files={f"{log}.log": "\n".join(lines) + "\n"}, test_checks=answer_check("/app/answer.txt", top),
        solve=(f"grep -w ERROR /app/{log}.log | grep -o 'user=[a-z]*' | sort | uniq -c | sort -rn | head -n 1 "
               "| sed 's/.*user=//' > /app/answer.txt"),
        wrong=[f"grep -o 'user=[a-z]*' /app/{log}.log | sort | uniq -c | sort -rn | head -n 1 | sed 's/.*user=//' "
               "> /app/answer.txt",
               f"grep -w ERROR /app/{log}.log | head -n 1 | grep -o 'user=[a-z]*' | sed 's/user=//' > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {top}",
    )


def logs_4(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    users = pick(rng, USERS, 6)
    bad = users[:rng.randint(2, 3)]
    entries = [("ERROR", u, "failed") for u in bad for _ in range(rng.randint(1, 3))]
    entries.append(("ERROR", bad[0], "failed again"))
    entries += [(rng.choice(("INFO", "WARN")), u, "ok") for u in users]
    rng.shuffle(entries)
    n = len(bad)
    return Level(
        instruction=(f"Each line of `/app/{log}.log` has a level and a `user=NAME` field. Write the number of "
                     "distinct users that have at least one `ERROR` line to `/app/answer.txt`."),
        env_files={f"{log}.log": "\n".join(_fmt(entries)) + "\n"}, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"grep -w ERROR /app/{log}.log | grep -o 'user=[a-z]*' | sort -u | wc -l > /app/answer.txt",
        wrong=[f"grep -cw ERROR /app/{log}.log > /app/answer.txt",
               f"grep -o 'user=[a-z]*' /app/{log}.log | sort -u | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}",
    )


@register
class LogsFamily(ProceduralFamily):
    name = "logs"
    family = "logs"
    levels = {1: logs_1, 2: logs_2, 3: logs_3, 4: logs_4}


# -- pyfix ---------------------------------------------------------------------------------------


def _module(rng: random.Random) -> tuple[str, str]:
    mod, fn = pick(rng, WORDS, 2)
    return f"{mod}_{rng.randint(10, 99)}", f"{fn}_value"


def _call_check(path: str, fn: str, cases: Sequence[tuple[tuple[Any, ...], Any]]) -> str:
    return (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('m', {path!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "try:\n    spec.loader.exec_module(m)\nexcept Exception as e:\n"
        f"    fail(f'{path} does not load: {{e!r}}')\n"
        f"for args, want in {cases!r}:\n"
        "    try:\n"
        f"        got = m.{fn}(*args)\n"
        "    except Exception as e:\n"
        f"        fail(f'{fn}{{args}} raised {{e!r}}')\n"
        "    if got != want:\n"
        f"        fail(f'{fn}{{args}} returned {{got!r}}, expected {{want!r}}')\n"
    )


OPS = [("sum", "+", "-", "*"), ("product", "*", "+", "-"), ("difference a - b", "-", "+", "*")]


def pyfix_1(rng: random.Random) -> Level:
    mod, fn = _module(rng)
    what, good, bad, wrong = rng.choice(OPS)
    path = f"/app/{mod}.py"
    src = f"def {fn}(a, b):\n    return a {bad} b\n"
    cases = [((a, b), eval(f"{a} {good} {b}")) for a, b in ((rng.randint(2, 9), rng.randint(2, 9)), (7, 3), (0, 5))]
    return Level(
        instruction=(f"The function `{fn}(a, b)` in `{path}` should return the {what} of its arguments, but it uses "
                     f"`{bad}`. Fix it so it uses `{good}`."),
        env_files={f"{mod}.py": src}, test_checks=_call_check(path, fn, cases),
        solve=f"sed -i 's/return a {bad} b/return a {good} b/' {path}",
        wrong=[f"sed -i 's/return a {bad} b/return a {wrong} b/' {path}",
               f"sed -i 's/return a {bad} b/return b {good} a {bad} 1/' {path}"],
        reads=[path], what=f"{fn} in {path} computes the {what}",
    )


def pyfix_2(rng: random.Random) -> Level:
    mod, fn = _module(rng)
    path = f"/app/{mod}.py"
    src = f"def {fn}(n):\n    total = 0\n    for i in range(1, n):\n        total += i\n    return total\n"
    cases = [((n,), n * (n + 1) // 2) for n in (1, 3, rng.randint(5, 20))]
    return Level(
        instruction=(f"`{fn}(n)` in `{path}` should return 1 + 2 + ... + n (so `{fn}(3)` is 6), but its loop stops "
                     "one too early. Fix it."),
        env_files={f"{mod}.py": src}, test_checks=_call_check(path, fn, cases),
        solve=f"sed -i 's/range(1, n)/range(1, n + 1)/' {path}",
        wrong=[f"sed -i 's/range(1, n)/range(0, n)/' {path}", f"sed -i 's/range(1, n)/range(1, n + 2)/' {path}"],
        reads=[path], what=f"{fn} in {path} sums 1..n",
    )


def pyfix_3(rng: random.Random) -> Level:
    mod, fn = _module(rng)
    path = f"/app/{mod}.py"
    src = (f"def {fn}(text):\n    count = 0\n    for ch in text:\n        if ch in 'aeiou':\n"
           "            count += 1\n    return count\n")
    words = pick(rng, WORDS, 3)
    cases = [((w.capitalize() + " " + w.upper(),), 2 * sum(c in "aeiou" for c in w)) for w in words]
    cases.append((("Yes sky",), 1))
    return Level(
        instruction=(f"`{fn}(text)` in `{path}` should count the vowels a, e, i, o, u in `text`, upper or lower "
                     "case, but it misses upper-case vowels. Fix it."),
        env_files={f"{mod}.py": src}, test_checks=_call_check(path, fn, cases),
        solve=f"sed -i 's/for ch in text:/for ch in text.lower():/' {path}",
        wrong=[f"sed -i \"s/'aeiou'/'aeiouy'/\" {path}", f"sed -i \"s/'aeiou'/'AEIOU'/\" {path}"],
        reads=[path], what=f"{fn} in {path} counts vowels in any case",
    )


def pyfix_4(rng: random.Random) -> Level:
    mod, fn = _module(rng)
    path = f"/app/{mod}.py"
    src = f"def {fn}(xs)\n    if not xs:\n        return 0\n    return sum(xs) // len(xs)\n"
    cases: list[tuple[tuple[object, ...], object]] = [(([1, 2],), 1.5), (([],), 0), (([4, 4, 5],), 13 / 3)]
    return Level(
        instruction=(f"`{path}` defines `{fn}(xs)`, which should return the average of a list of numbers (0 for an "
                     "empty list), as a float such as 1.5. The file does not even load, and the average is "
                     "rounded down. Fix both bugs."),
        env_files={f"{mod}.py": src}, test_checks=_call_check(path, fn, cases),
        solve=f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/; s|sum(xs) // len(xs)|sum(xs) / len(xs)|' {path}",
        wrong=[f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/' {path}",
               f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/; s|sum(xs) // len(xs)|round(sum(xs) / len(xs))|' {path}"],
        reads=[path], what=f"{fn} in {path} returns the float average",
    )


@register
class PyfixFamily(ProceduralFamily):
    name = "pyfix"
    family = "pyfix"
    levels = {1: pyfix_1, 2: pyfix_2, 3: pyfix_3, 4: pyfix_4}

