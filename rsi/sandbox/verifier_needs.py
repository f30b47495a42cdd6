"""What a verifier's scripts fetch at run time, read from their text (pure: no I/O but the `read` callback).

Terminal-Bench verifiers install their own test tools: `uvx -p 3.13 -w pytest==8.4.1 pytest ...` (TB 2.x),
`uv init; uv add pytest==8.4.1; uv run pytest ...` (TB1's run-tests.sh), `uv pip install`, `pip install`,
`apt-get install -y curl`, a `curl ... | sh` of uv's installer. `verifier_needs` reads a script (test.sh and
the scripts it runs, concatenated) into `VerifierNeeds`: the requirements uv or pip is asked for (pinned
or not), the Python versions asked for, whether uv works in a project (`uv add`/`sync`/`lock`/`init`, whose
lock resolves for every platform), the Debian packages asked for, and every other download (curl/wget
of a URL that is neither uv's installer nor local, `git clone` of a remote). rsi serves exactly-pinned
requirements offline (sandbox/wheel_cache.py); anything else is named in `unprovided`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# uv / pip options that take a value (the next word, unless written `--opt=value`).
_VALUE_OPTS = _words("""
-p --python -w --with --from --with-editable --with-requirements -r --requirements --requirement -c --constraints
--constraint --overrides --override --index --default-index -i --index-url --extra-index-url -f --find-links
--index-strategy --cache-dir --directory --project --config-file -C --config-setting --resolution --prerelease
--exclude-newer --python-platform --env-file --color --group --optional --extra --package --script --target
--prefix --link-mode --keyring-provider -P --upgrade-package --reinstall-package --refresh-package --no-binary
--only-binary -b --build-constraints --tag --rev --branch --allow-insecure-host --trusted-host --marker --name
--build-backend --vcs --author-from --description --bounds --python-version --platform --abi --implementation
--src --root -t --upgrade-strategy --progress-bar --log --timeout --retries --proxy --cert --client-cert
--exists-action -o --output-file --torch-backend --fork-strategy --with-executables-from -e --editable
--no-build-package --no-binary-package --only-binary-package --max-depth
""")
_REQ_FILE_OPTS = frozenset({"-r", "--requirements", "--requirement", "--with-requirements"})
_APT_VALUE_OPTS = frozenset({"-o", "-c", "-t", "--option", "--config-file", "--target-release", "--default-release"})
_PREFIXES = frozenset({"sudo", "exec", "time", "command", "nohup", "then", "else", "do", "if", "elif", "while",
                       "until", "!", "{", "builtin"})
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "\n"})
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PY_VERSION = re.compile(r"^(?:cpython-?|python)?(3\.\d+)(?:\.\d+)?$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
# A comma in `--with a,b` starts a new requirement only where a name follows (not in `a>=1,<2`).
_WITH_SPLIT = re.compile(r",(?=\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(?:[\[=<>!~@;]|$))")
_INSTALLER_URL = re.compile(r"astral\.sh/uv|github\.com/astral-sh/uv/releases/\S*install\w*\.sh")
_URL = re.compile(r"^(?:https?|ftp)://([^/:?#]*)", re.IGNORECASE)
_PROJECT_CMDS = frozenset({"add", "sync", "lock", "init", "remove", "export", "tree"})


@dataclass(frozen=True)
class Req:
    """One requirement a script asks for: as written, its canonical name, and whether it is an exact pin."""

    text: str
    name: str | None  # canonical; None when it could not be read (a $VARIABLE, a URL, a path)
    pinned: bool
    origin: str  # the command that asked for it ("uvx --with", "uv add", "pip install")


@dataclass
class VerifierNeeds:
    requirements: list[Req] = field(default_factory=list)
    pythons: list[str] = field(default_factory=list)  # versions asked of uv: "3.13"
    project: bool = False  # uv works in a project (its lock resolves for every platform)
    pip: bool = False  # plain pip installs (served with PIP_FIND_LINKS / PIP_NO_INDEX)
    apt: list[str] = field(default_factory=list)  # Debian packages `apt-get install` asks for
    fetches: list[str] = field(default_factory=list)  # remote downloads other than uv's installer
    other_use: set[str] = field(default_factory=set)  # curl / wget used for more than uv's installer

    @property
    def pinned(self) -> list[str]:
        """The exact pins, as written, each once (sorted)."""
        return sorted({r.text for r in self.requirements if r.pinned})

    @property
    def unpinned(self) -> list[Req]:
        """Requirements no exact pin covers (`uvx ... pytest` is covered by `-w pytest==8.4.1`)."""
        pinned = {r.name for r in self.requirements if r.pinned}
        return [r for r in self.requirements if not r.pinned and (r.name is None or r.name not in pinned)]

    def unprovided(self, apt_provided: Callable[[str], bool]) -> list[str]:
        """What rsi cannot provide offline, one phrase each (empty: everything can be served)."""
        out = [f"{r.origin} {r.text} (not pinned to one version)" for r in self.unpinned]
        out += [f"a download of {u}" for u in self.fetches]
        out += [f"apt-get install {p} (a Debian package rsi does not provide)" for p in self.apt
                if not apt_provided(p)]
        return out


def _parse_req(text: str, origin: str) -> Req:
    """A requirement word: `pkg==1.2`, `pkg[extra]==1.2; marker`, uvx's `pkg@1.2`, or anything unpinned."""
    raw = text.strip()
    if "$" in raw or "`" in raw:
        return Req(raw, None, False, origin)
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?)@([0-9][^\s@/]*)", raw)
    if m and origin.startswith(("uvx", "uv tool")):
        raw = f"{m.group(1)}=={m.group(2)}"
    try:
        req = Requirement(raw)
    except InvalidRequirement:
        return Req(raw, None, False, origin)
    specs = list(req.specifier)
    pinned = (req.url is None and len(specs) == 1 and specs[0].operator in ("==", "===")
              and "*" not in specs[0].version)
    return Req(raw, canonicalize_name(req.name), pinned, origin)


def _python(value: str) -> str | None:
    m = _PY_VERSION.match(value.strip().strip("'\""))
    return m.group(1) if m else None


def _strip_heredocs(text: str) -> str:
    """The script without here-document bodies (a python file written by `cat <<EOF` is not shell)."""
    out: list[str] = []
    end: str | None = None
    for line in text.splitlines():
        if end is not None:
            if line.strip() == end:
                end = None
            continue
        out.append(line)
        m = _HEREDOC.search(line)
        if m:
            end = m.group(2)
    return "\n".join(out)


def commands(text: str) -> list[list[str]]:
    """The simple commands of a shell script, as words (quotes removed), split at `;`, `&&`, `|`, newlines..."""
    text = _strip_heredocs(text.replace("\\\n", " "))
    out: list[list[str]] = []
    for line in text.splitlines():
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lex.whitespace_split = True
            lex.commenters = "#"
            words = list(lex)
        except ValueError:
            words = line.split("#", 1)[0].split()
        cur: list[str] = []
        for w in words:
            if w in _OPERATORS or set(w) <= set(";&|()"):
                if cur:
                    out.append(cur)
                cur = []
            else:
                cur.append(w)
        if cur:
            out.append(cur)
    return out


def _walk(args: list[str], *, stop_at_positional: bool) -> tuple[list[tuple[str, str]], list[str]]:
    """(options with their values, positionals); with `stop_at_positional` the first positional is the
    command and what follows it is its own (not read)."""
    opts: list[tuple[str, str]] = []
    pos: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pos += args[i + 1:i + 2] if stop_at_positional else args[i + 1:]
            break
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            opts.append((k, v))
        elif a.startswith("-") and len(a) > 1:
            if a in _VALUE_OPTS and i + 1 < len(args):
                opts.append((a, args[i + 1]))
                i += 1
            elif re.fullmatch(r"-[pwrcfi]\S+", a):  # -p3.13, -rreqs.txt
                opts.append((a[:2], a[2:]))
            else:
                opts.append((a, ""))
        else:
            pos.append(a)
            if stop_at_positional:
                break
        i += 1
    return opts, pos


class _Reader:
    def __init__(self, read: Callable[[str], str | None]) -> None:
        self.read = read
        self.needs = VerifierNeeds()

    def req(self, text: str, origin: str) -> None:
        self.needs.requirements.append(_parse_req(text, origin))

    def withs(self, value: str, origin: str) -> None:
        for part in _WITH_SPLIT.split(value):
            if part.strip():
                self.req(part, origin)

    def req_file(self, path: str, origin: str, depth: int = 0) -> None:
        text = None if "$" in path or depth > 3 else self.read(path)
        if text is None:
            self.needs.requirements.append(Req(f"-r {path}", None, False, f"{origin} (file not readable)"))
            return
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("-r ", "--requirement ")):
                self.req_file(posixpath.join(posixpath.dirname(path), line.split(None, 1)[1]), origin, depth + 1)
            elif line.startswith(("-e ", "--editable ")):
                continue  # a local project
            elif not line.startswith("-"):
                self.req(line, origin)

    def options(self, opts: list[tuple[str, str]], origin: str) -> None:
        for k, v in opts:
            if k in ("-w", "--with", "--from"):
                self.withs(v, f"{origin} {k}")
            elif k in _REQ_FILE_OPTS:
                self.req_file(v, f"{origin} {k}")
            elif k in ("-p", "--python"):
                self.python(v)

    def python(self, value: str) -> None:
        v = _python(value)
        if v and v not in self.needs.pythons:
            self.needs.pythons.append(v)

    def uvx(self, args: list[str], origin: str) -> None:
        opts, pos = _walk(args, stop_at_positional=True)
        self.options(opts, origin)
        if pos and not any(k == "--from" for k, _ in opts) and not pos[0].startswith("python"):
            self.req(pos[0], origin)

    def uv(self, args: list[str]) -> None:
        opts, pos = _walk(args, stop_at_positional=True)  # global options, then the subcommand
        if not pos:
            return
        rest = args[args.index(pos[0]) + 1:]
        sub = pos[0]
        if sub == "tool" and rest:
            if rest[0] == "run":
                self.uvx(rest[1:], "uv tool run")
            elif rest[0] == "install":
                opts, names = _walk(rest[1:], stop_at_positional=False)
                self.options(opts, "uv tool install")
                for n in names[:1]:
                    self.req(n, "uv tool install")
        elif sub == "run":
            self.options(_walk(rest, stop_at_positional=True)[0], "uv run")
        elif sub == "pip" and rest and rest[0] in ("install", "sync"):
            opts, names = _walk(rest[1:], stop_at_positional=False)
            self.options(opts, f"uv pip {rest[0]}")
            for n in names:
                self.req(n, f"uv pip {rest[0]}")
        elif sub in _PROJECT_CMDS:
            self.needs.project = True
            opts, names = _walk(rest, stop_at_positional=False)
            self.options(opts, f"uv {sub}")
            if sub == "add":
                for n in names:
                    self.req(n, "uv add")
        elif sub == "venv":
            self.options(_walk(rest, stop_at_positional=False)[0], "uv venv")

    def pip(self, args: list[str]) -> None:
        if not args or args[0] not in ("install", "download"):
            return
        opts, names = _walk(args[1:], stop_at_positional=False)
        if any(k in ("-e", "--editable") for k, _ in opts) and not names:
            return
        self.needs.pip = True
        for k, v in opts:
            if k in _REQ_FILE_OPTS:
                self.req_file(v, "pip install")
        for n in names:
            if not n.startswith((".", "/")):
                self.req(n, "pip install")

    def apt(self, args: list[str]) -> None:
        sub: str | None = None
        skip = False
        for a in args:
            if skip:
                skip = False
            elif a in _APT_VALUE_OPTS:
                skip = True
            elif a.startswith("-"):
                continue
            elif sub is None:
                sub = a
            elif sub == "install":
                name = re.split(r"[=/:]", a, maxsplit=1)[0]
                if name and name not in self.needs.apt:
                    self.needs.apt.append(name)

    def fetch(self, tool: str, args: list[str]) -> None:
        other = False
        for a in args:
            m = _URL.match(a)
            if not m:
                continue
            if _INSTALLER_URL.search(a):
                continue
            other = True
            host = m.group(1).lower()
            if "$" in host or _local(host):
                continue
            self.needs.fetches.append(f"{a} ({tool})")
        if other or not any(_INSTALLER_URL.search(a) for a in args):
            self.needs.other_use.add(tool)

    def git(self, args: list[str]) -> None:
        _, pos = _walk(args, stop_at_positional=False)
        if pos[:1] == ["clone"] and len(pos) > 1:
            url = pos[1]
            m = _URL.match(url)
            if url.startswith("git@") or (m and "$" not in m.group(1) and not _local(m.group(1).lower())):
                self.needs.fetches.append(f"{url} (git clone)")

    def command(self, words: list[str]) -> None:
        while words and (words[0] in _PREFIXES or _ASSIGN.match(words[0])):
            if words[0].startswith("UV_PYTHON="):
                self.python(words[0].split("=", 1)[1])
            words = words[1:]
        if words and words[0] == "env":
            self.command(words[1:])
            return
        if not words:
            return
        name = posixpath.basename(words[0])
        args = words[1:]
        if name == "uvx":
            self.uvx(args, "uvx")
        elif name == "uv":
            self.uv(args)
        elif re.fullmatch(r"pip3?(\.\d+)?", name):
            self.pip(args)
        elif re.fullmatch(r"python3?(\.\d+)?", name) and args[:2] == ["-m", "pip"]:
            self.pip(args[2:])
        elif name in ("apt-get", "apt"):
            self.apt(args)
        elif name in ("curl", "wget"):
            self.fetch(name, args)
        elif name == "git":
            self.git(args)
        elif name == "export":
            for a in args:
                if a.startswith("UV_PYTHON="):
                    self.python(a.split("=", 1)[1])


def _local(host: str) -> bool:
    """localhost, a loopback address, or a name without a dot (a service on the task's own network)."""
    host = host.strip("[]")
    return host in ("localhost", "0.0.0.0", "::1") or host.startswith("127.") or "." not in host


def verifier_needs(text: str, read: Callable[[str], str | None] = lambda _p: None) -> VerifierNeeds:
    """What the script `text` fetches; `read(path)` gives a requirements file it names (`-r /tests/req.txt`)."""
    reader = _Reader(read)
    for words in commands(text):
        reader.command(words)
    return reader.needs


def image_apt_packages(dockerfile: str) -> set[str]:
    """The Debian packages a Dockerfile's RUN lines install (they are in the image the verifier starts from)."""
    reader = _Reader(lambda _p: None)
    text = dockerfile.replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip().upper().startswith("RUN "):
            for words in commands(line.strip()[4:]):
                reader.command(words)
    return set(reader.needs.apt)


def from_python_image(dockerfile: str) -> bool:
    """Whether a Dockerfile starts FROM a python:* image (its python3 and pip are there)."""
    return any(re.match(r"\s*FROM\s+(--\S+\s+)*(docker\.io/)?(library/)?python:", line, re.IGNORECASE)
               for line in dockerfile.splitlines())


# Debian's required packages: in every Debian or Ubuntu image, slim ones included.
ESSENTIAL = _words("""
apt base-files base-passwd bash bsdutils coreutils dash debconf debian-archive-keyring debianutils diffutils dpkg
findutils gpgv grep gzip hostname init-system-helpers libc-bin login mawk mount ncurses-base ncurses-bin passwd
perl-base sed sysvinit-utils tar tzdata util-linux zlib1g
""")
_PYTHON_IMAGE = frozenset({"python3", "python3-pip", "python3-venv", "python-is-python3"})


def apt_provided(package: str, needs: VerifierNeeds, dockerfile: str) -> bool:
    """Whether `apt-get install package` can be answered offline, as far as the task's files tell: curl or
    wget used only to fetch uv's installer (rsi's shim answers that), a package the Dockerfile installs or
    every Debian image has, python3 on a python:* image. (At run time the shim also answers any package
    already installed, or whose command exists, in the image.)"""
    if package in ("curl", "wget") and package not in needs.other_use:
        return True
    if package in ESSENTIAL or package in image_apt_packages(dockerfile):
        return True
    return package in _PYTHON_IMAGE and from_python_image(dockerfile)
