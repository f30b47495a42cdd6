"""Procedural families on files and text: `files` (file and directory operations), `text` (text
processing with standard tools) and `pipeline` (multi-step shell pipelines)."""

from __future__ import annotations

import random
from collections import Counter

from rsi.loop.generators.procedural import (
    USERS,
    WORDS,
    Level,
    ProceduralFamily,
    answer_check,
    lines_check,
    pick,
    q,
    register,
)


def _lines(rng: random.Random, n: int, per_line: tuple[int, int] = (2, 4)) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=rng.randint(*per_line))) for _ in range(n)]


# -- files ---------------------------------------------------------------------------------------


def files_1(rng: random.Random) -> Level:
    name, w1, w2 = pick(rng, WORDS, 3)
    path, text = f"/app/{name}.txt", f"{w1} {w2}"
    return Level(
        instruction=f"Create the file `{path}` containing exactly the text `{text}`.",
        env_files={},
        test_checks=answer_check(path, text),
        solve=f"printf '%s\\n' {q(text)} > {path}",
        wrong=[f"printf '%s\\n' {q(w1)} > {path}", f"printf '%s\\n' {q(text)} > /app/{name}.md"],
        reads=[path], what=f"{path} holds exactly '{text}'",
    )


def files_2(rng: random.Random) -> Level:
    a, b = pick(rng, WORDS, 2)
    src, dst = f"/app/{a}.txt", f"/app/{b}.txt"
    body = "\n".join(_lines(rng, rng.randint(2, 5))) + "\n"
    checks = (
        f"if Path({src!r}).exists():\n    fail('{src} must no longer exist')\n"
        f"if read({dst!r}) != {body!r}:\n    fail('{dst} does not hold the original content')\n"
    )
    return Level(
        instruction=f"Rename the file `{src}` to `{dst}`. Its content must stay the same.",
        env_files={f"{a}.txt": body}, test_checks=checks,
        solve=f"mv {src} {dst}", wrong=[f"cp {src} {dst}", f"mv {src} /app/{b}"],
        reads=[src, dst], what=f"{src} renamed to {dst}",
    )


def files_3(rng: random.Random) -> Level:
    a, d, marker = pick(rng, WORDS, 3)
    src, dest = f"/app/{a}.txt", f"/app/{d}/{a}.txt"
    body = "\n".join(_lines(rng, rng.randint(2, 4))) + "\n"
    checks = (
        f"if read({src!r}) != {body!r}:\n    fail('{src} must stay where it is, unchanged')\n"
        f"if read({dest!r}) != {body!r}:\n    fail('{dest} must be a copy of {src}')\n"
        f"if not Path('/app/{d}/{marker}.done').is_file():\n    fail('/app/{d}/{marker}.done is missing')\n"
    )
    return Level(
        instruction=(f"Create the directory `/app/{d}`, copy `{src}` into it (keeping the file name), and create "
                     f"an empty file `/app/{d}/{marker}.done` next to the copy. `{src}` must stay where it is."),
        env_files={f"{a}.txt": body}, test_checks=checks,
        solve=f"mkdir -p /app/{d}\ncp {src} {dest}\ntouch /app/{d}/{marker}.done",
        wrong=[f"mkdir -p /app/{d}\ncp {src} {dest}",
               f"mkdir -p /app/{d}\nmv {src} {dest}\ntouch /app/{d}/{marker}.done"],
        reads=[src, f"/app/{d}"], what=f"{src} copied into /app/{d} with a marker",
    )


def files_4(rng: random.Random) -> Level:
    d, sub = pick(rng, WORDS, 2)
    e1, e2 = rng.sample(["csv", "log", "md", "json", "txt", "dat"], 2)
    stems = pick(rng, WORDS, rng.randint(5, 8))
    keep = {s: e1 if i % 2 == 0 else e2 for i, s in enumerate(stems)}
    env = {f"{d}/{s}.{e}": f"{s}\n" for s, e in keep.items()}
    moved = sorted(f"{s}.{e}" for s, e in keep.items() if e == e1)
    stay = sorted(f"{s}.{e}" for s, e in keep.items() if e != e1)
    checks = (
        f"base, want_moved, want_stay = Path('/app/{d}'), {moved!r}, {stay!r}\n"
        f"got_moved = sorted(p.name for p in (base / {sub!r}).iterdir()) if (base / {sub!r}).is_dir() else []\n"
        "got_stay = sorted(p.name for p in base.iterdir() if p.is_file())\n"
        f"if got_moved != want_moved:\n    fail(f'/app/{d}/{sub} holds {{got_moved}}, expected {{want_moved}}')\n"
        f"if got_stay != want_stay:\n    fail(f'/app/{d} still holds {{got_stay}}, expected {{want_stay}}')\n"
    )
    return Level(
        instruction=(f"In `/app/{d}`, move every file whose name ends in `.{e1}` into a new subdirectory "
                     f"`/app/{d}/{sub}`. Leave all other files where they are."),
        env_files=env, test_checks=checks,
        solve=f"mkdir -p /app/{d}/{sub}\nmv /app/{d}/*.{e1} /app/{d}/{sub}/",
        wrong=[f"mkdir -p /app/{d}/{sub}\nmv /app/{d}/*.* /app/{d}/{sub}/",
               f"mkdir -p /app/{d}/{sub}\ncp /app/{d}/*.{e1} /app/{d}/{sub}/"],
        reads=[f"/app/{d}"], what=f"*.{e1} moved into /app/{d}/{sub}",
    )


@register
class FilesFamily(ProceduralFamily):
    name = "files"
    family = "files"
    levels = {1: files_1, 2: files_2, 3: files_3, 4: files_4}


# -- text ----------------------------------------------------------------------------------------


def text_1(rng: random.Random) -> Level:
    f, out = pick(rng, WORDS, 2)
    lines = _lines(rng, rng.randint(4, 20), (2, 4))
    n = len(lines)
    return Level(
        instruction=f"Write the number of lines in `/app/{f}.txt` to the file `/app/{out}.txt`.",
        env_files={f"{f}.txt": "\n".join(lines) + "\n"},
        test_checks=answer_check(f"/app/{out}.txt", str(n)),
        solve=f"wc -l < /app/{f}.txt > /app/{out}.txt",
        wrong=[f"wc -w < /app/{f}.txt > /app/{out}.txt", f"echo {n + 1} > /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt holds {n}",
    )


def text_2(rng: random.Random) -> Level:
    f, out = pick(rng, WORDS, 2)
    lines = pick(rng, WORDS, rng.randint(5, 10))
    while lines == sorted(lines):
        rng.shuffle(lines)
    return Level(
        instruction=f"Write the lines of `/app/{f}.txt`, sorted alphabetically, to `/app/{out}.txt`.",
        env_files={f"{f}.txt": "\n".join(lines) + "\n"},
        test_checks=lines_check(f"/app/{out}.txt", sorted(lines)),
        solve=f"LC_ALL=C sort /app/{f}.txt > /app/{out}.txt",
        wrong=[f"cp /app/{f}.txt /app/{out}.txt", f"LC_ALL=C sort -r /app/{f}.txt > /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt holds the sorted lines",
    )


def text_3(rng: random.Random) -> Level:
    f, out = pick(rng, WORDS, 2)
    base = pick(rng, WORDS, rng.randint(4, 7))
    lines = base + rng.choices(base, k=rng.randint(3, 6))
    rng.shuffle(lines)
    while lines == sorted(lines) or list(dict.fromkeys(lines)) == sorted(set(lines)):
        rng.shuffle(lines)
    return Level(
        instruction=(f"Write the distinct lines of `/app/{f}.txt` to `/app/{out}.txt`, sorted alphabetically, "
                     "each line once."),
        env_files={f"{f}.txt": "\n".join(lines) + "\n"},
        test_checks=lines_check(f"/app/{out}.txt", sorted(set(lines))),
        solve=f"LC_ALL=C sort -u /app/{f}.txt > /app/{out}.txt",
        wrong=[f"LC_ALL=C sort /app/{f}.txt > /app/{out}.txt", f"uniq /app/{f}.txt > /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt holds the distinct sorted lines",
    )


def text_4(rng: random.Random) -> Level:
    plain = [w for w in WORDS if not any(w in o for o in WORDS if o != w)]  # no word inside another
    old = rng.choice(plain)
    f, out, new = pick(rng, [w for w in WORDS if w != old], 3)
    others = [w for w in WORDS if w not in (old, new) and old not in w]
    lines = [" ".join(rng.choices(others, k=3)) for _ in range(rng.randint(3, 6))]
    lines.insert(rng.randint(0, len(lines)), f"{old} {rng.choice(others)} {old}")
    lines.insert(rng.randint(0, len(lines)), f"{rng.choice(others)} {old}")
    want = [ln.replace(old, new) for ln in lines]
    return Level(
        instruction=(f"Replace every occurrence of the word `{old}` with `{new}` in `/app/{f}.txt` and write the "
                     f"result to `/app/{out}.txt`."),
        env_files={f"{f}.txt": "\n".join(lines) + "\n"},
        test_checks=lines_check(f"/app/{out}.txt", want),
        solve=f"sed 's/{old}/{new}/g' /app/{f}.txt > /app/{out}.txt",
        wrong=[f"sed 's/{old}/{new}/' /app/{f}.txt > /app/{out}.txt", f"grep -v {old} /app/{f}.txt > /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt has every {old} replaced",
    )


@register
class TextFamily(ProceduralFamily):
    name = "text"
    family = "text"
    levels = {1: text_1, 2: text_2, 3: text_3, 4: text_4}


# -- pipeline ------------------------------------------------------------------------------------


def pipeline_1(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    ext, other = rng.sample(["log", "txt", "csv", "md"], 2)
    stems = pick(rng, WORDS, rng.randint(5, 9))
    n = rng.randint(1, len(stems) - 1)
    if 2 * n == len(stems):  # the other extension's count must differ from the answer
        n -= 1
    env = {f"{d}/{s}.{ext if i < n else other}": f"{s}\n" for i, s in enumerate(stems)}
    return Level(
        instruction=(f"Write the number of files in `/app/{d}` whose names end in `.{ext}` to "
                     "`/app/answer.txt`."),
        env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"ls /app/{d}/*.{ext} | wc -l > /app/answer.txt",
        wrong=[f"ls /app/{d} | wc -l > /app/answer.txt", f"ls /app/{d}/*.{other} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}",
    )


def pipeline_2(rng: random.Random) -> Level:
    f, out = pick(rng, WORDS, 2)
    vocab = pick(rng, WORDS, 6)
    counts = dict(zip(vocab, rng.sample(range(1, 12), 6), strict=True))
    words = [w for w, c in counts.items() for _ in range(c)]
    rng.shuffle(words)
    top = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:3]]
    first3 = list(dict.fromkeys(words))[:3]
    wrong2 = "head -n 3" if first3 != top else "tail -n 3"
    text = "\n".join(" ".join(words[i:i + 5]) for i in range(0, len(words), 5)) + "\n"
    return Level(
        instruction=(f"Write the 3 most frequent words of `/app/{f}.txt` to `/app/{out}.txt`, one per line, the "
                     "most frequent first."),
        env_files={f"{f}.txt": text}, test_checks=lines_check(f"/app/{out}.txt", top),
        solve=f"tr -s ' ' '\\n' < /app/{f}.txt | sort | uniq -c | sort -rn | head -n 3 | awk '{{print $2}}' "
              f"> /app/{out}.txt",
        wrong=[f"tr -s ' ' '\\n' < /app/{f}.txt | awk '!s[$0]++' | {wrong2} > /app/{out}.txt",
               f"tr -s ' ' '\\n' < /app/{f}.txt | sort | uniq -c | sort -n | head -n 3 | awk '{{print $2}}' "
               f"> /app/{out}.txt"],
        reads=[f"/app/{out}.txt"], what=f"/app/{out}.txt holds {top}",
    )


def pipeline_3(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    shared = pick(rng, WORDS, 4)
    env, all_lines = {}, []
    for stem in pick(rng, WORDS, rng.randint(2, 4)):
        lines = [shared[0], rng.choice(shared[1:]), *pick(rng, USERS, 2)]  # shared[0] repeats across files
        env[f"{d}/{stem}.txt"] = "\n".join(lines) + "\n"
        all_lines += lines
    n = len(set(all_lines))
    return Level(
        instruction=(f"Count the distinct lines across all `.txt` files in `/app/{d}` together (a line that "
                     "appears in several files counts once) and write that number to `/app/answer.txt`."),
        env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"cat /app/{d}/*.txt | sort -u | wc -l > /app/answer.txt",
        wrong=[f"cat /app/{d}/*.txt | wc -l > /app/answer.txt",
               f"for f in /app/{d}/*.txt; do sort -u $f; done | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}",
    )


def pipeline_4(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    depts = pick(rng, WORDS, 3)
    # The department with the highest total is never the one with the highest single salary.
    rows = [(u, depts[0], 90 + rng.randint(0, 9)) for u in pick(rng, USERS, 1)]
    rows += [(u, depts[1], 40 + rng.randint(0, 9)) for u in pick(rng, USERS, 3)]
    rows += [(u, depts[2], 20 + rng.randint(0, 9)) for u in pick(rng, USERS, 2)]
    rng.shuffle(rows)
    # the first row's department must not be the answer
    rows.insert(0, rows.pop(next(i for i, r in enumerate(rows) if r[1] != depts[1])))
    totals = Counter[str]()
    for _, dept, sal in rows:
        totals[dept] += sal
    best = totals.most_common(1)[0][0]
    csv = "name,dept,salary\n" + "".join(f"{u},{dp},{s}\n" for u, dp, s in rows)
    return Level(
        instruction=(f"`/app/{f}.csv` has the columns `name,dept,salary`. Write the name of the department whose "
                     "salaries add up to the largest total to `/app/answer.txt`."),
        env_files={f"{f}.csv": csv}, test_checks=answer_check("/app/answer.txt", best),
        solve=f"tail -n +2 /app/{f}.csv | awk -F, '{{t[$2]+=$3}} END {{for (d in t) print t[d], d}}' "
              "| sort -rn | head -n 1 | awk '{print $2}' > /app/answer.txt",
        wrong=[f"tail -n +2 /app/{f}.csv | sort -t, -k3 -rn | head -n 1 | cut -d, -f2 > /app/answer.txt",
               f"sed -n 2p /app/{f}.csv | cut -d, -f2 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {best}",
    )


@register
class PipelineFamily(ProceduralFamily):
    name = "pipeline"
    family = "pipeline"
    levels = {1: pipeline_1, 2: pipeline_2, 3: pipeline_3, 4: pipeline_4}
