"""The `data` family: questions about CSV and JSON files (a field, row and item counts, keys, a column, sums,
the row with the largest value, sorting rows, filtering items, distinct values; filtered counts and totals
above). Answers go to `/app/answer.txt` (given a seeded name) unless the output is a file of its own.

Each environment holds one data file in /app, so "the only CSV file in /app" or "the {name} JSON file" names it as
well as its path does; the last two phrasings of each level-1/2 template say it so (a person's words)."""

from __future__ import annotations

import json
import random

from rsi.loop.discover.generators import shapes
from rsi.loop.discover.generators.procedural import (
    ANSWER,
    USERS,
    WORDS,
    Level,
    ProceduralFamily,
    Template,
    answer_check,
    lines_check,
    pick,
    register,
    say,
)


def _py(expr: str, path: str) -> str:
    """A python3 one-liner printing `expr` of the JSON document `d` loaded from `path`."""
    return shapes.py(expr, path, ANSWER)


# -- level 1 -------------------------------------------------------------------------------------


def json_field(rng: random.Random) -> Level:
    f, *keys = pick(rng, WORDS, 1 + rng.randint(3, 5))
    values = rng.sample(range(2, 500), len(keys))
    obj = dict(zip(keys, values, strict=True))
    key, other = keys[0], keys[1]
    rng.shuffle(keys)
    path = f"/app/{f}.json"
    instruction, ph = say(rng, [
        "`{path}` holds a JSON object. Write the value of its `{key}` field to `/app/answer.txt`.",
        "Read the `{key}` field of the JSON object in `{path}` and save its value in `/app/answer.txt`.",
        "What is `{key}` in `{path}`? Put that value (just the value) into `/app/answer.txt`.",
        "Look up the key `{key}` in the JSON document `{path}` and write what it holds to `/app/answer.txt`.",
        "In the {f} JSON file in /app, what number is stored under {key}? Save just that number to "
        "`/app/answer.txt`.",
        "Read the {key} entry from the only .json file in /app and put its value, nothing else, in "
        "`/app/answer.txt`.",
    ], path=path, key=key, f=f)
    solve, *alts = shapes.json_field(path, ANSWER, key)
    return Level(
        instruction=instruction, env_files={f"{f}.json": json.dumps({k: obj[k] for k in keys}, indent=2) + "\n"},
        test_checks=answer_check("/app/answer.txt", str(obj[key])), solve=solve, shapes=alts,
        wrong=[_py(f"d['{other}']", path), _py("sum(d.values())", path)],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {obj[key]}", phrasing=ph,
    )


def _csv(rng: random.Random, rows: int) -> tuple[list[str], list[tuple[str, int, int]]]:
    """A header of three column names and `rows` rows (distinct names, two integer columns)."""
    return pick(rng, WORDS, 3), [(w, rng.randint(1, 40), rng.randint(41, 99)) for w in pick(rng, WORDS, rows)]


def _csv_text(header: list[str], rows: list[tuple[str, int, int]]) -> str:
    return ",".join(header) + "\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)


def csv_rows(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    n = rng.choice([k for k in range(4, 13) if k != 3])
    header, rows = _csv(rng, n)
    path = f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` starts with a header line. Write the number of data rows (not counting the header) to "
        "`/app/answer.txt`.",
        "Count the records in the CSV file `{path}`, leaving out its header line, and save the count in "
        "`/app/answer.txt`.",
        "How many rows of data does `{path}` have below its header? Put the number into `/app/answer.txt`.",
        "Ignoring the first (header) line, how many lines of data are in `{path}`? Record the figure in "
        "`/app/answer.txt`.",
        "How many records does the {f} spreadsheet in /app hold? It is a CSV whose first line names the columns "
        "({c0}, {c1}, {c2}); count the rest and write the number to `/app/answer.txt`.",
        "Count the data rows of the only CSV file in /app, its header line ({c0}, {c1}, {c2}) not included, and "
        "save the count in `/app/answer.txt`.",
    ], path=path, f=f, c0=header[0], c1=header[1], c2=header[2])
    solve, *alts = shapes.csv_rows(path, ANSWER)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": _csv_text(header, rows)},
        test_checks=answer_check("/app/answer.txt", str(n)), solve=solve, shapes=alts,
        wrong=[f"wc -l < {path} > /app/answer.txt", f"head -n 1 {path} | tr , '\\n' | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def json_keys(rng: random.Random) -> Level:
    f, *keys = pick(rng, WORDS, 1 + rng.randint(4, 6))
    while keys == sorted(keys):
        rng.shuffle(keys)
    obj = {k: rng.randint(1, 99) for k in keys}
    path = f"/app/{f}.json"
    instruction, ph = say(rng, [
        "`{path}` holds a JSON object. Write its keys, sorted alphabetically, one per line, to `/app/answer.txt`.",
        "List the field names of the JSON object in `{path}` in alphabetical order, one per line, in "
        "`/app/answer.txt`.",
        "Save the alphabetically sorted keys of the object in `{path}` to `/app/answer.txt`, one key per line.",
        "Print every top-level key of the JSON object stored in `{path}` into `/app/answer.txt`: A to Z, a "
        "key per line.",
        "Which field names does the {f} JSON file in /app use? List them alphabetically, one a line, in "
        "`/app/answer.txt`.",
        "The only .json file in /app, {f}.json, holds one object. Write its keys (not the values) in A-to-Z "
        "order to `/app/answer.txt`, a key on each line.",
    ], path=path, f=f)
    solve, *alts = shapes.json_keys(path, ANSWER)
    return Level(
        instruction=instruction, env_files={f"{f}.json": json.dumps(obj, indent=2) + "\n"},
        test_checks=lines_check("/app/answer.txt", sorted(keys)), solve=solve, shapes=alts,
        wrong=[_py("'\\n'.join(d)", path), _py("'\\n'.join(str(v) for v in sorted(d.values()))", path)],
        reads=["/app/answer.txt"], what="/app/answer.txt holds the sorted keys", phrasing=ph,
    )


def csv_column(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    header, rows = _csv(rng, rng.randint(3, 7))
    col, path = header[1], f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` has the header `{header}`. Write the values of its `{col}` column, one per line and in order "
        "(without the header), to `/app/answer.txt`.",
        "Extract the `{col}` column of the CSV file `{path}` (header `{header}`): its values only, top to bottom, "
        "one per line, into `/app/answer.txt`.",
        "Save every value of the `{col}` column of `{path}` (columns `{header}`) to `/app/answer.txt`, one per "
        "line, leaving out the header.",
        "From `{path}` (its first line reads `{header}`), pull out column `{col}` and write its entries below"
        " the header, one on each line, to `/app/answer.txt`.",
        "Give me the {col} figures from the {f} CSV in /app (the second column), top to bottom, one per line and "
        "without the column's name, in `/app/answer.txt`.",
        "The only CSV file in /app has a header naming its columns; copy out the values of its {col} column, in "
        "order and one a line, to `/app/answer.txt` (the header itself left out).",
    ], path=path, header=",".join(header), col=col, f=f)
    solve, *alts = shapes.csv_column(path, ANSWER, 2)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": _csv_text(header, rows)},
        test_checks=lines_check("/app/answer.txt", [str(r[1]) for r in rows]), solve=solve, shapes=alts,
        wrong=[f"cut -d, -f2 {path} > /app/answer.txt", f"tail -n +2 {path} | cut -d, -f1 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds the {col} column", phrasing=ph,
    )


def json_len(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    n = rng.randint(4, 9)
    items = [{"name": u, "age": rng.randint(18, 80), "city": rng.choice(WORDS)} for u in pick(rng, USERS, n)]
    path = f"/app/{f}.json"
    instruction, ph = say(rng, [
        "`{path}` holds a JSON list. Write the number of items in it to `/app/answer.txt`.",
        "Count the entries of the JSON array in `{path}` and save the count in `/app/answer.txt`.",
        "How many objects does the list in `{path}` contain? Put the number into `/app/answer.txt`.",
        "Tell me the length of the JSON array stored in `{path}` by writing it to `/app/answer.txt`.",
        "How many people are listed in the {f} JSON file in /app? Each is one object of the list; write the count "
        "to `/app/answer.txt`.",
        "The only .json file in /app, {f}.json, is a list of people (name, age, city). Count them and save the "
        "number in `/app/answer.txt`.",
    ], path=path, f=f)
    solve, *alts = shapes.json_len(path, ANSWER, "name")
    return Level(
        instruction=instruction, env_files={f"{f}.json": json.dumps(items, indent=2) + "\n"},
        test_checks=answer_check("/app/answer.txt", str(n)), solve=solve, shapes=alts,
        wrong=[f"wc -l < {path} > /app/answer.txt", _py("len(d[0])", path)],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def csv_sum(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    (c1, c2, c3), rows = _csv(rng, rng.randint(4, 9))
    total = sum(r[1] for r in rows)
    path = f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` has a header line `{c1},{c2},{c3}`. Write the sum of the `{c2}` column to `/app/answer.txt`.",
        "Add up the `{c2}` values of `{path}` (header `{c1},{c2},{c3}`) and save the total in `/app/answer.txt`.",
        "What is the total of column `{c2}` in `{path}` (columns `{c1},{c2},{c3}`)? Write it to "
        "`/app/answer.txt`.",
        "Sum the numbers in column `{c2}` of the CSV `{path}` (first line `{c1},{c2},{c3}`) and record the "
        "result in `/app/answer.txt`.",
        "What do the {c2} numbers in the {f} CSV in /app add up to? Its columns are {c1}, {c2} and {c3}; write "
        "the total to `/app/answer.txt`.",
        "Total the {c2} column of the only CSV file in /app (header {c1},{c2},{c3}) and save the sum in "
        "`/app/answer.txt`.",
    ], path=path, c1=c1, c2=c2, c3=c3, f=f)
    solve, *alts = shapes.csv_sum(path, ANSWER)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": _csv_text([c1, c2, c3], rows)},
        test_checks=answer_check("/app/answer.txt", str(total)), solve=solve, shapes=alts,
        wrong=[f"tail -n +2 {path} | awk -F, '{{s += $3}} END {{print s}}' > /app/answer.txt",
               f"tail -n +2 {path} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {total}", phrasing=ph,
    )


def csv_max(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    header = pick(rng, WORDS, 3)
    names = pick(rng, WORDS, rng.randint(4, 8))
    v1, v2 = rng.sample(range(1, 200), len(names)), rng.sample(range(1, 200), len(names))
    rows = list(zip(names, v1, v2, strict=True))
    best = max(rows, key=lambda r: r[1])
    # neither the first row nor the row with the largest third column is the answer
    rows.remove(best)
    rows.insert(rng.randint(1, len(rows)), best)
    if max(rows, key=lambda r: r[2]) is best:
        i = rows.index(best)
        rows[i] = (best[0], best[1], min(r[2] for r in rows) - 1 if min(r[2] for r in rows) > 1 else 0)
        best = rows[i]
    path = f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` has the columns `{header}`. Write the `{c0}` of the row with the largest `{c1}` to "
        "`/app/answer.txt`.",
        "Find the row of `{path}` (header `{header}`) whose `{c1}` is highest and save its `{c0}` in "
        "`/app/answer.txt`.",
        "Which `{c0}` in `{path}` (columns `{header}`) has the biggest `{c1}`? Write just that `{c0}` to "
        "`/app/answer.txt`.",
        "Look through `{path}` (first line `{header}`) for the maximum `{c1}`, and write the `{c0}` on that "
        "row to `/app/answer.txt`.",
        "In the {f} CSV in /app (columns {c0}, {c1}, {c2}), which {c0} has the highest {c1}? Put that {c0} in "
        "`/app/answer.txt`.",
        "Find the row with the biggest {c1} in the only CSV file in /app (header {header}) and write the {c0} "
        "from that row to `/app/answer.txt`.",
    ], path=path, header=",".join(header), c0=header[0], c1=header[1], c2=header[2], f=f)
    solve, *alts = shapes.csv_max(path, ANSWER)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": _csv_text(header, rows)},
        test_checks=answer_check("/app/answer.txt", best[0]), solve=solve, shapes=alts,
        wrong=[f"tail -n +2 {path} | LC_ALL=C sort -t, -k3,3 -rn | head -n 1 | cut -d, -f1 > /app/answer.txt",
               f"sed -n 2p {path} | cut -d, -f1 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {best[0]}", phrasing=ph,
    )


def csv_sort(rng: random.Random) -> Level:
    f, o = pick(rng, WORDS, 2)
    header = pick(rng, WORDS, 2)
    names = pick(rng, WORDS, 6)
    # one-digit values 5-9 and two-digit ones 10-49: text order puts "12" before "7", numeric order does not
    vals = rng.sample(range(5, 10), 2) + rng.sample(range(10, 50), 2) + rng.sample(range(100, 600), 2)
    rng.shuffle(vals)
    rows = list(zip(names, vals, strict=True))
    src, out = f"/app/{f}.csv", f"/app/{o}.csv"
    text = ",".join(header) + "\n" + "".join(f"{a},{b}\n" for a, b in rows)
    want = [",".join(header)] + [f"{a},{b}" for a, b in sorted(rows, key=lambda r: r[1])]
    instruction, ph = say(rng, [
        "Write `{src}` to `{out}` with its data rows sorted by the `{col}` column, smallest number first; the "
        "header line stays first.",
        "Sort the rows of the CSV file `{src}` numerically by `{col}` (ascending) and save the result, header "
        "on top, as `{out}`.",
        "`{out}` should be `{src}` with the header kept as the first line and the other rows ordered by their "
        "`{col}` value, lowest first.",
        "Reorder the data lines of `{src}` by ascending numeric `{col}` and write the file, header line "
        "first, to `{out}`.",
        "Sort the {f} CSV in /app by {col}, lowest number first, keeping its header line at the top, and save "
        "the result as `{out}`.",
        "Write a copy of the only CSV file in /app to `{out}` with its rows in increasing order of {col} (by "
        "value, not as text); the header stays first.",
    ], src=src, out=out, col=header[1], f=f)
    solve, *alts = shapes.csv_sort(src, out)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": text}, test_checks=lines_check(out, want),
        solve=solve, shapes=alts,
        wrong=[f"tail -n +2 {src} | LC_ALL=C sort -t, -k2,2 -n > {out}",
               f"(head -n 1 {src}; tail -n +2 {src} | LC_ALL=C sort -t, -k2,2) > {out}"],
        reads=[out], what=f"{out} holds the rows sorted by {header[1]}", phrasing=ph,
    )


def json_filter(rng: random.Random) -> Level:
    f, key = pick(rng, WORDS, 2)
    users = pick(rng, USERS, rng.randint(5, 8))
    threshold = rng.randint(30, 60)
    vals = [rng.choice([rng.randint(1, threshold - 1), rng.randint(threshold + 1, 99)]) for _ in users]
    at = rng.randrange(len(vals))
    vals[at] = threshold  # one item sits on the threshold: "greater than" leaves it out, `>=` does not
    if not any(v > threshold for v in vals):
        vals[(at + 1) % len(vals)] = rng.randint(threshold + 1, 99)
    items = [{"name": u, key: v} for u, v in zip(users, vals, strict=True)]
    want = [u for u, v in zip(users, vals, strict=True) if v > threshold]
    path = f"/app/{f}.json"
    instruction, ph = say(rng, [
        "`{path}` holds a JSON list of objects with `name` and `{key}`. Write the names of those whose `{key}` is "
        "greater than {t}, one per line and in list order, to `/app/answer.txt`.",
        "From the JSON list in `{path}`, pick the items with `{key}` above {t} (strictly) and write their `name`s "
        "to `/app/answer.txt`, one per line, in the order they appear.",
        "Which entries of `{path}` have a `{key}` larger than {t}? Save their names, one per line and in file "
        "order, in `/app/answer.txt`.",
        "Go through the JSON array in `{path}`; for every item whose `{key}` exceeds {t}, write its `name` on"
        " its own line of `/app/answer.txt`, keeping the array's order.",
        "Who in the {f} JSON list in /app has a {key} of more than {t}? Write their names to `/app/answer.txt`, "
        "one a line, in the order the list gives them ({t} itself is not more than {t}).",
        "The only .json file in /app lists people with a name and a {key}. Save the names of those whose {key} "
        "is strictly above {t} in `/app/answer.txt`, one per line, in list order.",
    ], path=path, key=key, t=threshold, f=f)
    solve, *alts = shapes.json_filter(path, ANSWER, key, threshold)
    return Level(
        instruction=instruction, env_files={f"{f}.json": json.dumps(items, indent=2) + "\n"},
        test_checks=lines_check("/app/answer.txt", want), solve=solve, shapes=alts,
        wrong=[_py(f"'\\n'.join(o['name'] for o in d if o['{key}'] >= {threshold})", path),
               _py("'\\n'.join(o['name'] for o in d)", path)],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {want}", phrasing=ph,
    )


def csv_distinct(rng: random.Random) -> Level:
    f, col = pick(rng, WORDS, 2)
    cats = pick(rng, WORDS, rng.randint(2, 4))
    rows = [(u, rng.choice(cats)) for u in rng.choices(USERS, k=rng.randint(6, 10))]
    rows[: len(cats)] = [(rows[i][0], c) for i, c in enumerate(cats)]  # every category occurs
    rng.shuffle(rows)
    n = len(cats)
    path = f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` has the columns `name,{col}`. Write the number of different `{col}` values to `/app/answer.txt`.",
        "How many distinct values does the `{col}` column of `{path}` (header `name,{col}`) take? Save the count "
        "in `/app/answer.txt`.",
        "Count the unique `{col}` entries in `{path}` (each value once; the header is not a value) and write the "
        "count to `/app/answer.txt`.",
        "Record in `/app/answer.txt` how many unique values column `{col}` of `{path}` (header `name,{col}`) "
        "holds, counting each value once.",
        "How many different {col}s appear in the {f} CSV in /app (columns name and {col})? Write that number to "
        "`/app/answer.txt`.",
        "The only CSV file in /app pairs names with a {col}. Count how many distinct {col} values it has, each "
        "once and the header aside, and save the count in `/app/answer.txt`.",
    ], path=path, col=col, f=f)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": f"name,{col}\n" + "".join(f"{u},{c}\n" for u, c in rows)},
        test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"tail -n +2 {path} | cut -d, -f2 | sort -u | wc -l > /app/answer.txt",
        shapes=[f"awk -F, 'NR > 1 && !seen[$2]++' {path} | wc -l > /app/answer.txt",
                f"tail -n +2 {path} | cut -d, -f2 | sort | uniq | wc -l > /app/answer.txt"],
        wrong=[f"cut -d, -f2 {path} | sort -u | wc -l > /app/answer.txt",
               f"tail -n +2 {path} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


# -- levels 3 and 4 ------------------------------------------------------------------------------


def csv_count_where(rng: random.Random) -> Level:
    f, col = pick(rng, WORDS, 2)
    cats = pick(rng, WORDS, 3)
    n_rows = rng.randint(6, 12)
    rows = [(u, rng.choice(cats)) for u in rng.choices(USERS, k=n_rows)]
    val = rows[0][1]
    n = sum(1 for r in rows if r[1] == val)
    if n == n_rows or 2 * n == n_rows:  # the wrong answers (all rows, the rest) must differ
        rows.append((rng.choice(USERS), next(c for c in cats if c != val)))
        n_rows += 1
    path = f"/app/{f}.csv"
    instruction, ph = say(rng, [
        "`{path}` has the columns `name,{col}`. Write the number of rows whose `{col}` is `{val}` to "
        "`/app/answer.txt`.",
        "Count the rows of `{path}` (header `name,{col}`) with `{col}` equal to `{val}` and save the count in "
        "`/app/answer.txt`.",
        "In `{path}` (columns `name,{col}`), how many rows have the `{col}` `{val}`? Write the number to "
        "`/app/answer.txt`.",
    ], path=path, col=col, val=val)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": f"name,{col}\n" + "".join(f"{u},{c}\n" for u, c in rows)},
        test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"tail -n +2 {path} | awk -F, '$2 == \"{val}\"' | wc -l > /app/answer.txt",
        wrong=[f"tail -n +2 {path} | wc -l > /app/answer.txt",
               f"tail -n +2 {path} | awk -F, '$2 != \"{val}\"' | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def json_total_where(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    status = rng.choice(["paid", "settled", "cleared"])
    items = [{"id": i + 1, "status": rng.choice([status, "pending", "refunded"]), "amount": rng.randint(5, 300)}
             for i in range(rng.randint(5, 9))]
    items[0]["status"], items[-1]["status"] = status, "pending"
    total = sum(int(x["amount"]) for x in items if x["status"] == status)  # type: ignore[call-overload]
    path = f"/app/{f}.json"
    instruction, ph = say(rng, [
        "`{path}` holds a JSON list of orders, each with `id`, `status` and `amount`. Write the total `amount` of "
        "the orders whose `status` is `{status}` to `/app/answer.txt`.",
        "Add up the `amount` of every order in `{path}` (a JSON list of `id`, `status`, `amount`) with `status` "
        "`{status}`, and save the sum in `/app/answer.txt`.",
        "What do the `{status}` orders in `{path}` (objects with `id`, `status`, `amount`) amount to in total? "
        "Write the number to `/app/answer.txt`.",
    ], path=path, status=status)
    return Level(
        instruction=instruction, env_files={f"{f}.json": json.dumps(items, indent=1) + "\n"},
        test_checks=answer_check("/app/answer.txt", str(total)),
        solve=_py(f"sum(o['amount'] for o in d if o['status'] == '{status}')", path),
        wrong=[_py("sum(o['amount'] for o in d)", path),
               _py(f"len([o for o in d if o['status'] == '{status}'])", path)],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {total}", phrasing=ph,
    )


@register
class DataFamily(ProceduralFamily):
    name = "data"
    family = "data"
    templates = (
        Template("json-field", 1, json_field), Template("csv-rows", 1, csv_rows), Template("json-keys", 1, json_keys),
        Template("csv-column", 1, csv_column), Template("json-len", 1, json_len),
        Template("csv-sum", 2, csv_sum), Template("csv-max", 2, csv_max), Template("csv-sort", 2, csv_sort),
        Template("json-filter", 2, json_filter), Template("csv-distinct", 2, csv_distinct),
        Template("csv-count-where", 3, csv_count_where), Template("json-total-where", 4, json_total_where),
    )
