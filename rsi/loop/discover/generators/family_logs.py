"""The `logs` family: log analysis (lines of a level, the first or last of them, everything but one level,
counts, distinct users, counts per level, the messages of a level; the top user and distinct users with errors
above). Lines read `2026-01-DD LEVEL user=NAME message`, with a trap line that mentions a level's word in lower
case under another level.

Each environment holds one log in /app, so "the only .log file in /app" or "the {name} log" names it as well as its
path does; the last two phrasings of each level-1/2 template say it so (a person's words)."""

from __future__ import annotations

import random

from rsi.loop.discover.generators.procedural import (
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

LEVELS = ("ERROR", "WARN", "INFO", "DEBUG")
Entry = tuple[str, str, str]  # level, user, message


def _log(rng: random.Random, n: int, level: str) -> list[Entry]:
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


def _fmt(entries: list[Entry]) -> list[str]:
    return [f"2026-01-{(i % 28) + 1:02d} {lv} user={u} {msg}" for i, (lv, u, msg) in enumerate(entries)]


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


# -- level 1 -------------------------------------------------------------------------------------


def grep_level(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(LEVELS[:2])
    lines = _fmt(_log(rng, rng.randint(6, 12), level))
    want = [ln for ln in lines if f" {level} " in ln]
    src, dst = f"/app/{log}.log", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write every line of `{src}` that contains the word `{level}` to `{dst}`, in the same order, unchanged.",
        "Copy the `{level}` lines of `{src}` (and only those) into `{dst}`, keeping their order.",
        "`{dst}` should hold exactly the lines of `{src}` with the level `{level}`, as they are.",
        "Filter `{src}` down to its `{level}` lines and write them, untouched and in order, to `{dst}`.",
        "Pull every {level} line out of the {log} log in /app and save them, as they are and in order, to `{dst}`.",
        "I only care about the {level}-level entries of the single .log file in /app: copy those lines, "
        "unchanged, into `{dst}`.",
    ], src=src, level=level, dst=dst, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(lines)}, test_checks=lines_check(dst, want),
        solve=f"grep -w {level} {src} > {dst}",
        shapes=[f"awk '$2 == \"{level}\"' {src} > {dst}", f"grep ' {level} ' {src} > {dst}"],
        wrong=[f"grep -i {level} {src} > {dst}", f"grep -v {level} {src} > {dst}"],
        reads=[dst], what=f"{dst} holds the {level} lines", phrasing=ph,
    )


def _edge(rng: random.Random, level: str, first: bool) -> tuple[list[str], str, str]:
    """Log lines whose first (or last) `level` line is neither the file's first (last) line nor its other end."""
    entries = _log(rng, rng.randint(6, 10), level)
    filler = next(x for x in LEVELS if x != level)
    entries.insert(0, (filler, rng.choice(USERS), "started"))
    entries.append((filler, rng.choice(USERS), "stopped"))
    lines = _fmt(entries)
    mine = [ln for ln in lines if f" {level} " in ln]
    return lines, (mine[0] if first else mine[-1]), (mine[-1] if first else mine[0])


def first_line(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(LEVELS[:3])
    lines, want, _ = _edge(rng, level, first=True)
    src, dst = f"/app/{log}.log", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write the first `{level}` line of `{src}` to `{dst}`, unchanged.",
        "Find the earliest line of `{src}` with the level `{level}` and save that whole line in `{dst}`.",
        "`{dst}` should hold one line: the first `{level}` entry of `{src}`, exactly as it appears.",
        "Scan `{src}` from the top, stop at the first line whose level is `{level}`, and write that line as "
        "it is to `{dst}`.",
        "When did the {log} log in /app first report a {level}? Save that whole line, exactly as it appears, in "
        "`{dst}`.",
        "Find the earliest {level}-level entry in {log}.log, the only .log file in /app, and write that one "
        "line, unchanged, to `{dst}`.",
    ], level=level, src=src, dst=dst, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(lines)}, test_checks=lines_check(dst, [want]),
        solve=f"grep -w -m 1 {level} {src} > {dst}",
        shapes=[f"grep -w {level} {src} | head -n 1 > {dst}", f"awk '$2 == \"{level}\" {{print; exit}}' {src} > {dst}"],
        wrong=[f"grep -w {level} {src} | tail -n 1 > {dst}", f"head -n 1 {src} > {dst}"],
        reads=[dst], what=f"{dst} holds the first {level} line", phrasing=ph,
    )


def last_line(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(LEVELS[:3])
    lines, want, _ = _edge(rng, level, first=False)
    src, dst = f"/app/{log}.log", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write the last `{level}` line of `{src}` to `{dst}`, unchanged.",
        "Find the most recent (last) line of `{src}` with the level `{level}` and save that whole line in `{dst}`.",
        "`{dst}` should hold one line: the final `{level}` entry of `{src}`, exactly as it appears.",
        "Of all the `{level}` lines in `{src}`, take the one nearest the end and write it verbatim to "
        "`{dst}`.",
        "What was the latest {level} in the {log} log in /app? Put that whole line, as it stands, into `{dst}`.",
        "Find the most recent {level}-level entry of the single .log file in /app (the one nearest its end) and "
        "save the line unchanged to `{dst}`.",
    ], level=level, src=src, dst=dst, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(lines)}, test_checks=lines_check(dst, [want]),
        solve=f"grep -w {level} {src} | tail -n 1 > {dst}",
        shapes=[f"awk '$2 == \"{level}\" {{last = $0}} END {{print last}}' {src} > {dst}",
                f"tac {src} | grep -w -m 1 {level} > {dst}"],
        wrong=[f"grep -w -m 1 {level} {src} > {dst}", f"tail -n 1 {src} > {dst}"],
        reads=[dst], what=f"{dst} holds the last {level} line", phrasing=ph,
    )


def exclude(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(("DEBUG", "INFO"))
    lines = _fmt(_log(rng, rng.randint(6, 12), level))
    want = [ln for ln in lines if f" {level} " not in ln]
    src, dst = f"/app/{log}.log", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write every line of `{src}` except the `{level}` lines to `{dst}`, in the same order.",
        "Drop the `{level}`-level lines from `{src}` and save the remaining lines, unchanged, in `{dst}`.",
        "`{dst}` should be `{src}` without its `{level}` entries (all other lines kept as they are).",
        "Filter out all `{level}` entries of `{src}`; write what is left, in its original order, to `{dst}`.",
        "The {level} chatter in the {log} log in /app is noise: save every other line, unchanged and in order, to "
        "`{dst}`.",
        "Copy {log}.log, the only .log file in /app, to `{dst}` minus its {level}-level entries; all the other "
        "lines stay as they are.",
    ], level=level, src=src, dst=dst, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(lines)}, test_checks=lines_check(dst, want),
        solve=f"grep -vw {level} {src} > {dst}",
        shapes=[f"awk '$2 != \"{level}\"' {src} > {dst}", f"sed '/ {level} /d' {src} > {dst}"],
        wrong=[f"grep -vi {level} {src} > {dst}", f"grep -w {level} {src} > {dst}"],
        reads=[dst], what=f"{dst} holds the lines other than {level}", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def count_level(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    level = rng.choice(LEVELS[:3])
    entries = _log(rng, rng.randint(8, 14), level)
    n = sum(1 for e in entries if e[0] == level)
    if n == len(entries) - n:
        entries.append((next(x for x in LEVELS if x != level), rng.choice(USERS), "idle"))
    src = f"/app/{log}.log"
    instruction, ph = say(rng, [
        "Write the number of `{level}` lines in `{src}` to `/app/answer.txt`.",
        "Count the entries of `{src}` whose level is `{level}` and save the count in `/app/answer.txt`.",
        "How many `{level}` lines does `{src}` have? Put the number into `/app/answer.txt`.",
        "Tally the `{level}` entries in the log `{src}` and record that figure in `/app/answer.txt`.",
        "How many times did the {log} log in /app record a {level}? Write the number to `/app/answer.txt`.",
        "Count the {level}-level entries (by the level field, not by words in a message) of {log}.log, the single "
        ".log file in /app, and save the count in `/app/answer.txt`.",
    ], level=level, src=src, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(_fmt(entries))},
        test_checks=answer_check("/app/answer.txt", str(n)), solve=f"grep -cw {level} {src} > /app/answer.txt",
        shapes=[f"awk '$2 == \"{level}\"' {src} | wc -l > /app/answer.txt",
                f"grep -w {level} {src} | wc -l > /app/answer.txt",
                f"awk '$2 == \"{level}\" {{n++}} END {{print n}}' {src} > /app/answer.txt"],
        wrong=[f"grep -ci {level} {src} > /app/answer.txt", f"grep -cvw {level} {src} > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


def users(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    entries = _log(rng, rng.randint(7, 12), rng.choice(LEVELS))
    dup = rng.choice(entries)
    entries.insert(rng.randint(0, len(entries)), ("INFO", dup[1], "again"))  # a user appears twice at least
    want = sorted({u for _, u, _ in entries})
    src = f"/app/{log}.log"
    instruction, ph = say(rng, [
        "Each line of `{src}` has a `user=NAME` field. Write the distinct user names, sorted alphabetically, one "
        "per line (just the names), to `/app/answer.txt`.",
        "List every user that appears in `{src}` (the NAME of `user=NAME`) once, in alphabetical order, one per "
        "line, in `/app/answer.txt`.",
        "Which users occur in `{src}`? Save their names, each once and sorted A to Z, without the `user=` prefix, "
        "to `/app/answer.txt`.",
        "Collect the user names from the `user=NAME` fields of `{src}` and write them to `/app/answer.txt`: "
        "no duplicates, A to Z, only the names, a name per line.",
        "Who shows up in the {log} log in /app? Each line names its user as user=NAME; list every name once, "
        "alphabetically and without the user= part, in `/app/answer.txt`.",
        "Make a list of the distinct users (the names after user=) of {log}.log, the only .log file in /app: "
        "sorted, one a line, just the names, in `/app/answer.txt`.",
    ], src=src, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(_fmt(entries))},
        test_checks=lines_check("/app/answer.txt", want),
        solve=f"grep -o 'user=[a-z]*' {src} | sed 's/user=//' | LC_ALL=C sort -u > /app/answer.txt",
        shapes=[f"awk '{{print $3}}' {src} | cut -d= -f2 | LC_ALL=C sort -u > /app/answer.txt",
                f"grep -o 'user=[a-z]*' {src} | cut -d= -f2 | LC_ALL=C sort | uniq > /app/answer.txt"],
        wrong=[f"grep -o 'user=[a-z]*' {src} | LC_ALL=C sort -u > /app/answer.txt",
               f"grep -o 'user=[a-z]*' {src} | sed 's/user=//' > /app/answer.txt"],
        reads=["/app/answer.txt"], what="/app/answer.txt holds the sorted users", phrasing=ph,
    )


def per_level(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    levels = sorted(pick(rng, list(LEVELS), 3))
    counts = dict(zip(levels, rng.sample(range(1, 7), 3), strict=True))
    while sorted(levels, key=lambda x: -counts[x]) == levels:  # by count must differ from by name
        counts = dict(zip(levels, rng.sample(range(1, 7), 3), strict=True))
    entries = [(lv, rng.choice(USERS), " ".join(pick(rng, WORDS, 2))) for lv in levels for _ in range(counts[lv])]
    rng.shuffle(entries)
    want = [f"{lv} {counts[lv]}" for lv in levels]
    src = f"/app/{log}.log"
    instruction, ph = say(rng, [
        "Count the lines of each level in `{src}` (the second field) and write one line per level, `LEVEL COUNT` "
        "(e.g. `INFO 3`), sorted by level name, to `/app/answer.txt`.",
        "For every level that occurs in `{src}`, write a line `LEVEL COUNT` to `/app/answer.txt`: the level, one "
        "space, how many lines have it; levels in alphabetical order.",
        "`/app/answer.txt` should tally `{src}` by level: lines like `WARN 2` (level, space, count), one per level, "
        "alphabetically by level.",
        "Make a per-level summary of `{src}` in `/app/answer.txt`: for each level found (2nd field), a line "
        "`LEVEL COUNT`, ordered by level name.",
        "How busy was each level in the {log} log in /app? Write a line per level, the level then its count "
        "(like INFO 3), levels A to Z, to `/app/answer.txt`.",
        "Summarise {log}.log, the only .log file in /app, by level in `/app/answer.txt`: one line per level that "
        "occurs, the level name then how many lines carry it, with the levels sorted A to Z.",
    ], src=src, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(_fmt(entries))},
        test_checks=lines_check("/app/answer.txt", want),
        solve=f"awk '{{print $2}}' {src} | LC_ALL=C sort | uniq -c | awk '{{print $2\" \"$1}}' > /app/answer.txt",
        shapes=[f"awk '{{n[$2]++}} END {{for (l in n) print l, n[l]}}' {src} | LC_ALL=C sort > /app/answer.txt",
                f"cut -d' ' -f2 {src} | LC_ALL=C sort | uniq -c | awk '{{print $2, $1}}' > /app/answer.txt"],
        wrong=[f"awk '{{print $2}}' {src} | LC_ALL=C sort | uniq -c > /app/answer.txt",
               f"awk '{{print $2}}' {src} | LC_ALL=C sort | uniq -c | sort -rn | awk '{{print $2\" \"$1}}' "
               "> /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {want}", phrasing=ph,
    )


def messages(rng: random.Random) -> Level:
    log, out = pick(rng, WORDS, 2)
    level = rng.choice(LEVELS[:3])
    entries = _log(rng, rng.randint(6, 11), level)
    lines = _fmt(entries)
    want = [msg for lv, _, msg in entries if lv == level]
    src, dst = f"/app/{log}.log", f"/app/{out}.txt"
    instruction, ph = say(rng, [
        "Write the message of every `{level}` line of `{src}` (the text after the `user=NAME` field) to `{dst}`, "
        "one per line, in order.",
        "For each `{level}` entry in `{src}`, save only its message, what follows `user=NAME `, to `{dst}`, "
        "keeping the order.",
        "`{dst}` should list the messages (everything after the user field) of the `{level}` lines of `{src}`, "
        "one per line.",
        "Pull out the message text (what comes after `user=NAME`) from each `{level}` line in `{src}` and "
        "write those texts, in log order, a text per line, to `{dst}`.",
        "What did the {level} lines of the {log} log in /app say? Save just their messages (the words after the "
        "user=NAME field), in order, one a line, to `{dst}`.",
        "From {log}.log, the single .log file in /app, take each {level}-level entry's message (what follows "
        "user=NAME) and write those messages, in the log's order, to `{dst}`.",
    ], level=level, src=src, dst=dst, log=log)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(lines)}, test_checks=lines_check(dst, want),
        solve=f"grep -w {level} {src} | cut -d' ' -f4- > {dst}",
        shapes=[f"awk '$2 == \"{level}\"' {src} | cut -d' ' -f4- > {dst}",
                f"grep -w {level} {src} | sed 's/^[^ ]* [^ ]* [^ ]* //' > {dst}"],
        wrong=[f"grep -w {level} {src} > {dst}", f"cut -d' ' -f4- {src} > {dst}"],
        reads=[dst], what=f"{dst} holds the {level} messages", phrasing=ph,
    )


# -- levels 3 and 4 ------------------------------------------------------------------------------


def top_user(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    top, first, *rest = pick(rng, USERS, 5)
    entries = [("ERROR", first, "disk full")] + [("INFO", first, "ok")] * 4
    entries += [("ERROR", top, " ".join(pick(rng, WORDS, 2))) for _ in range(3)]
    entries += [(rng.choice(LEVELS), u, "tick") for u in rest]
    head, tail = entries[:1], entries[1:]
    rng.shuffle(tail)
    src = f"/app/{log}.log"
    instruction, ph = say(rng, [
        "Each line of `{src}` has a level and a `user=NAME` field. Write the name of the user with the most "
        "`ERROR` lines to `/app/answer.txt` (just the name).",
        "Which user has the largest number of `ERROR` lines in `{src}` (lines carry a level and `user=NAME`)? "
        "Save the name alone in `/app/answer.txt`.",
        "Find the user (from the `user=NAME` fields of `{src}`) behind most `ERROR` entries and write that name "
        "to `/app/answer.txt`.",
    ], src=src)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(_fmt(head + tail))},
        test_checks=answer_check("/app/answer.txt", top),
        solve=(f"grep -w ERROR {src} | grep -o 'user=[a-z]*' | sort | uniq -c | sort -rn | head -n 1 "
               "| sed 's/.*user=//' > /app/answer.txt"),
        wrong=[f"grep -o 'user=[a-z]*' {src} | sort | uniq -c | sort -rn | head -n 1 | sed 's/.*user=//' "
               "> /app/answer.txt",
               f"grep -w ERROR {src} | head -n 1 | grep -o 'user=[a-z]*' | sed 's/user=//' > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {top}", phrasing=ph,
    )


def error_users(rng: random.Random) -> Level:
    log = rng.choice(WORDS)
    people = pick(rng, USERS, 6)
    bad = people[:rng.randint(2, 3)]
    entries = [("ERROR", u, "failed") for u in bad for _ in range(rng.randint(1, 3))]
    entries.append(("ERROR", bad[0], "failed again"))
    entries += [(rng.choice(("INFO", "WARN")), u, "ok") for u in people]
    rng.shuffle(entries)
    n = len(bad)
    src = f"/app/{log}.log"
    instruction, ph = say(rng, [
        "Each line of `{src}` has a level and a `user=NAME` field. Write the number of distinct users that have "
        "at least one `ERROR` line to `/app/answer.txt`.",
        "How many different users (by `user=NAME`) have one or more `ERROR` lines in `{src}`? Save the number in "
        "`/app/answer.txt`.",
        "Count the users behind the `ERROR` entries of `{src}`, each user once, and write the count to "
        "`/app/answer.txt`.",
    ], src=src)
    return Level(
        instruction=instruction, env_files={f"{log}.log": _text(_fmt(entries))},
        test_checks=answer_check("/app/answer.txt", str(n)),
        solve=f"grep -w ERROR {src} | grep -o 'user=[a-z]*' | sort -u | wc -l > /app/answer.txt",
        wrong=[f"grep -cw ERROR {src} > /app/answer.txt",
               f"grep -o 'user=[a-z]*' {src} | sort -u | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {n}", phrasing=ph,
    )


@register
class LogsFamily(ProceduralFamily):
    name = "logs"
    family = "logs"
    templates = (
        Template("grep-level", 1, grep_level), Template("first-line", 1, first_line),
        Template("last-line", 1, last_line), Template("exclude", 1, exclude),
        Template("count-level", 2, count_level), Template("users", 2, users), Template("per-level", 2, per_level),
        Template("messages", 2, messages),
        Template("top-user", 3, top_user), Template("error-users", 4, error_users),
    )
