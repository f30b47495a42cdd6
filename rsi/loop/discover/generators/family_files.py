"""The `files` family: file and directory operations (create, mkdir, copy, delete, append, rename,
nested directories, permissions, concatenation, listing; a marker copy and a move by extension above).

The last two phrasings of each level-1/2 template are a person's words: a file described by what is unique about it
in /app ("the only .txt file in /app", "the {name} folder") or a name said plainly, not handed over in backticks."""

from __future__ import annotations

import random

from rsi.loop.discover.generators import shapes
from rsi.loop.discover.generators.procedural import (
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


def _body(rng: random.Random, lo: int = 2, hi: int = 5) -> str:
    return "\n".join(word_lines(rng, rng.randint(lo, hi))) + "\n"


# -- level 1 -------------------------------------------------------------------------------------


def create(rng: random.Random) -> Level:
    name, w1, w2 = pick(rng, WORDS, 3)
    path, text = f"/app/{name}.txt", f"{w1} {w2}"
    instruction, ph = say(rng, [
        "Create the file `{path}` containing exactly the text `{text}`.",
        "Write the text `{text}` into a new file `{path}` (nothing else in it).",
        "Make a file at `{path}` whose only content is `{text}`.",
        "Put `{text}` in a brand-new file called `{path}`; that text is all the file may contain.",
        "In /app, make a new file named {name}.txt whose whole content is the two words {text}.",
        "I'd like a note in /app called {name}.txt that just says {text}, and nothing more.",
    ], path=path, text=text, name=name)
    return Level(
        instruction=instruction, env_files={}, test_checks=answer_check(path, text),
        solve=f"printf '%s\\n' {q(text)} > {path}", shapes=[f"echo {q(text)} > {path}"],
        wrong=[f"printf '%s\\n' {q(w1)} > {path}", f"printf '%s\\n' {q(text)} > /app/{name}.md"],
        reads=[path], what=f"{path} holds exactly '{text}'", phrasing=ph,
    )


def mkdir(rng: random.Random) -> Level:
    a, b, other = pick(rng, WORDS, 3)
    d = f"/app/{a}_{b}"
    instruction, ph = say(rng, [
        "Create a directory named `{d}`.",
        "Make the directory `{d}` (a directory, not a file).",
        "Add an empty directory at `{d}`.",
        "I need an empty folder at `{d}`. Set it up.",
        "Make a folder in /app called {a}_{b}.",
        "Inside /app, add an empty directory whose name is the words {a} and {b} joined by an underscore.",
    ], d=d, a=a, b=b)
    checks = f"if not Path({d!r}).is_dir():\n    fail('{d} is not a directory')\n"
    return Level(
        instruction=instruction, env_files={}, test_checks=checks, solve=f"mkdir -p {d}",
        shapes=[f"mkdir {d}", f"install -d {d}"],
        wrong=[f"touch {d}", f"mkdir -p /app/{a}_{other}"], reads=[d], what=f"{d} is a directory", phrasing=ph,
    )


def copy(rng: random.Random) -> Level:
    a, b = pick(rng, WORDS, 2)
    src, dst = f"/app/{a}.txt", f"/app/{b}.txt"
    body = _body(rng)
    instruction, ph = say(rng, [
        "Copy `{src}` to `{dst}`; keep `{src}` as it is.",
        "Make `{dst}` an exact copy of `{src}` (leave the original in place).",
        "Duplicate the file `{src}` as `{dst}`. Both files must exist afterwards.",
        "Back up `{src}` by copying it to `{dst}`; the original must remain untouched.",
        "Make a copy of {a}.txt, the only .txt file in /app, and call it {b}.txt (also in /app); the original "
        "stays.",
        "There is a single text file sitting in /app, {a}.txt. Duplicate it as `{dst}`, leaving the original "
        "where it is.",
    ], src=src, dst=dst, a=a, b=b)
    checks = (f"if read({src!r}) != {body!r}:\n    fail('{src} must stay where it is, unchanged')\n"
              f"if read({dst!r}) != {body!r}:\n    fail('{dst} is not an exact copy of {src}')\n")
    return Level(
        instruction=instruction, env_files={f"{a}.txt": body}, test_checks=checks, solve=f"cp {src} {dst}",
        shapes=shapes.copy(src, dst)[1:],
        wrong=[f"mv {src} {dst}", f"head -n 1 {src} > {dst}"], reads=[src, dst], what=f"{src} copied to {dst}",
        phrasing=ph,
    )


def delete(rng: random.Random) -> Level:
    a, b = pick(rng, WORDS, 2)
    gone, kept = f"/app/{a}.txt", f"/app/{b}.txt"
    body_a, body_b = _body(rng, 1, 3), _body(rng, 1, 3)
    instruction, ph = say(rng, [
        "Delete the file `{gone}`. Leave `{kept}` alone.",
        "Remove `{gone}` from the filesystem; `{kept}` must stay as it is.",
        "Get rid of `{gone}` (it must no longer exist), without touching `{kept}`.",
        "`{gone}` is no longer needed: get it off the disk, but keep `{kept}` exactly as it is.",
        "In the /app folder, remove the file called {a}.txt; {b}.txt must stay exactly as it is.",
        "Two text files live in /app. Throw away the {a} one and keep the {b} one untouched.",
    ], gone=gone, kept=kept, a=a, b=b)
    checks = (f"if Path({gone!r}).exists():\n    fail('{gone} still exists')\n"
              f"if read({kept!r}) != {body_b!r}:\n    fail('{kept} was changed or removed')\n")
    return Level(
        instruction=instruction, env_files={f"{a}.txt": body_a, f"{b}.txt": body_b}, test_checks=checks,
        solve=f"rm {gone}", shapes=shapes.remove(gone)[1:], wrong=["rm -f /app/*.txt", f": > {gone}"],
        reads=[gone, kept],
        what=f"{gone} deleted, {kept} kept", phrasing=ph,
    )


def append(rng: random.Random) -> Level:
    a, w1, w2 = pick(rng, WORDS, 3)
    path, text = f"/app/{a}.txt", f"{w1} {w2}"
    lines = word_lines(rng, rng.randint(2, 4))
    instruction, ph = say(rng, [
        "Append the line `{text}` to the end of `{path}`, keeping its current lines.",
        "Add `{text}` as a new last line of `{path}`.",
        "`{path}` has some lines; add one more line, `{text}`, after them.",
        "Extend `{path}` by one line reading `{text}`; whatever lines are already there stay, in order.",
        "Add one more line, {text}, at the end of the {a} file in /app, keeping the lines it already has.",
        "The only .txt file in /app is missing a last line: append the words {text} to it as a new final line, "
        "leaving the rest alone.",
    ], path=path, text=text, a=a)
    solve, *alts = shapes.append(path, text)
    return Level(
        instruction=instruction, env_files={f"{a}.txt": "\n".join(lines) + "\n"},
        test_checks=lines_check(path, [*lines, text]), solve=solve, shapes=alts,
        wrong=[f"printf '%s\\n' {q(text)} > {path}", f"sed -i '1i {text}' {path}"], reads=[path],
        what=f"{path} ends with '{text}'", phrasing=ph,
    )


# -- level 2 -------------------------------------------------------------------------------------


def rename(rng: random.Random) -> Level:
    a, b = pick(rng, WORDS, 2)
    src, dst = f"/app/{a}.txt", f"/app/{b}.txt"
    body = _body(rng)
    instruction, ph = say(rng, [
        "Rename the file `{src}` to `{dst}`. Its content must stay the same.",
        "Move `{src}` to the new name `{dst}` without changing its content.",
        "Give `{src}` the new name `{dst}` (the old name must disappear, the content stays).",
        "From now on the file `{src}` should be called `{dst}`. Change its name, not its content.",
        "Rename {a}.txt, the only .txt file in /app, to {b}.txt, keeping what it contains.",
        "The text file {a}.txt in /app (there is just one) has the wrong name: it should be called `{dst}`. Fix "
        "the name; the content stays as it is.",
    ], src=src, dst=dst, a=a, b=b)
    checks = (f"if Path({src!r}).exists():\n    fail('{src} must no longer exist')\n"
              f"if read({dst!r}) != {body!r}:\n    fail('{dst} does not hold the original content')\n")
    return Level(
        instruction=instruction, env_files={f"{a}.txt": body}, test_checks=checks,
        solve=f"mv {src} {dst}", shapes=[f"cp {src} {dst} && rm {src}"],
        wrong=[f"cp {src} {dst}", f"mv {src} /app/{b}"],
        reads=[src, dst], what=f"{src} renamed to {dst}", phrasing=ph,
    )


def nested(rng: random.Random) -> Level:
    a, b, c, f, w1, w2 = pick(rng, WORDS, 6)
    inner, text = f"/app/{a}/{b}/{c}", f"{w1} {w2}"
    path = f"{inner}/{f}.txt"
    instruction, ph = say(rng, [
        "Create the directories `{inner}` (every level of it) and, in the innermost one, a file `{f}.txt` "
        "containing `{text}`.",
        "Make the nested path `{inner}/` and write `{text}` into `{path}`.",
        "Inside `/app`, build the directory chain `{a}/{b}/{c}` and put a file named `{f}.txt` holding the text "
        "`{text}` at its bottom.",
        "Write `{text}` to `{path}`, creating any missing parent directories along the way.",
        "Inside /app, create a folder {a}, in it a folder {b}, and in that a folder {c}; then put a file {f}.txt "
        "holding the words {text} in the deepest one.",
        "I want the words {text} in a file called {f}.txt, three folders down under /app: {a}, then {b}, then "
        "{c}. Make whatever folders are missing.",
    ], inner=inner, f=f, text=text, path=path, a=a, b=b, c=c)
    return Level(
        instruction=instruction, env_files={}, test_checks=answer_check(path, text),
        solve=f"mkdir -p {inner}\nprintf '%s\\n' {q(text)} > {path}",
        shapes=[f"mkdir -p {inner} && echo {q(text)} > {path}",
                f"mkdir -p {inner} && cd {inner} && printf '%s\\n' {q(text)} > {f}.txt"],
        wrong=[f"mkdir -p /app/{c}\nprintf '%s\\n' {q(text)} > /app/{c}/{f}.txt", f"mkdir -p {inner}"],
        reads=[f"/app/{a}"], what=f"{path} holds '{text}'", phrasing=ph,
    )


MODES = (("600", "read and write for the owner, nothing for anyone else"),
         ("640", "owner reads and writes, group reads, others nothing"),
         ("700", "owner may read, write and execute, nobody else anything"),
         ("400", "read-only for the owner, nothing for anyone else"),
         ("755", "owner has every right, group and others read and execute"))
SYMBOLIC = {"600": "u=rw,go=", "640": "u=rw,g=r,o=", "700": "u=rwx,go=", "400": "u=r,go=", "755": "u=rwx,go=rx"}


def chmod(rng: random.Random) -> Level:
    a = rng.choice(WORDS)
    mode, desc = rng.choice(MODES)
    path = f"/app/{a}.sh" if mode in ("700", "755") else f"/app/{a}.txt"
    body = "#!/bin/sh\necho " + " ".join(pick(rng, WORDS, 2)) + "\n" if path.endswith(".sh") else _body(rng, 1, 3)
    instruction, ph = say(rng, [
        "Set the permissions of `{path}` to `{mode}` ({desc}).",
        "Change the mode of `{path}` so it is exactly `{mode}` in octal: {desc}.",
        "`{path}` must end up with permission bits `{mode}` ({desc}); do not change its content.",
        "Using chmod, give `{path}` the octal permissions `{mode}` ({desc}); leave what it contains alone.",
        "Change who may do what with the {a} file in /app: {desc}. Do not edit what it holds.",
        "Adjust the only file in /app, {name}, so that its access rights are exactly these: {desc}.",
    ], path=path, mode=mode, desc=desc, a=a, name=path.removeprefix("/app/"))
    checks = ("import stat\n"
              f"got = oct(stat.S_IMODE(Path({path!r}).stat().st_mode))[2:] if Path({path!r}).is_file() else None\n"
              f"if got != {mode!r}:\n    fail(f'{path} has mode {{got}}, expected {mode}')\n"
              f"if read({path!r}) != {body!r}:\n    fail('{path} was changed')\n")
    wrong = "777" if mode != "777" else "700"
    return Level(
        instruction=instruction, env_files={path.removeprefix("/app/"): body}, test_checks=checks,
        solve=f"chmod {mode} {path}",
        shapes=[f"chmod {SYMBOLIC[mode]} {path}", f"python3 -c \"import os; os.chmod('{path}', 0o{mode})\""],
        wrong=[f"chmod {wrong} {path}", f"chmod u+x {path}"], reads=[path],
        what=f"{path} has mode {mode}", phrasing=ph,
    )


def concat(rng: random.Random) -> Level:
    a, b, c = pick(rng, WORDS, 3)
    la, lb = word_lines(rng, rng.randint(1, 3)), word_lines(rng, rng.randint(2, 3))
    pa, pb, pc = f"/app/{a}.txt", f"/app/{b}.txt", f"/app/{c}.txt"
    instruction, ph = say(rng, [
        "Write the content of `{pa}` followed by the content of `{pb}` into `{pc}`.",
        "Concatenate `{pa}` and `{pb}`, in that order, into a new file `{pc}`.",
        "Create `{pc}` holding the lines of `{pa}` and then the lines of `{pb}`.",
        "Join two files into `{pc}`: first everything from `{pa}`, then everything from `{pb}`.",
        "Glue the {a} and {b} text files in /app together, {a} first, into a new file {c}.txt in /app.",
        "Write the lines of {a}.txt and then those of {b}.txt (both in /app) into one new file, `{pc}`, leaving "
        "the two originals as they are.",
    ], pa=pa, pb=pb, pc=pc, a=a, b=b, c=c)
    return Level(
        instruction=instruction, env_files={f"{a}.txt": "\n".join(la) + "\n", f"{b}.txt": "\n".join(lb) + "\n"},
        test_checks=lines_check(pc, la + lb), solve=f"cat {pa} {pb} > {pc}", shapes=shapes.concat(pa, pb, pc)[1:],
        wrong=[f"cat {pb} {pa} > {pc}", f"cp {pa} {pc}"], reads=[pc], what=f"{pc} is {pa} then {pb}", phrasing=ph,
    )


def listing(rng: random.Random) -> Level:
    d = rng.choice(WORDS)
    names = [f"{s}.{rng.choice(['txt', 'md', 'csv', 'log'])}" for s in pick(rng, [w for w in WORDS if w != d],
                                                                             rng.randint(4, 7))]
    instruction, ph = say(rng, [
        "Write the names of the files in `/app/{d}`, one per line, sorted alphabetically, to `/app/answer.txt`.",
        "List the directory `/app/{d}` into `/app/answer.txt`: just the file names (no paths), one per line, in "
        "alphabetical order.",
        "Produce a sorted directory listing of `/app/{d}` in `/app/answer.txt`: bare file names in alphabetical "
        "order, each on a line of its own.",
        "Which files are inside `/app/{d}`? Save their bare names to `/app/answer.txt`, A to Z, one on each "
        "line.",
        "What is in the {d} folder in /app? Write the names of its files to `/app/answer.txt`, alphabetically, "
        "one a line, without any path.",
        "There is one folder in /app, called {d}. Put a sorted list of the file names it holds (just the names) "
        "into `/app/answer.txt`, one per line.",
    ], d=d)
    return Level(
        instruction=instruction, env_files={f"{d}/{n}": f"{n}\n" for n in names},
        test_checks=lines_check("/app/answer.txt", sorted(names)), solve=f"LC_ALL=C ls -1 /app/{d} > /app/answer.txt",
        shapes=shapes.list_dir(f"/app/{d}", "/app/answer.txt")[1:],
        wrong=[f"find /app/{d} -type f > /app/answer.txt", f"LC_ALL=C ls -1a /app/{d} > /app/answer.txt"],
        reads=["/app/answer.txt"], what=f"/app/answer.txt lists /app/{d}", phrasing=ph,
    )


# -- levels 3 and 4 ------------------------------------------------------------------------------


def copy_marker(rng: random.Random) -> Level:
    a, d, marker = pick(rng, WORDS, 3)
    src, dest = f"/app/{a}.txt", f"/app/{d}/{a}.txt"
    body = _body(rng, 2, 4)
    checks = (
        f"if read({src!r}) != {body!r}:\n    fail('{src} must stay where it is, unchanged')\n"
        f"if read({dest!r}) != {body!r}:\n    fail('{dest} must be a copy of {src}')\n"
        f"if not Path('/app/{d}/{marker}.done').is_file():\n    fail('/app/{d}/{marker}.done is missing')\n"
    )
    instruction, ph = say(rng, [
        "Create the directory `/app/{d}`, copy `{src}` into it (keeping the file name), and create an empty file "
        "`/app/{d}/{marker}.done` next to the copy. `{src}` must stay where it is.",
        "Make a directory `/app/{d}`, put a copy of `{src}` in it under the same name, and add an empty marker "
        "file `/app/{d}/{marker}.done` beside it; the original stays in place.",
        "`/app/{d}` should end up holding a copy of `{src}` (same file name) and an empty file `{marker}.done`. "
        "Create the directory first; do not move the original.",
    ], d=d, src=src, marker=marker)
    return Level(
        instruction=instruction, env_files={f"{a}.txt": body}, test_checks=checks,
        solve=f"mkdir -p /app/{d}\ncp {src} {dest}\ntouch /app/{d}/{marker}.done",
        wrong=[f"mkdir -p /app/{d}\ncp {src} {dest}",
               f"mkdir -p /app/{d}\nmv {src} {dest}\ntouch /app/{d}/{marker}.done"],
        reads=[src, f"/app/{d}"], what=f"{src} copied into /app/{d} with a marker", phrasing=ph,
    )


def move_ext(rng: random.Random) -> Level:
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
    instruction, ph = say(rng, [
        "In `/app/{d}`, move every file whose name ends in `.{e1}` into a new subdirectory `/app/{d}/{sub}`. "
        "Leave all other files where they are.",
        "Create `/app/{d}/{sub}` and move all `.{e1}` files of `/app/{d}` into it; the other files stay put.",
        "Sort out `/app/{d}`: its `.{e1}` files go into a new subdirectory named `{sub}`, nothing else moves.",
    ], d=d, e1=e1, sub=sub)
    return Level(
        instruction=instruction, env_files=env, test_checks=checks,
        solve=f"mkdir -p /app/{d}/{sub}\nmv /app/{d}/*.{e1} /app/{d}/{sub}/",
        wrong=[f"mkdir -p /app/{d}/{sub}\nmv /app/{d}/*.* /app/{d}/{sub}/",
               f"mkdir -p /app/{d}/{sub}\ncp /app/{d}/*.{e1} /app/{d}/{sub}/"],
        reads=[f"/app/{d}"], what=f"*.{e1} moved into /app/{d}/{sub}", phrasing=ph,
    )


@register
class FilesFamily(ProceduralFamily):
    name = "files"
    family = "files"
    templates = (
        Template("create", 1, create), Template("mkdir", 1, mkdir), Template("copy", 1, copy),
        Template("delete", 1, delete), Template("append", 1, append),
        Template("rename", 2, rename), Template("nested", 2, nested), Template("chmod", 2, chmod),
        Template("concat", 2, concat), Template("list", 2, listing),
        Template("copy-marker", 3, copy_marker), Template("move-ext", 4, move_ext),
    )
