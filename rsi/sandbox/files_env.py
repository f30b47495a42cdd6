"""Environments that need no build: a Dockerfile that only names a base image and puts files in.

Most task environments (every one the generators write, many Harbor tasks) are `FROM` + `WORKDIR` +
`COPY` lines, perhaps a `RUN mkdir -p`. Building one with the daemon costs a build context upload and
a container plus a commit per instruction. The same filesystem comes from one container of the base
image, the files put in with one archive, and one commit: that is what `plan_files_only` recognises
and `files_archive` packs. Any Dockerfile with another instruction, flag, wildcard, `.dockerignore`,
symlink or a source outside the context is built as before (`None`).

The archive follows `COPY`'s rules: files keep their mode bits and mtime, owned by root; a directory
source copies its contents; parents that do not exist are created 0755 by the daemon when it unpacks
(as `COPY` does), and existing directories are never touched (so `/tmp` keeps its sticky bit).
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

_ARG = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_GLOB = re.compile(r"[*?\[]")


@dataclass
class FilesPlan:
    """What a files-only Dockerfile makes: the base image, the workdir, the files and directories put in."""

    base: str
    workdir: str | None = None
    # image path -> context file (a regular file of the context)
    files: dict[str, Path] = field(default_factory=dict)
    # image path -> mode for directories the Dockerfile makes (WORKDIR, mkdir, a directory COPY's inside)
    dirs: dict[str, int] = field(default_factory=dict)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions: continuation lines joined, comments and blank lines dropped."""
    out: list[str] = []
    cur = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def _expand(value: str, args: dict[str, str]) -> str | None:
    """`${NAME}` / `$NAME` from the build args; None when a name has no value (the build decides then)."""
    missing = False

    def sub(m: re.Match[str]) -> str:
        nonlocal missing
        name = m.group(1) or m.group(2)
        if name not in args:
            missing = True
            return ""
        return args[name]

    out = _VAR.sub(sub, value)
    return None if missing or "$" in out else out


def _abs(path: str, workdir: str | None) -> str:
    p = PurePosixPath(path)
    if not p.is_absolute():
        p = PurePosixPath(workdir or "/") / p
    parts: list[str] = []
    for part in p.parts[1:]:
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _inside(ctx: Path, rel: str) -> Path | None:
    """The context path `rel` names, or None if it leaves the context, is a symlink or is absent."""
    if rel.startswith("/") or _GLOB.search(rel) or "://" in rel:
        return None
    src = ctx / rel
    try:
        resolved = src.resolve(strict=True)
    except OSError:
        return None
    if resolved != ctx.resolve() and ctx.resolve() not in resolved.parents:
        return None
    return src


def _no_symlinks(root: Path) -> bool:
    return not any(p.is_symlink() for p in [root, *root.rglob("*")])


def _copy(ctx: Path, words: list[str], workdir: str | None, plan: FilesPlan) -> bool:
    if len(words) < 2 or any(w.startswith("--") for w in words) or words[0].startswith("["):
        return False
    *sources, dest_word = words
    dest_is_dir = dest_word.endswith("/") or len(sources) > 1
    dest = _abs(dest_word, workdir)
    for rel in sources:
        src = _inside(ctx, rel)
        if src is None or not _no_symlinks(src):
            return False
        if src.is_file():
            target = _abs(f"{dest}/{src.name}", None) if dest_is_dir else dest
            plan.files[target] = src
        elif src.is_dir():
            for sub in sorted(src.rglob("*")):
                target = _abs(f"{dest}/{sub.relative_to(src).as_posix()}", None)
                if sub.is_dir():
                    plan.dirs[target] = sub.stat().st_mode & 0o7777
                elif sub.is_file():
                    plan.files[target] = sub
                else:
                    return False
            if dest != "/":
                plan.dirs.setdefault(dest, src.stat().st_mode & 0o7777)
        else:
            return False
    return True


def _mkdir(command: str, workdir: str | None, plan: FilesPlan) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if len(words) < 3 or words[0] != "mkdir" or words[1] != "-p":
        return False
    for w in words[2:]:
        if w.startswith("-") or _GLOB.search(w) or "$" in w or any(c in w for c in ";&|<>`{}"):
            return False
        path = _abs(w, workdir)
        while path != "/":
            plan.dirs.setdefault(path, 0o755)
            path = str(PurePosixPath(path).parent)
    return True


def plan_files_only(env_dir: Path, build_args: dict[str, str]) -> FilesPlan | None:
    """The plan of a files-only Dockerfile in `env_dir`, or None when it must be built."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file() or (env_dir / ".dockerignore").exists():
        return None
    try:
        lines = _logical_lines(dockerfile.read_text())
    except (OSError, UnicodeDecodeError):
        return None
    args: dict[str, str] = {}
    plan: FilesPlan | None = None
    workdir: str | None = None
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG":
            m = _ARG.match(rest)
            if m is None:
                return None
            name, default = m.group(1), m.group(2)
            if name in build_args:
                args[name] = build_args[name]
            elif default is not None:
                args[name] = _unquote(default)
            continue
        if keyword == "FROM":
            words = rest.split()
            if plan is not None or len(words) != 1 or words[0].startswith("--"):
                return None  # several stages, `AS name` or --platform: the builder decides
            base = _expand(words[0], args)
            if not base:
                return None
            plan = FilesPlan(base=base)
            continue
        if plan is None:
            return None
        if keyword == "WORKDIR":
            value = _expand(_unquote(rest), args)
            if not value:
                return None
            workdir = _abs(value, workdir)
            plan.workdir = workdir
            path = workdir
            while path != "/":
                plan.dirs.setdefault(path, 0o755)
                path = str(PurePosixPath(path).parent)
            continue
        if keyword == "COPY":
            try:
                words = shlex.split(rest)
            except ValueError:
                return None
            if not _copy(env_dir, words, workdir, plan):
                return None
            continue
        if keyword == "RUN" and _mkdir(rest, workdir, plan):
            continue
        return None
    return plan


def files_archive(plan: FilesPlan, existing: set[str]) -> bytes:
    """The tar that, extracted at /, puts the plan's files and new directories in place.

    `existing` names the plan's directories the base image already has: they get no entry, so their
    mode and owner stay the image's, as a build leaves them.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(plan.dirs, key=lambda p: (p.count("/"), p)):
            if path in existing:
                continue
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type = tarfile.DIRTYPE
            info.mode = plan.dirs[path]
            info.uid = info.gid = 0
            tar.addfile(info)
        for path, src in sorted(plan.files.items()):
            st = src.stat()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = st.st_size
            info.mode = st.st_mode & 0o7777
            info.mtime = int(st.st_mtime)
            info.uid = info.gid = 0
            with src.open("rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()
