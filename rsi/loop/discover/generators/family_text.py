"""The `text` family: text processing with standard tools (count lines / words / matches, first and last
lines, upper case, sort, dedupe, reverse, numeric sort; distinct sorted lines and word replacement above).

Each environment holds one text file in /app, so "the only .txt file in /app" and "the {name} file in /app" name it
as well as its path does; the last two phrasings of each level-1/2 template say it so (a person's words)."""

from __future__ import annotations

import random

from rsi.loop.discover.generators import shapes
from rsi.loop.discover.generators.procedural import (
    NUMBER_WORDS,
    PLAIN,
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


def _names(rng: random.Random) -> tuple[str, str]:
    f, out = pick(rng, WORDS, 2)
    return f"/app/{f}.txt", f"/app/{out}.txt"


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _stem(path: str) -> str:
    """`/app/cedar.txt` -> `cedar`: the word a person calls the file by ("the cedar file")."""
    return path.rsplit("/", 1)[1].rsplit(".", 1)[0]


# -- level 1 -------------------------------------------------------------------------------------


def count_lines(rng: random.Random) -> Level:
    src, out = _names(rng)
    lines = word_lines(rng, rng.randint(4, 20))
    n = len(lines)
    instruction, ph = say(rng, [
        "Write the number of lines in `{src}` to the file `{out}`.",
        "Count the lines of `{src}` and save that number in `{out}`.",
        "How many lines does `{src}` have? Put the number (digits only) into `{out}`.",
        "Store the line count of `{src}` in `{out}` (only the number).",
        "How long is the {f} file in /app, in lines? Write just that number to `{out}`.",
        "There is a single text file in /app, {f}.txt. Find out how many lines it has and put the figure in "
        "`{out}`.",
    ], src=src, out=out, f=_stem(src))
    solve, *alts = shapes.count_lines(src, out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=answer_check(out, str(n)),
        solve=solve, shapes=alts, wrong=[f"wc -w < {src} > {out}", f"echo {n + 1} > {out}"],
        reads=[out], what=f"{out} holds {n}", phrasing=ph,
    )


def count_words(rng: random.Random) -> Level:
    src, out = _names(rng)
    lines = word_lines(rng, rng.randint(3, 9))
    n = sum(len(ln.split()) for ln in lines)
    instruction, ph = say(rng, [
        "Write the number of words in `{src}` to `{out}`.",
        "Count every word of `{src}` (words are separated by spaces or line breaks) and save the count in `{out}`.",
        "How many words does `{src}` hold? Write just that number to `{out}`.",
        "Tally up the words in `{src}` and record the total in `{out}`.",
        "I'd like to know how many words the {f} file in /app contains; save that count to `{out}`.",
        "Count all the words in {f}.txt, the only .txt file in /app, and write the total, digits only, to "
        "`{out}`.",
    ], src=src, out=out, f=_stem(src))
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=answer_check(out, str(n)),
        solve=f"wc -w < {src} > {out}", wrong=[f"wc -l < {src} > {out}", f"wc -c < {src} > {out}"],
        shapes=[f"awk '{{n += NF}} END {{print n}}' {src} > {out}", f"tr -s ' ' '\\n' < {src} | wc -l > {out}"],
        reads=[out], what=f"{out} holds {n}", phrasing=ph,
    )


def head(rng: random.Random) -> Level:
    src, out = _names(rng)
    n = rng.randint(2, 4)
    lines = word_lines(rng, rng.randint(2 * n + 1, 2 * n + 5))
    instruction, ph = say(rng, [
        "Write the first {n} lines of `{src}` to `{out}`.",
        "Copy only the top {n} lines of `{src}` into `{out}`.",
        "`{out}` should hold the opening {n} lines of `{src}`, unchanged and in order.",
        "Take the beginning of `{src}`, its first {n} lines, and write them out to `{out}`.",
        "Copy the first {nw} lines of the {f} file in /app into `{out}`, exactly as they are.",
        "Only the top of {f}.txt in /app matters (the one text file there): its opening {nw} lines. Put them in "
        "`{out}`, unchanged.",
    ], n=n, src=src, out=out, f=_stem(src), nw=NUMBER_WORDS[n])
    solve, *alts = shapes.head(src, out, n)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, lines[:n]),
        solve=solve, shapes=alts, wrong=[f"tail -n {n} {src} > {out}", f"head -n {n + 1} {src} > {out}"],
        reads=[out], what=f"{out} holds the first {n} lines", phrasing=ph,
    )


def tail(rng: random.Random) -> Level:
    src, out = _names(rng)
    n = rng.randint(2, 4)
    lines = word_lines(rng, rng.randint(2 * n + 1, 2 * n + 5))
    instruction, ph = say(rng, [
        "Write the last {n} lines of `{src}` to `{out}`.",
        "Copy only the final {n} lines of `{src}` into `{out}`, in their original order.",
        "`{out}` should hold the closing {n} lines of `{src}`, unchanged.",
        "From `{src}`, keep just the bottom {n} lines and write those to `{out}`.",
        "Save the last {nw} lines of the {f} file in /app to `{out}`, in the order they appear.",
        "The end of {f}.txt, the only .txt file in /app, is what I need: its final {nw} lines, unchanged, in "
        "`{out}`.",
    ], n=n, src=src, out=out, f=_stem(src), nw=NUMBER_WORDS[n])
    solve, *alts = shapes.tail(src, out, n)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, lines[-n:]),
        solve=solve, shapes=alts, wrong=[f"head -n {n} {src} > {out}", f"tail -n {n - 1} {src} > {out}"],
        reads=[out], what=f"{out} holds the last {n} lines", phrasing=ph,
    )


def upper(rng: random.Random) -> Level:
    src, out = _names(rng)
    lines = word_lines(rng, rng.randint(2, 6))
    instruction, ph = say(rng, [
        "Write the content of `{src}` in upper case to `{out}`.",
        "Convert every letter of `{src}` to capitals and save the result as `{out}`.",
        "`{out}` must be `{src}` with all lower-case letters turned into upper case.",
        "Uppercase the whole of `{src}` and write it out as `{out}`.",
        "Make a shouting version of the {f} file in /app, every letter a capital, and save it as `{out}`.",
        "Take the one text file in /app, {f}.txt, and write it out again in block capitals to `{out}`.",
    ], src=src, out=out, f=_stem(src))
    solve, *alts = shapes.upper(src, out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)},
        test_checks=lines_check(out, [ln.upper() for ln in lines]), solve=solve, shapes=alts,
        wrong=[f"cp {src} {out}", f"sed 's/.*/\\u&/' {src} > {out}"], reads=[out],
        what=f"{out} is {src} in upper case", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def sort(rng: random.Random) -> Level:
    src, out = _names(rng)
    lines = pick(rng, WORDS, rng.randint(5, 10))
    while lines == sorted(lines) or lines == sorted(lines, reverse=True):
        rng.shuffle(lines)
    instruction, ph = say(rng, [
        "Write the lines of `{src}`, sorted alphabetically, to `{out}`.",
        "Sort the lines of `{src}` in alphabetical order and save them to `{out}`.",
        "`{out}` should hold every line of `{src}`, in A-to-Z order.",
        "Put the lines of `{src}` into dictionary order and write the result to `{out}`.",
        "Alphabetise the {f} list in /app (one word per line) and save the sorted list as `{out}`.",
        "The only .txt file in /app, {f}.txt, is a jumbled list of words. Write them out A to Z, one per line, to "
        "`{out}`.",
    ], src=src, out=out, f=_stem(src))
    solve, *alts = shapes.sort_lines(src, out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, sorted(lines)),
        solve=solve, shapes=alts, wrong=[f"cp {src} {out}", f"LC_ALL=C sort -r {src} > {out}"],
        reads=[out], what=f"{out} holds the sorted lines", phrasing=ph,
    )


def _uniq(lines: list[str]) -> list[str]:
    return [ln for i, ln in enumerate(lines) if i == 0 or lines[i - 1] != ln]


def dedupe(rng: random.Random) -> Level:
    src, out = _names(rng)
    base = pick(rng, WORDS, rng.randint(4, 6))
    lines = base + rng.choices(base, k=rng.randint(3, 5))
    want: list[str] = []
    for _ in range(100):  # first-seen order must differ from sorted order and from `uniq`'s answer
        rng.shuffle(lines)
        want = list(dict.fromkeys(lines))
        if want != sorted(want) and _uniq(lines) != want:
            break
    instruction, ph = say(rng, [
        "Write the lines of `{src}` to `{out}` with repeated lines removed: keep the first occurrence of each "
        "line, in the original order.",
        "Remove duplicate lines from `{src}` (keep each line's first appearance, do not sort) and save the result "
        "as `{out}`.",
        "`{out}` should list every distinct line of `{src}` once, in the order each first appears.",
        "Some lines in `{src}` repeat. Write it to `{out}` keeping only the first copy of each line, order "
        "unchanged.",
        "The {f} list in /app has words listed more than once. Write it to `{out}` with every repeat dropped: "
        "each word once, where it first shows up.",
        "Clean up {f}.txt, the only text file in /app: save a copy without its duplicate lines to `{out}`, "
        "keeping each line's first appearance and the original order (no sorting).",
    ], src=src, out=out, f=_stem(src))
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, want),
        solve=f"awk '!seen[$0]++' {src} > {out}", wrong=[f"LC_ALL=C sort -u {src} > {out}", f"uniq {src} > {out}"],
        shapes=[f"perl -ne 'print unless $seen{{$_}}++' {src} > {out}",
                f"python3 -c \"import sys; sys.stdout.write(''.join(dict.fromkeys(open('{src}'))))\" > {out}"],
        reads=[out], what=f"{out} holds the distinct lines in first-seen order", phrasing=ph,
    )


def count_matches(rng: random.Random) -> Level:
    w = rng.choice(PLAIN)
    others = [x for x in WORDS if w not in x and x not in w]
    f, o = pick(rng, others, 2)
    src, out = f"/app/{f}.txt", f"/app/{o}.txt"
    lines = [" ".join(rng.choices(others, k=rng.randint(2, 4))) for _ in range(rng.randint(4, 9))]
    k = rng.randint(2, 3)
    hits = [f"{w} {rng.choice(others)} {w}"] + [f"{rng.choice(others)} {w}" for _ in range(k - 1)]
    for h in hits:
        lines.insert(rng.randint(0, len(lines)), h)
    instruction, ph = say(rng, [
        "Write the number of lines of `{src}` that contain the word `{w}` to `{out}`.",
        "Count how many lines in `{src}` mention `{w}` (a line counts once) and write that number to `{out}`.",
        "In `{src}`, how many lines include `{w}`? Save the count of such lines to `{out}`.",
        "Find the lines of `{src}` containing `{w}` and record how many there are in `{out}`.",
        "On how many lines of the {f} file in /app does the word {w} turn up? Write that count to `{out}` (a line "
        "with it twice still counts once).",
        "Look through the single .txt file in /app for lines mentioning {w}, and save the number of such lines "
        "in `{out}`.",
    ], src=src, w=w, out=out, f=f)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=answer_check(out, str(k)),
        solve=f"grep -cw {w} {src} > {out}", wrong=[f"grep -ow {w} {src} | wc -l > {out}", f"wc -l < {src} > {out}"],
        shapes=[f"grep -w {w} {src} | wc -l > {out}", f"grep -c {w} {src} > {out}",
                f"awk '/{w}/ {{n++}} END {{print n + 0}}' {src} > {out}"],
        reads=[out], what=f"{out} holds {k}", phrasing=ph,
    )


def reverse(rng: random.Random) -> Level:
    src, out = _names(rng)
    lines = pick(rng, WORDS, rng.randint(4, 8))
    while lines[::-1] == sorted(lines, reverse=True) or lines == sorted(lines):
        rng.shuffle(lines)
    instruction, ph = say(rng, [
        "Write the lines of `{src}` in reverse order (last line first) to `{out}`.",
        "Save `{src}` upside down into `{out}`: its last line first, its first line last.",
        "`{out}` should hold the lines of `{src}` from the bottom up.",
        "Flip the line order of `{src}` so the first line becomes the last, and write the result to `{out}`.",
        "Turn the {f} list in /app upside down (its bottom line on top) and save that as `{out}`.",
        "Write the lines of {f}.txt, the only .txt file in /app, to `{out}` backwards, starting from its last "
        "line and ending with its first.",
    ], src=src, out=out, f=_stem(src))
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, lines[::-1]),
        solve=f"tac {src} > {out}", wrong=[f"cp {src} {out}", f"LC_ALL=C sort -r {src} > {out}"],
        shapes=[f"sed '1!G;h;$!d' {src} > {out}",
                f"awk '{{line[NR] = $0}} END {{for (i = NR; i > 0; i--) print line[i]}}' {src} > {out}"],
        reads=[out], what=f"{out} holds the lines reversed", phrasing=ph,
    )


def sort_numeric(rng: random.Random) -> Level:
    src, out = _names(rng)
    # one-digit numbers 5-9 and two-digit ones 10-49: text order puts "12" before "7", numeric order does not
    nums = rng.sample(range(5, 10), 2) + rng.sample(range(10, 50), 3) + rng.sample(range(100, 1000), 2)
    rng.shuffle(nums)
    want = [str(n) for n in sorted(nums)]
    instruction, ph = say(rng, [
        "`{src}` holds one number per line. Write them to `{out}` sorted from smallest to largest.",
        "Sort the numbers in `{src}` numerically (ascending) and save them, one per line, to `{out}`.",
        "`{out}` should list the numbers of `{src}` in increasing numeric order.",
        "Order the numbers listed in `{src}` by value, lowest first, and write them one per line to `{out}`.",
        "The {f} file in /app is a list of numbers. Put them in order of size, smallest at the top, and save the "
        "list as `{out}`.",
        "Rank the numbers in {f}.txt, the only text file in /app, from low to high (by value, not as text) and "
        "write them, one a line, to `{out}`.",
    ], src=src, out=out, f=_stem(src))
    solve, *alts = shapes.sort_numeric(src, out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text([str(n) for n in nums])}, test_checks=lines_check(out, want),
        solve=solve, shapes=alts, wrong=[f"LC_ALL=C sort {src} > {out}", f"sort -rn {src} > {out}"],
        reads=[out], what=f"{out} holds the numbers in order", phrasing=ph,
    )


# -- levels 3 and 4 ------------------------------------------------------------------------------


def distinct_sorted(rng: random.Random) -> Level:
    src, out = _names(rng)
    base = pick(rng, WORDS, rng.randint(4, 7))
    lines = base + rng.choices(base, k=rng.randint(3, 6))
    rng.shuffle(lines)
    while lines == sorted(lines) or list(dict.fromkeys(lines)) == sorted(set(lines)):
        rng.shuffle(lines)
    instruction, ph = say(rng, [
        "Write the distinct lines of `{src}` to `{out}`, sorted alphabetically, each line once.",
        "Save every different line of `{src}` exactly once, in alphabetical order, to `{out}`.",
        "`{out}` should hold the unique lines of `{src}`: no repeats, sorted A to Z.",
    ], src=src, out=out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, sorted(set(lines))),
        solve=f"LC_ALL=C sort -u {src} > {out}", wrong=[f"LC_ALL=C sort {src} > {out}", f"uniq {src} > {out}"],
        reads=[out], what=f"{out} holds the distinct sorted lines", phrasing=ph,
    )


def replace(rng: random.Random) -> Level:
    old = rng.choice(PLAIN)
    f, o, new = pick(rng, [w for w in WORDS if w != old], 3)
    src, out = f"/app/{f}.txt", f"/app/{o}.txt"
    others = [w for w in WORDS if w not in (old, new) and old not in w]
    lines = [" ".join(rng.choices(others, k=3)) for _ in range(rng.randint(3, 6))]
    lines.insert(rng.randint(0, len(lines)), f"{old} {rng.choice(others)} {old}")
    lines.insert(rng.randint(0, len(lines)), f"{rng.choice(others)} {old}")
    want = [ln.replace(old, new) for ln in lines]
    instruction, ph = say(rng, [
        "Replace every occurrence of the word `{old}` with `{new}` in `{src}` and write the result to `{out}`.",
        "Write `{src}` to `{out}` with each `{old}` changed into `{new}` (all of them, also several on one line).",
        "`{out}` should be a copy of `{src}` in which the word `{old}` is replaced by `{new}` everywhere.",
    ], old=old, new=new, src=src, out=out)
    return Level(
        instruction=instruction, env_files={src[5:]: _text(lines)}, test_checks=lines_check(out, want),
        solve=f"sed 's/{old}/{new}/g' {src} > {out}",
        wrong=[f"sed 's/{old}/{new}/' {src} > {out}", f"grep -v {old} {src} > {out}"],
        reads=[out], what=f"{out} has every {old} replaced", phrasing=ph,
    )


@register
class TextFamily(ProceduralFamily):
    name = "text"
    family = "text"
    templates = (
        Template("count-lines", 1, count_lines), Template("count-words", 1, count_words), Template("head", 1, head),
        Template("tail", 1, tail), Template("upper", 1, upper),
        Template("sort", 2, sort), Template("dedupe", 2, dedupe), Template("count-matches", 2, count_matches),
        Template("reverse", 2, reverse), Template("sort-numeric", 2, sort_numeric),
        Template("distinct-sorted", 3, distinct_sorted), Template("replace", 4, replace),
    )
