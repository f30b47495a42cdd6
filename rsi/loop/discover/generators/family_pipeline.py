"""The `pipeline` family: multi-step shell pipelines over files in a directory (files with an extension, the
largest file, lines across files, a file's path in a tree; the most frequent words, files that contain a
word, counts per extension, occurrences of a word across files; distinct lines across files and a grouped
total above).

Each environment holds one folder (or one file) in /app, so "the only folder in /app" or "the {name} folder" names it
as well as its path does; the last two phrasings of each level-1/2 template say it so (a person's words)."""

from __future__ import annotations

import random
from collections import Counter

from rsi.loop.discover.generators.procedural import (
    PLAIN,
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
    word_lines,
)

EXTS = ("log", "txt", "csv", "md")


# -- level 1 -------------------------------------------------------------------------------------


def count_ext(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    ext, other = rng.sample(EXTS, 2)
    stems = pick(rng, WORDS, rng.randint(5, 9))
    n = rng.randint(1, len(stems) - 1)
    if 2 * n == len(stems):  # the other extension's count must differ from the answer
        n -= 1
    env = {f"{d}/{s}.{ext if i < n else other}": f"{s}\n" for i, s in enumerate(stems)}
    instruction, ph = say(rng, [
        "Write the number of files in `/app/{d}` whose names end in `.{ext}` to `/app/answer.txt`.",
        "Count the `.{ext}` files in the directory `/app/{d}` and save the count in `/app/answer.txt`.",
        "How many files with the extension `.{ext}` does `/app/{d}` hold? Put the number into `/app/answer.txt`.",
        "Tell me how many `.{ext}` files sit in `/app/{d}` by writing that figure to `/app/answer.txt`.",
        "How many {ext} files are there in the {d} folder in /app? Write the number to `/app/answer.txt`.",
        "The only folder in /app holds files of a few kinds. Count those ending in .{ext} and save the count in "
        "`/app/answer.txt`.",
    ], d=d, ext=ext)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"ls /app/{d}/*.{ext} | wc -l > /app/answer.txt",
        shapes=[f"find /app/{d} -name '*.{ext}' | wc -l > /app/answer.txt",
                f"ls /app/{d} | grep -c '\\.{ext}$' > /app/answer.txt"],
        wrong=[f"ls /app/{d} | wc -l > /app/answer.txt", f"ls /app/{d}/*.{other} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def largest_file(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    stems = pick(rng, [w for w in WORDS if w != d], rng.randint(4, 7))
    sizes = rng.sample(range(1, 30), len(stems))
    names = [f"{s}.txt" for s in stems]
    big = names[sizes.index(max(sizes))]
    first = sorted(names)[0]
    if big == first:  # the alphabetically first file must not be the answer
        i, j = sizes.index(max(sizes)), names.index(sorted(names)[1])
        sizes[i], sizes[j] = sizes[j], sizes[i]
        big = names[j]
    env = {f"{d}/{n}": "x" * (10 * sz) + "\n" for n, sz in zip(names, sizes, strict=True)}
    instruction, ph = say(rng, [
        "Write the name of the largest file (in bytes) in `/app/{d}` to `/app/answer.txt` (just the file name).",
        "Which file in `/app/{d}` is the biggest? Save its name, without the directory, in `/app/answer.txt`.",
        "Find the file with the most bytes in `/app/{d}` and write its bare file name to `/app/answer.txt`.",
        "Look at the sizes of the files in `/app/{d}` and write the name of the heaviest one, with no "
        "directory part, to `/app/answer.txt`.",
        "Which is the biggest file in the {d} folder in /app? Put its name (no path) in `/app/answer.txt`.",
        "Of the files in the only folder in /app, one takes up the most bytes. Write that file's bare name to "
        "`/app/answer.txt`.",
    ], d=d)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", big),
        solve=f"ls -S /app/{d} | head -n 1 > /app/answer.txt",
        shapes=[f"find /app/{d} -type f -printf '%s %f\\n' | sort -rn | head -n 1 | cut -d' ' -f2 > /app/answer.txt",
                f"cd /app/{d} && wc -c * | sort -rn | sed -n 2p | awk '{{print $2}}' > /app/answer.txt"],
        wrong=[f"ls -S /app/{d} | tail -n 1 > /app/answer.txt", f"LC_ALL=C ls /app/{d} | head -n 1 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {big}", phrasing=ph,
    )


def total_lines(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    stems = pick(rng, [w for w in WORDS if w != d], rng.randint(2, 4))
    env = {f"{d}/{s}.txt": "\n".join(word_lines(rng, rng.randint(2, 6))) + "\n" for s in stems}
    env[f"{d}/{rng.choice([w for w in WORDS if w not in stems and w != d])}.md"] = \
        "\n".join(word_lines(rng, rng.randint(2, 4))) + "\n"
    n = sum(text.count("\n") for rel, text in env.items() if rel.endswith(".txt"))
    instruction, ph = say(rng, [
        "Write the total number of lines of all `.txt` files in `/app/{d}` together to `/app/answer.txt` (just "
        "the number).",
        "Add up the line counts of every `.txt` file in `/app/{d}` and save the total, a bare number, in "
        "`/app/answer.txt`.",
        "How many lines do the `.txt` files of `/app/{d}` have altogether? Write only that number to "
        "`/app/answer.txt`.",
        "Combine every `.txt` file under `/app/{d}` and record how many lines they make together, as a bare "
        "figure, in `/app/answer.txt`.",
        "How many lines do the text files in the {d} folder in /app come to, all of them together? Write just the "
        "number to `/app/answer.txt` (the .md file there does not count).",
        "Add up the lines of every .txt file in {d}, the only folder in /app, and save the total in "
        "`/app/answer.txt`.",
    ], d=d)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"cat /app/{d}/*.txt | wc -l > /app/answer.txt",
        shapes=[f"awk 'END {{print NR}}' /app/{d}/*.txt > /app/answer.txt",
                f"wc -l /app/{d}/*.txt | tail -n 1 | awk '{{print $1}}' > /app/answer.txt"],
        wrong=[f"wc -l /app/{d}/*.txt | tail -n 1 > /app/answer.txt", f"cat /app/{d}/* | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def find_path(rng: random.Random) -> Level:
    d, a, b, c, target = pick(rng, WORDS, 5)
    decoys = pick(rng, [w for w in WORDS if w not in (d, a, b, c, target)], 3)
    path = f"{d}/{a}/{b}/{target}.txt"
    env = {path: f"{target}\n", f"{d}/{c}/{decoys[0]}.txt": "x\n", f"{d}/{a}/{decoys[1]}.txt": "y\n",
           f"{d}/{decoys[2]}.txt": "z\n"}
    instruction, ph = say(rng, [
        "Somewhere under `/app/{d}` there is a file named `{target}.txt`. Write its full path (starting with "
        "`/app/`) to `/app/answer.txt`.",
        "Find where `{target}.txt` lives in the directory tree `/app/{d}` and save its absolute path in "
        "`/app/answer.txt`.",
        "`/app/answer.txt` should hold the absolute path of the file `{target}.txt`, which is hidden in a "
        "subdirectory of `/app/{d}`.",
        "Locate the file `{target}.txt` somewhere in the tree below `/app/{d}` and record where it is (an "
        "absolute path beginning with `/app/`) in `/app/answer.txt`.",
        "I have lost {target}.txt somewhere inside the {d} folder in /app. Where is it? Write its full path, "
        "starting at /app, to `/app/answer.txt`.",
        "A file called {target}.txt is buried in the subfolders of the only folder in /app. Save its absolute "
        "path in `/app/answer.txt`.",
    ], d=d, target=target)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", f"/app/{path}"),
        solve=f"find /app/{d} -name {target}.txt > /app/answer.txt",
        shapes=[f"find /app/{d} -type f -name {target}.txt > /app/answer.txt",
                f"find /app/{d} | grep '/{target}\\.txt$' > /app/answer.txt"],
        wrong=[f"echo {target}.txt > /app/answer.txt",
               f"dirname $(find /app/{d} -name {target}.txt) > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds /app/{path}", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def top_words(rng: random.Random) -> Level:
    f, out = pick(rng, WORDS, 2)
    vocab = pick(rng, WORDS, 6)
    counts = dict(zip(vocab, rng.sample(range(1, 12), 6), strict=True))
    words = [w for w, c in counts.items() for _ in range(c)]
    rng.shuffle(words)
    top = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:3]]
    first3 = list(dict.fromkeys(words))[:3]
    wrong2 = "head -n 3" if first3 != top else "tail -n 3"
    text = "\n".join(" ".join(words[i:i + 5]) for i in range(0, len(words), 5)) + "\n"
    src, dst = f"/app/{f}.txt", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write the 3 most frequent words of `{src}` to `{dst}`, one per line, the most frequent first.",
        "Find the three words that occur most often in `{src}` and save them to `{dst}`, one per line, in "
        "decreasing order of frequency.",
        "`{dst}` should list the top 3 words of `{src}` by number of occurrences, most common first, one per line.",
        "Rank the words of `{src}` by how often they appear and write the leading three, a word per line and "
        "commonest first, to `{dst}`.",
        "Which three words come up most in the {f} file in /app? List them in `{dst}`, the commonest first, one "
        "a line.",
        "Find the three most common words of {f}.txt, the only .txt file in /app, and write them to `{dst}`, one "
        "per line, from most to least frequent.",
    ], src=src, dst=dst, f=f)
    return Level(
        instruction=instruction, env_files={f"{f}.txt": text}, test_checks=lines_check(dst, top),
        solve=f"tr -s ' ' '\\n' < {src} | sort | uniq -c | sort -rn | head -n 3 | awk '{{print $2}}' > {dst}",
        shapes=[f"awk '{{for (i = 1; i <= NF; i++) n[$i]++}} END {{for (w in n) print n[w], w}}' {src} "
                f"| sort -rn | head -n 3 | cut -d' ' -f2 > {dst}",
                f"grep -o '[a-z]*' {src} | sort | uniq -c | sort -rn | head -n 3 | awk '{{print $2}}' > {dst}"],
        wrong=[f"tr -s ' ' '\\n' < {src} | awk '!s[$0]++' | {wrong2} > {dst}",
               f"tr -s ' ' '\\n' < {src} | sort | uniq -c | sort -n | head -n 3 | awk '{{print $2}}' > {dst}"],
        reads=[dst], what=f"{dst} holds {top}", phrasing=ph,
    )


def grep_files(rng: random.Random) -> Level:
    w = rng.choice(PLAIN)
    others = [x for x in WORDS if w not in x and x not in w]
    d = rng.choice(others)
    stems = pick(rng, [x for x in others if x != d], rng.randint(4, 7))
    hits = sorted(rng.sample(stems, rng.randint(2, len(stems) - 1)))
    env = {}
    for s in stems:
        lines = [" ".join(rng.choices(others, k=3)) for _ in range(rng.randint(2, 4))]
        if s in hits:
            lines.insert(rng.randint(0, len(lines)), f"{rng.choice(others)} {w}")
        env[f"{d}/{s}.txt"] = "\n".join(lines) + "\n"
    want = [f"{s}.txt" for s in hits]
    instruction, ph = say(rng, [
        "Write the names of the files in `/app/{d}` that contain the word `{w}`, sorted, one per line (file names "
        "only, no directory), to `/app/answer.txt`.",
        "Which files of `/app/{d}` mention `{w}`? Save their bare file names, alphabetically, one per line, in "
        "`/app/answer.txt`.",
        "`/app/answer.txt` should list, one per line and in alphabetical order, the names (without path) of the "
        "files in `/app/{d}` that include `{w}`.",
        "Search the files of `/app/{d}` for `{w}` and record the names of those that have it (bare names, A "
        "to Z, a name per line) in `/app/answer.txt`.",
        "Which files in the {d} folder in /app mention the word {w}? Write their names, without the folder, in "
        "alphabetical order and one a line, to `/app/answer.txt`.",
        "Look for the word {w} in the files of the only folder in /app and list the ones that have it, bare names "
        "sorted A to Z, in `/app/answer.txt`.",
    ], d=d, w=w)
    return Level(
        instruction=instruction, env_files=env, test_checks=lines_check("/app/answer.txt", want),
        solve=f"cd /app/{d} && grep -lw {w} * | LC_ALL=C sort > /app/answer.txt",
        shapes=[f"grep -lw {w} /app/{d}/* | xargs -n 1 basename | LC_ALL=C sort > /app/answer.txt",
                f"grep -l {w} /app/{d}/*.txt | sed 's|.*/||' | LC_ALL=C sort > /app/answer.txt"],
        wrong=[f"grep -lw {w} /app/{d}/* > /app/answer.txt", f"grep -hw {w} /app/{d}/* > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {want}", phrasing=ph,
    )


def ext_counts(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    exts = sorted(rng.sample(EXTS, 3))
    counts = dict(zip(exts, rng.sample(range(1, 5), 3), strict=True))
    stems = pick(rng, [w for w in WORDS if w != d], sum(counts.values()))
    names = [f"{s}.{e}" for s, e in zip(stems, [e for e in exts for _ in range(counts[e])], strict=True)]
    want = [f"{e} {counts[e]}" for e in exts]
    instruction, ph = say(rng, [
        "For each file extension in `/app/{d}`, write a line `EXT COUNT` (e.g. `txt 2`) to `/app/answer.txt`, "
        "sorted by extension.",
        "Count the files of `/app/{d}` per extension and save one line per extension, the extension, a space and "
        "the count, in alphabetical order of extension, to `/app/answer.txt`.",
        "`/app/answer.txt` should tally the files in `/app/{d}` by extension: lines like `md 3`, one per "
        "extension, alphabetically.",
        "Group the files of `/app/{d}` by extension and record in `/app/answer.txt` a line `EXT COUNT` for "
        "each group, ordered by extension.",
        "How many files of each kind are in the {d} folder in /app? For each extension write the extension, a "
        "space and its count (like md 3) to `/app/answer.txt`, extensions A to Z.",
        "Count the files in {d}, the only folder in /app, per extension: one line per extension in "
        "`/app/answer.txt`, the extension then how many files have it, sorted by extension.",
    ], d=d)
    return Level(
        instruction=instruction, env_files={f"{d}/{n}": f"{n}\n" for n in names},
        test_checks=lines_check("/app/answer.txt", want),
        solve=f"ls /app/{d} | sed 's/.*\\.//' | LC_ALL=C sort | uniq -c | awk '{{print $2\" \"$1}}' > /app/answer.txt",
        shapes=[f"ls /app/{d} | awk -F. '{{n[$NF]++}} END {{for (e in n) print e, n[e]}}' | LC_ALL=C sort "
                "> /app/answer.txt",
                f"find /app/{d} -type f | sed 's/.*\\.//' | LC_ALL=C sort | uniq -c | awk '{{print $2, $1}}' "
                "> /app/answer.txt"],
        wrong=[f"ls /app/{d} | sed 's/.*\\.//' | LC_ALL=C sort | uniq -c > /app/answer.txt",
               f"ls /app/{d} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {want}", phrasing=ph,
    )


def word_total(rng: random.Random) -> Level:
    w = rng.choice(PLAIN)
    others = [x for x in WORDS if w not in x and x not in w]
    d = rng.choice(others)
    stems = pick(rng, [x for x in others if x != d], rng.randint(2, 4))
    env, n = {}, 0
    for i, s in enumerate(stems):
        lines = [" ".join(rng.choices(others, k=3)) for _ in range(rng.randint(2, 4))]
        k = 2 if i == 0 else rng.randint(0, 2)  # the first file has a line with the word twice
        if k:
            lines.insert(rng.randint(0, len(lines)), f"{w} {rng.choice(others)} {w}" if i == 0 else
                         f"{rng.choice(others)} {w}")
            n += 2 if i == 0 else 1
        env[f"{d}/{s}.txt"] = "\n".join(lines) + "\n"
    instruction, ph = say(rng, [
        "Write how many times the word `{w}` occurs in all the `.txt` files of `/app/{d}` together to "
        "`/app/answer.txt` (every occurrence counts, also two on one line).",
        "Count every occurrence of `{w}` across the `.txt` files in `/app/{d}` (several on a line count "
        "separately) and save the total in `/app/answer.txt`.",
        "What is the total number of occurrences of `{w}` in `/app/{d}/*.txt`? Each appearance counts, even twice "
        "in one line. Write it to `/app/answer.txt`.",
        "Across all `.txt` files of `/app/{d}`, tally each single appearance of `{w}` (two on one line are "
        "two) and record the sum in `/app/answer.txt`.",
        "How often does the word {w} appear in the text files of the {d} folder in /app, all together? Every "
        "appearance counts, two on a line are two; write the total to `/app/answer.txt`.",
        "Count each occurrence of {w} in the .txt files of the only folder in /app (a line with it twice adds "
        "two) and save the sum in `/app/answer.txt`.",
    ], w=w, d=d)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"cat /app/{d}/*.txt | grep -ow {w} | wc -l > /app/answer.txt",
        shapes=[f"grep -ow {w} /app/{d}/*.txt | wc -l > /app/answer.txt",
                f"cat /app/{d}/*.txt | tr ' ' '\\n' | grep -cx {w} > /app/answer.txt"],
        wrong=[f"cat /app/{d}/*.txt | grep -w {w} | wc -l > /app/answer.txt",
               f"grep -lw {w} /app/{d}/*.txt | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


# -- levels 3 and 4 ------------------------------------------------------------------------------


def distinct_lines(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    shared = pick(rng, WORDS, 4)
    env, all_lines = {}, []
    for stem in pick(rng, WORDS, rng.randint(2, 4)):
        lines = [shared[0], rng.choice(shared[1:]), *pick(rng, USERS, 2)]  # shared[0] repeats across files
        env[f"{d}/{stem}.txt"] = "\n".join(lines) + "\n"
        all_lines += lines
    n = len(set(all_lines))
    instruction, ph = say(rng, [
        "Count the distinct lines across all `.txt` files in `/app/{d}` together (a line that appears in several "
        "files counts once) and write that number to `/app/answer.txt`.",
        "How many different lines do the `.txt` files of `/app/{d}` hold between them? A line repeated in two "
        "files counts once. Save the number in `/app/answer.txt`.",
        "Write to `/app/answer.txt` the number of unique lines over every `.txt` file in `/app/{d}` combined "
        "(duplicates across files count once).",
    ], d=d)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"cat /app/{d}/*.txt | sort -u | wc -l > /app/answer.txt",
        wrong=[f"cat /app/{d}/*.txt | wc -l > /app/answer.txt",
               f"for f in /app/{d}/*.txt; do sort -u $f; done | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def dept_total(rng: random.Random) -> Level:
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
    instruction, ph = say(rng, [
        "`/app/{f}.csv` has the columns `name,dept,salary`. Write the name of the department whose salaries add up "
        "to the largest total to `/app/answer.txt`.",
        "Group `/app/{f}.csv` (columns `name,dept,salary`) by department and save the department with the highest "
        "salary sum in `/app/answer.txt`.",
        "Which `dept` in `/app/{f}.csv` (header `name,dept,salary`) pays the most in total? Write its name to "
        "`/app/answer.txt`.",
    ], f=f)
    return Level(
        instruction=instruction, env_files={f"{f}.csv": csv}, test_checks=answer_check("/app/answer.txt", best),
        solve=f"tail -n +2 /app/{f}.csv | awk -F, '{{t[$2]+=$3}} END {{for (d in t) print t[d], d}}' "
              "| sort -rn | head -n 1 | awk '{print $2}' > /app/answer.txt",
        wrong=[f"tail -n +2 /app/{f}.csv | sort -t, -k3 -rn | head -n 1 | cut -d, -f2 > /app/answer.txt",
               f"sed -n 2p /app/{f}.csv | cut -d, -f2 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {best}", phrasing=ph,
    )


@register
class PipelineFamily(ProceduralFamily):
    name = "pipeline"
    family = "pipeline"
    templates = (
        Template("count-ext", 1, count_ext), Template("largest-file", 1, largest_file),
        Template("total-lines", 1, total_lines), Template("find-path", 1, find_path),
        Template("top-words", 2, top_words), Template("grep-files", 2, grep_files),
        Template("ext-counts", 2, ext_counts), Template("word-total", 2, word_total),
        Template("distinct-lines", 3, distinct_lines), Template("dept-total", 4, dept_total),
    )
