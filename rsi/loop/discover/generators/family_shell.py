"""The `shell` family: everyday shell work the other families miss (find files by extension, edit a file in
place with sed, cut a field, list a tar archive, make a symlink, count files in a tree, date to epoch; find by
size, filter rows with awk, pack a tar archive, export a variable from a file, days between dates).

The last two phrasings of each template are a person's words: a file described by what is unique about it in /app
("the only .conf file", "the {name} folder"), a date or a field number spelt out, names said plainly."""

from __future__ import annotations

import io
import random
import tarfile
from calendar import timegm
from datetime import UTC, datetime, timedelta

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
    q,
    register,
    say,
    word_lines,
)

EXTS = ("log", "txt", "csv", "md", "json", "conf")


def _tree(rng: random.Random, d: str, names: list[str], exts: list[str]) -> dict[str, str]:
    """Files `names[i].exts[i]` spread over `d` and two or three nested subdirectories (env_files keys)."""
    subs = ["", *[f"{s}/" for s in pick(rng, [w for w in WORDS if w not in names and w != d], 2)]]
    subs.append(subs[1] + rng.choice([w for w in WORDS if w not in names and w != d]) + "/")
    return {f"{d}/{rng.choice(subs)}{n}.{e}": f"{n}\n" for n, e in zip(names, exts, strict=True)}


ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth"}


def _spoken(t: datetime) -> str:
    """A date as a person says it: `7 March 2012`."""
    return f"{t.day} {t:%B %Y}"


def _stamp(rng: random.Random) -> datetime:
    return datetime(2001, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(29 * 365 * 86400))


def _tar_text(members: list[tuple[str, str]]) -> str:
    """A plain ustar archive of ASCII members, as text (every byte is ASCII), fixed metadata: reproducible."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, text in members:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode, info.uname, info.gname = len(data), 946684800, 0o644, "root", "root"
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue().decode("ascii")


# -- level 1 -------------------------------------------------------------------------------------


def find_ext(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    ext, *others = rng.sample(EXTS, 3)
    names = pick(rng, [w for w in WORDS if w != d], rng.randint(6, 9))
    exts = [ext if i % 2 == 0 else rng.choice(others) for i in range(len(names))]
    env = _tree(rng, d, names, exts)
    while all(k.count("/") == 1 for k in env if k.endswith(f".{ext}")):  # a match must sit in a subdirectory
        env = _tree(rng, d, names, exts)
    want = sorted(f"/app/{k}" for k in env if k.endswith(f".{ext}"))
    instruction, ph = say(rng, [
        "Find every file ending in `.{ext}` anywhere under `/app/{d}` (subdirectories included) and write their "
        "full paths, sorted, one per line, to `/app/answer.txt`.",
        "List the absolute paths of all `.{ext}` files in the tree `/app/{d}`, at any depth, in sorted order, one "
        "per line, in `/app/answer.txt`.",
        "`/app/answer.txt` should hold the sorted paths (starting with `/app/`) of the `.{ext}` files found "
        "recursively below `/app/{d}`.",
        "Search `/app/{d}` and all of its subfolders for files with the extension `.{ext}`; save each match's "
        "absolute path on its own line of `/app/answer.txt`, in sorted order.",
        "Where are the {ext} files in the {d} folder in /app, subfolders included? Write their full paths, "
        "sorted, one a line, to `/app/answer.txt`.",
        "Hunt down every .{ext} file at any depth inside the only folder in /app and list their absolute paths "
        "in sorted order in `/app/answer.txt`.",
    ], d=d, ext=ext)
    return Level(
        instruction=instruction, env_files=env, test_checks=lines_check("/app/answer.txt", want),
        solve=f"find /app/{d} -type f -name '*.{ext}' | LC_ALL=C sort > /app/answer.txt",
        shapes=[f"find /app/{d} -name '*.{ext}' | LC_ALL=C sort > /app/answer.txt",
                f"shopt -s globstar; printf '%s\\n' /app/{d}/**/*.{ext} | LC_ALL=C sort > /app/answer.txt",
                f"find /app/{d} -type f | grep '\\.{ext}$' | LC_ALL=C sort > /app/answer.txt"],
        wrong=[f"find /app/{d} -maxdepth 1 -type f -name '*.{ext}' | LC_ALL=C sort > /app/answer.txt",
               f"find /app/{d} -type f | LC_ALL=C sort > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt lists the .{ext} files under /app/{d}", phrasing=ph,
    )


def sed_inplace(rng: random.Random) -> Level:
    old = rng.choice(PLAIN)
    f, new = pick(rng, [w for w in WORDS if old not in w and w not in old], 2)
    path = f"/app/{f}.conf"
    others = [w for w in WORDS if old not in w and w not in (new, f)]
    lines = [" ".join(rng.choices(others, k=3)) for _ in range(rng.randint(3, 6))]
    lines.insert(rng.randint(0, len(lines)), f"{old} = {rng.choice(others)} {old}")
    lines.insert(rng.randint(0, len(lines)), f"{rng.choice(others)} {old}")
    instruction, ph = say(rng, [
        "Edit `{path}` in place: replace every occurrence of `{old}` with `{new}`.",
        "In the file `{path}` itself, change all `{old}` to `{new}` (also when a line has several).",
        "Use sed to rewrite `{path}` so that each `{old}` in it becomes `{new}`; the file keeps its name.",
        "`{path}` still says `{old}` in places. Update that file directly so it says `{new}` everywhere instead.",
        "In the {f} config file in /app, swap every {old} for {new}, changing the file itself (some lines have "
        "{old} twice).",
        "The only .conf file in /app still mentions {old}. Edit it in place so that each {old}, all of them, reads "
        "{new}.",
    ], path=path, old=old, new=new, f=f)
    return Level(
        instruction=instruction, env_files={f"{f}.conf": "\n".join(lines) + "\n"},
        test_checks=lines_check(path, [ln.replace(old, new) for ln in lines]),
        solve=f"sed -i 's/{old}/{new}/g' {path}",
        shapes=[f"perl -pi -e 's/{old}/{new}/g' {path}",
                f"sed 's/{old}/{new}/g' {path} > {path}.new && mv {path}.new {path}"],
        wrong=[f"sed -i 's/{old}/{new}/' {path}", f"sed 's/{old}/{new}/g' {path} > /app/{new}.out"],
        reads=[path], what=f"every {old} in {path} is {new}", phrasing=ph,
    )


def cut_field(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    path, k = f"/app/{f}.db", rng.randint(2, 4)
    users = pick(rng, USERS, rng.randint(4, 7))
    rows = [f"{u}:{1000 + i}:{w}:/home/{u}" for i, (u, w) in enumerate(zip(users, rng.choices(WORDS, k=len(users)),
                                                                          strict=True))]
    want = [r.split(":")[k - 1] for r in rows]
    instruction, ph = say(rng, [
        "`{path}` has colon-separated fields. Write field {k} of every line, one per line, to `/app/answer.txt`.",
        "Extract the {k}th `:`-delimited column of `{path}` (all lines, in order) into `/app/answer.txt`.",
        "Each line of `{path}` looks like `a:b:c:d`. Save only the value in position {k} of each line to "
        "`/app/answer.txt`, keeping the line order.",
        "With the colon as separator, take column number {k} of `{path}` and put those values, a value per line, "
        "in `/app/answer.txt`.",
        "The {f} database file in /app keeps its fields apart with colons. Copy out the {nth} field of every "
        "line, in order, one per line, to `/app/answer.txt`.",
        "From {f}.db, the only .db file in /app (fields split by :), save just the {nth} field of each line to "
        "`/app/answer.txt`, keeping the line order.",
    ], path=path, k=k, f=f, nth=ORDINALS[k])
    return Level(
        instruction=instruction, env_files={f"{f}.db": "\n".join(rows) + "\n"},
        test_checks=lines_check("/app/answer.txt", want), solve=f"cut -d: -f{k} {path} > /app/answer.txt",
        shapes=[f"awk -F: '{{print ${k}}}' {path} > /app/answer.txt"],
        wrong=[f"cut -d: -f{k + 1} {path} > /app/answer.txt", f"cut -d' ' -f{k} {path} > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds field {k} of {path}", phrasing=ph,
    )


def tar_list(rng: random.Random) -> Level:
    a, d = pick(rng, WORDS, 2)
    names = [f"{d}/{n}.txt" for n in pick(rng, [w for w in WORDS if w not in (a, d)], rng.randint(4, 6))]
    while names == sorted(names):
        rng.shuffle(names)
    path = f"/app/{a}.tar"
    instruction, ph = say(rng, [
        "Write the names of the members of the archive `{path}`, in the order they are stored, one per line, to "
        "`/app/answer.txt`. Do not extract anything.",
        "List the contents of the tar file `{path}` (member paths exactly as stored, archive order) into "
        "`/app/answer.txt`.",
        "What files does `{path}` contain? Save the member names, one per line and in the archive's own order, "
        "to `/app/answer.txt`.",
        "Without unpacking `{path}`, record its table of contents (each stored path on a line, as tar prints "
        "it) in `/app/answer.txt`.",
        "What is packed in the {a} archive in /app? Without extracting it, write its stored paths, in archive "
        "order, to `/app/answer.txt`.",
        "List what {a}.tar, the only tar file in /app, contains, member names exactly as stored and in archive "
        "order, into `/app/answer.txt`; do not unpack it.",
    ], path=path, a=a)
    return Level(
        instruction=instruction, env_files={f"{a}.tar": _tar_text([(n, f"{n}\n") for n in names])},
        test_checks=lines_check("/app/answer.txt", names), solve=f"tar -tf {path} > /app/answer.txt",
        shapes=[f"tar --list --file={path} > /app/answer.txt",
                f"python3 -c \"import tarfile; print('\\n'.join(tarfile.open('{path}').getnames()))\" "
                "> /app/answer.txt"],
        wrong=[f"tar -tf {path} | LC_ALL=C sort > /app/answer.txt", f"tar -tf {path} | head -n 1 > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt lists {path}", phrasing=ph,
    )


def symlink(rng: random.Random) -> Level:
    a, b = pick(rng, WORDS, 2)
    target, link = f"/app/{a}.txt", f"/app/{b}"
    body = "\n".join(word_lines(rng, rng.randint(1, 3))) + "\n"
    instruction, ph = say(rng, [
        "Create a symbolic link `{link}` that points to `{target}`.",
        "Make `{link}` a symlink to the file `{target}` (a link, not a copy).",
        "Add a soft link named `{link}` whose target is `{target}`; leave the target as it is.",
        "`{target}` should also be reachable as `{link}`: set that up with a symbolic link.",
        "Make a shortcut called {b} in /app that points at the {a} text file there: a symbolic link, not a copy.",
        "The only .txt file in /app, {a}.txt, should also be reachable under the name {b} (in /app too). Set that "
        "up with a soft link.",
    ], link=link, target=target, a=a, b=b)
    checks = ("import os\n"
              f"if not Path({link!r}).is_symlink():\n    fail('{link} is not a symbolic link')\n"
              f"to = os.readlink({link!r})\n"
              f"if os.path.realpath({link!r}) != os.path.realpath({target!r}):\n"
              f"    fail(f'{link} points to {{to}}, not {target}')\n"
              f"if read({target!r}) != {body!r}:\n    fail('{target} was changed')\n")
    return Level(
        instruction=instruction, env_files={f"{a}.txt": body}, test_checks=checks, solve=f"ln -s {target} {link}",
        shapes=[f"ln -sf {target} {link}", f"python3 -c \"import os; os.symlink('{target}', '{link}')\""],
        wrong=[f"cp {target} {link}", f"ln {target} {link}"], reads=[link], what=f"{link} -> {target}", phrasing=ph,
    )


def count_tree(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    names = pick(rng, [w for w in WORDS if w != d], rng.randint(5, 10))
    env = _tree(rng, d, names, rng.choices(EXTS, k=len(names)))
    while len({k.split("/")[1] for k in env}) == len(env):  # `ls | wc -l` must not give the same number
        env = _tree(rng, d, names, rng.choices(EXTS, k=len(names)))
    instruction, ph = say(rng, [
        "Count the regular files under `/app/{d}`, in every subdirectory too, and write the number to "
        "`/app/answer.txt`.",
        "How many files (not directories) does the tree `/app/{d}` hold at any depth? Put the number into "
        "`/app/answer.txt`.",
        "Write to `/app/answer.txt` the total number of files found recursively below `/app/{d}`; directories "
        "themselves do not count.",
        "Walk `/app/{d}` with all its nested folders and record how many plain files it contains in "
        "`/app/answer.txt`.",
        "How many files are in the {d} folder in /app, counting those in its subfolders too (the folders "
        "themselves do not count)? Write the number to `/app/answer.txt`.",
        "Count every file, at any depth, inside {d}, the only folder in /app, and save the count in "
        "`/app/answer.txt`; directories are not files.",
    ], d=d)
    return Level(
        instruction=instruction, env_files=env, test_checks=answer_check("/app/answer.txt", str(len(env))),
        solve=f"find /app/{d} -type f | wc -l > /app/answer.txt",
        shapes=[f"find /app/{d} -type f -printf x | wc -c > /app/answer.txt",
                f"find /app/{d} -type f | grep -c '' > /app/answer.txt"],
        wrong=[f"find /app/{d} | wc -l > /app/answer.txt", f"ls /app/{d} | wc -l > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {len(env)}", phrasing=ph,
    )


def date_epoch(rng: random.Random) -> Level:
    t = _stamp(rng)
    while t.hour == 0:
        t = _stamp(rng)
    when = t.strftime("%Y-%m-%d %H:%M:%S")
    instruction, ph = say(rng, [
        "Write the Unix timestamp (seconds since 1970-01-01 00:00:00 UTC) of `{when}` UTC to `/app/answer.txt`.",
        "Convert the UTC date and time `{when}` to epoch seconds and save the number in `/app/answer.txt`.",
        "How many seconds after the Unix epoch is `{when}` (UTC)? Put that integer into `/app/answer.txt`.",
        "`/app/answer.txt` should hold `{when}`, read as UTC, expressed as seconds since the epoch.",
        "What Unix time is {clock} UTC on {spoken}? Write the number of seconds to `/app/answer.txt`.",
        "Someone needs {spoken}, {clock} in UTC, as epoch seconds. Put that whole number in `/app/answer.txt`.",
    ], when=when, clock=t.strftime("%H:%M:%S"), spoken=_spoken(t))
    day = t.strftime("%Y-%m-%d")
    return Level(
        instruction=instruction, env_files={}, test_checks=answer_check("/app/answer.txt", str(timegm(t.timetuple()))),
        solve=f"date -u -d {q(when)} +%s > /app/answer.txt",
        shapes=[f"TZ=UTC date -d {q(when)} +%s > /app/answer.txt",
                f"python3 -c \"import calendar, datetime; print(calendar.timegm(datetime.datetime.fromisoformat("
                f"'{when}').timetuple()))\" > /app/answer.txt"],
        wrong=["date -u +%s > /app/answer.txt", f"date -u -d {q(day)} +%s > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds the epoch of {when}", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def find_size(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    limit = rng.choice((200, 300, 400, 500))
    names = pick(rng, [w for w in WORDS if w != d], rng.randint(6, 9))
    env = _tree(rng, d, names, rng.choices(EXTS, k=len(names)))
    # one file exactly at the limit, one above it, the rest anywhere
    sizes = [limit, limit + rng.randint(1, limit), *rng.sample(range(20, 3 * limit), len(env) - 2)]
    env = {k: (k * (s // len(k) + 1))[: s - 1] + "\n" for k, s in zip(env, sizes, strict=True)}
    want = sorted(f"/app/{k}" for k, v in env.items() if len(v) > limit)
    instruction, ph = say(rng, [
        "Find the files under `/app/{d}` (any depth) larger than {limit} bytes and write their full paths, sorted, "
        "one per line, to `/app/answer.txt`.",
        "List every file in the tree `/app/{d}` whose size exceeds {limit} bytes (strictly) by absolute path, in "
        "sorted order, in `/app/answer.txt`.",
        "Which files below `/app/{d}` are bigger than {limit} bytes? Save their paths, sorted, a path per line, to "
        "`/app/answer.txt`.",
        "`/app/answer.txt` should name (absolute path, sorted) the files found recursively in `/app/{d}` with more "
        "than {limit} bytes; a file of exactly {limit} bytes does not qualify.",
        "Which files in the {d} folder in /app, subfolders included, are over {limit} bytes? List their full paths, "
        "sorted, in `/app/answer.txt` (exactly {limit} bytes is not over).",
        "Find everything bigger than {limit} bytes at any depth inside {d}, the only folder in /app, and write "
        "those files' absolute paths in sorted order to `/app/answer.txt`.",
    ], d=d, limit=limit)
    return Level(
        instruction=instruction, env_files=env, test_checks=lines_check("/app/answer.txt", want),
        solve=f"find /app/{d} -type f -size +{limit}c | LC_ALL=C sort > /app/answer.txt",
        shapes=[f"find /app/{d} -type f -printf '%s %p\\n' | awk '$1 > {limit} {{print $2}}' | LC_ALL=C sort "
                "> /app/answer.txt"],
        wrong=[f"find /app/{d} -type f -size +{limit} | LC_ALL=C sort > /app/answer.txt",
               f"find /app/{d} -type f -size -{limit}c | LC_ALL=C sort > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt lists the files over {limit} bytes", phrasing=ph,
    )


def awk_filter(rng: random.Random) -> Level:
    f = rng.choice(WORDS)
    path, limit = f"/app/{f}.txt", rng.randint(40, 80)
    people = pick(rng, USERS, rng.randint(6, 9))
    scores = [limit, *(rng.choice([rng.randint(5, limit - 1), rng.randint(limit + 1, 150)]) for _ in people[1:])]
    rng.shuffle(scores)
    rows = [f"{p} {rng.choice(WORDS)} {s}" for p, s in zip(people, scores, strict=True)]
    want = [p for p, s in zip(people, scores, strict=True) if s > limit]
    instruction, ph = say(rng, [
        "Each line of `{path}` is `NAME TEAM SCORE`. Write the NAME of every line whose SCORE is greater than "
        "{limit}, in file order, one per line, to `/app/answer.txt`.",
        "From `{path}` (space-separated: name, team, score), print the first field of the rows with a third field "
        "above {limit} (strictly) into `/app/answer.txt`, keeping their order.",
        "Use awk on `{path}`: for rows whose score (column 3) exceeds {limit}, save the name (column 1) to "
        "`/app/answer.txt`, a name per line.",
        "Who scored more than {limit}? `{path}` lists `name team score` per line; record those names, as they "
        "appear top to bottom, in `/app/answer.txt`.",
        "The {f} scores file in /app has a name, a team and a score on each line. Write the names of everyone "
        "who scored above {limit}, in file order, to `/app/answer.txt`.",
        "Using {f}.txt, the only .txt file in /app (lines of name, team, score), save the names whose score is "
        "strictly greater than {limit} to `/app/answer.txt`, one per line, as they come.",
    ], path=path, limit=limit, f=f)
    return Level(
        instruction=instruction, env_files={f"{f}.txt": "\n".join(rows) + "\n"},
        test_checks=lines_check("/app/answer.txt", want),
        solve=f"awk '$3 > {limit} {{print $1}}' {path} > /app/answer.txt",
        shapes=[f"awk '$3 > {limit}' {path} | cut -d' ' -f1 > /app/answer.txt",
                f"while read -r name team score; do if [ \"$score\" -gt {limit} ]; then echo \"$name\"; fi; "
                f"done < {path} > /app/answer.txt"],
        wrong=[f"awk '$3 >= {limit} {{print $1}}' {path} > /app/answer.txt",
               f"awk '{{print $1}}' {path} > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt names the scores over {limit}", phrasing=ph,
    )


def tar_create(rng: random.Random) -> Level:
    a, d, sub = pick(rng, WORDS, 3)
    stems = pick(rng, [w for w in WORDS if w not in (a, d, sub)], rng.randint(3, 5))
    env = {f"{d}/{s}.txt" if i % 2 else f"{d}/{sub}/{s}.txt": f"{s}\n" for i, s in enumerate(stems)}
    archive = f"/app/{a}.tar"
    instruction, ph = say(rng, [
        "Pack the directory `/app/{d}` into the tar archive `{archive}`; members must be stored as `{d}/...` "
        "(relative, no leading `/app`).",
        "Create `{archive}`, a tar of the whole `/app/{d}` tree, with member paths starting at `{d}/`.",
        "Archive `/app/{d}` (subdirectories included) with tar into `{archive}` so that extracting it in any "
        "directory recreates `{d}/` there.",
        "Bundle the folder `{d}` from `/app` into the file `{archive}` using tar; inside the archive the paths "
        "should begin with `{d}/`, not with `app/`.",
        "Pack up the {d} folder in /app, subfolders and all, as a tar archive called {a}.tar in /app, storing the "
        "paths from {d}/ down (no leading app/).",
        "Make a tarball of {d}, the only folder in /app, and save it as `{archive}`; unpacked anywhere, it should "
        "give back that folder by its own name.",
    ], d=d, archive=archive, a=a)
    want = sorted((k, v) for k, v in env.items())
    checks = ("import tarfile\n"
              f"if not Path({archive!r}).is_file():\n    fail('{archive} does not exist')\n"
              "try:\n"
              f"    tf = tarfile.open({archive!r})\n"
              "    got = sorted((m.name.removeprefix('./'), tf.extractfile(m).read().decode(errors='replace'))\n"
              "                 for m in tf.getmembers() if m.isfile())\n"
              "except Exception as e:\n"
              f"    fail(f'{archive} is not a readable tar archive: {{e!r}}')\n"
              f"want = {want!r}\n"
              "if got != want:\n"
              f"    fail(f'{archive} holds {{[n for n, _ in got]}}, expected {{[n for n, _ in want]}}')\n")
    return Level(
        instruction=instruction, env_files=env, test_checks=checks, solve=f"tar -cf {archive} -C /app {d}",
        shapes=[f"cd /app && tar -cf {archive} {d}",
                f"python3 -c \"import tarfile; t = tarfile.open('{archive}', 'w'); t.add('/app/{d}', arcname='{d}'); "
                "t.close()\""],
        wrong=[f"tar -cf {archive} /app/{d}", f"tar -cf {archive} -C /app/{d} ."], reads=[archive],
        what=f"{archive} holds /app/{d} as {d}/", phrasing=ph,
    )


def export_var(rng: random.Random) -> Level:
    a, w = pick(rng, WORDS, 2)
    var, value = f"{rng.choice(WORDS).upper()}_{rng.choice(('HOME', 'MODE', 'PORT', 'NAME', 'LEVEL'))}", \
        f"{w}-{rng.randint(10, 999)}"
    path = f"/app/{a}.env.sh"
    instruction, ph = say(rng, [
        "Write a file `{path}` that, when sourced by bash, exports the environment variable `{var}` with the value "
        "`{value}` (so child processes see it).",
        "Create `{path}` so that `. {path}` sets `{var}={value}` as an exported environment variable.",
        "After `source {path}`, programs started from that shell must find `{var}` set to `{value}` in their "
        "environment. Write that file.",
        "Put the line that makes `{var}` an environment variable equal to `{value}` into a new file `{path}`; "
        "sourcing it must export the variable, not just set it.",
        "Write a small file {a}.env.sh in /app which, when a bash shell sources it, exports {var} set to {value} "
        "to every program started from that shell.",
        "I want to source a file from /app called {a}.env.sh and have {var} (value {value}) exported, so child "
        "processes see it. Create that file.",
    ], path=path, var=var, value=value, a=a)
    checks = ("import subprocess\n"
              f"read({path!r})\n"
              f"out = subprocess.run(['bash', '-c', '. \"$0\" >/dev/null 2>&1; printenv {var}', {path!r}],\n"
              "                     capture_output=True, text=True, timeout=20).stdout.strip()\n"
              f"if out != {value!r}:\n    fail(f'sourcing {path} exports {var}={{out!r}}, expected {value}')\n")
    return Level(
        instruction=instruction, env_files={}, test_checks=checks, solve=f"echo 'export {var}={value}' > {path}",
        shapes=[f"printf '%s\\n' '{var}={value}' 'export {var}' > {path}", f"echo 'declare -x {var}={value}' > {path}"],
        wrong=[f"echo '{var}={value}' > {path}", f"echo 'export {var}={w}' > {path}"], reads=[path],
        what=f"sourcing {path} exports {var}", phrasing=ph,
    )


def date_diff(rng: random.Random) -> Level:
    a = _stamp(rng).replace(hour=0, minute=0, second=0)
    b = a + timedelta(days=rng.randint(3, 900))
    da, db = a.strftime("%Y-%m-%d"), b.strftime("%Y-%m-%d")
    days = (b - a).days
    instruction, ph = say(rng, [
        "Write the number of days from {da} to {db} (the difference of the two dates) to `/app/answer.txt`.",
        "How many days lie between the dates {da} and {db}? Save the difference, a whole number, in "
        "`/app/answer.txt`.",
        "Compute {db} minus {da} in days (UTC calendar dates) and put the result into `/app/answer.txt`.",
        "`/app/answer.txt` should hold how many days after {da} the date {db} falls.",
        "How many days go by between {sa} and {sb}? Write the count to `/app/answer.txt`.",
        "Work out how many days separate {sa} from the later date {sb} and save that whole number in "
        "`/app/answer.txt`.",
    ], da=da, db=db, sa=_spoken(a), sb=_spoken(b))
    diff = f"$(date -u -d {db} +%s) - $(date -u -d {da} +%s)"
    return Level(
        instruction=instruction, env_files={}, test_checks=answer_check("/app/answer.txt", str(days)),
        solve=f"echo $(( ({diff}) / 86400 )) > /app/answer.txt",
        shapes=[f"python3 -c \"from datetime import date; print((date.fromisoformat('{db}') - "
                f"date.fromisoformat('{da}')).days)\" > /app/answer.txt"],
        wrong=[f"echo $(( ({diff}) / 86400 + 1 )) > /app/answer.txt", f"echo $(( {diff} )) > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt holds {days}", phrasing=ph,
    )


@register
class ShellFamily(ProceduralFamily):
    name = "shell"
    family = "shell"
    templates = (
        Template("find-ext", 1, find_ext), Template("sed-inplace", 1, sed_inplace), Template("cut-field", 1, cut_field),
        Template("tar-list", 1, tar_list), Template("symlink", 1, symlink), Template("count-tree", 1, count_tree),
        Template("date-epoch", 1, date_epoch),
        Template("find-size", 2, find_size), Template("awk-filter", 2, awk_filter),
        Template("tar-create", 2, tar_create), Template("export-var", 2, export_var),
        Template("date-diff", 2, date_diff),
    )
