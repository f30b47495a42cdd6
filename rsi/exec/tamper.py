"""Change rules that tell installing from tampering (DESIGN §5), applied at every integrity level.

For each changed path (judged through its leaves: a directory shows as changed when anything below
it does) the first rule that applies decides:

1. rsi's own runtime files (the oracle's /solution) are exempt; at level 1 only the declared reads
   reach the verifier, so only they are judged;
2. a protected path (/tests, /logs/verifier) voids the pass, always;
3. the package managers' own state (dpkg's and apt's databases and caches) is bookkeeping; a
   `.md5sums` rewritten without dpkg installing the package is a forgery and voids;
4. a module where the verifier's interpreter looks first (the workdir, PYTHONPATH, the direct
   children of a writable root) that shadows the standard library voids; so does a Python
   startup hook (`*.pth`, `sitecustomize`, `usercustomize`) in a site directory, the dynamic
   loader's configuration (`/etc/ld.so.preload`) or a pytest configuration at `/`, unless a
   package manager installed it;
5. a new executable in a PATH directory that shadows a name found later on the image's PATH voids
   unless a package manager installed it;
6. outside the writable roots: at the snapshot level every change voids unless a package manager
   vouches for the path as it is now (packages.py); at the shared level the same holds for image
   files that were modified, replaced or deleted, and for new files a package record of the trial
   lists with other content; other new files are left to rules 4 and 5.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rsi.exec.grading import GradingPolicy, leaves, under
from rsi.exec.packages import INSTALL_STATE, Entry, Records, is_state

# Modules a verifier might import, by top-level name. Interpreter-startup hooks are included:
# `sitecustomize` in a directory on sys.path runs before any test code.
STDLIB_MODULES: frozenset[str] = frozenset(sys.stdlib_module_names) | {"sitecustomize", "usercustomize"}
_NOT_IMPORTED = {"antigravity", "this", "idlelib", "turtledemo", "test"}
_HOOKS = {"sitecustomize", "usercustomize"}
_SITE_DIR = re.compile(r"/(site|dist)-packages(/|$)|^/usr(/local)?/lib/python3(\.\d+)?(/|$)")

# Files that change how every process starts (the dynamic loader) or what the verifier's pytest loads
# (configuration at /, the only ancestor of /tests): never the agent's to add, at any level.
STARTUP_CONFIG: tuple[str, ...] = (
    "/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.conf.d/*", "/etc/environment",
    "/conftest.py", "/pytest.ini", "/tox.ini", "/setup.cfg", "/pyproject.toml", "/.pytest.ini",
)

ADDED, MODIFIED, DELETED = 1, 0, 2


@dataclass
class Evidence:
    """What the frozen sandbox holds at the paths the rules ask about, and the package records.

    `entries` misses a path the gatherer could not read; rules then fail closed (nothing vouched,
    a PATH name treated as present)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    records: Records = field(default_factory=Records)
    unread: list[str] = field(default_factory=list)  # paths left unread (over the size cap)


def module_name(basename: str) -> str | None:
    if basename.endswith((".py", ".pyc")):
        return basename.rsplit(".", 1)[0]
    if basename.endswith(".so"):
        return basename.split(".", 1)[0]
    return basename if "." not in basename else None


def is_site_dir(path: str) -> bool:
    return bool(_SITE_DIR.search(path))


def is_startup_hook(path: str) -> bool:
    """A file the interpreter runs at startup from a site directory: a `.pth` or a *customize module."""
    parent, base = posixpath.split(path)
    if not is_site_dir(parent + "/"):
        return False
    if base.endswith(".pth"):
        return True
    name = module_name(base)
    return name in _HOOKS or (posixpath.basename(parent) in _HOOKS and base.startswith("__init__."))


def later_on_path(path: str, path_dirs: Sequence[str]) -> list[str]:
    """The paths a new executable at `path` would shadow: its name in every PATH dir after its own."""
    parent, base = posixpath.split(path)
    dirs = [posixpath.normpath(d) for d in path_dirs if d.startswith("/")]
    if parent not in dirs:
        return []
    return [f"{d}/{base}" for d in dirs[dirs.index(parent) + 1:]]


def _shadows(p: str, path_dirs: Sequence[str], entries: dict[str, Entry]) -> list[str] | None:
    """What the executable at `p` shadows later on PATH (unknown counts as present: fail closed), or
    None when `p` is not an executable or shadows nothing."""
    entry = entries.get(p)
    if entry is not None and not entry.executable:
        return None
    hit = [q for q in later_on_path(p, path_dirs) if (e := entries.get(q)) is None or e.kind != "absent"]
    return hit or None


def _as_changes(changed: Mapping[str, int] | Sequence[str]) -> dict[str, int]:
    """A bare list of paths (no kinds known) reads as modifications: the strictest reading."""
    if isinstance(changed, Mapping):
        return dict(changed)
    return {p: MODIFIED for p in changed}


def _stdlib_shadow(p: str, roots: Sequence[str], modules: frozenset[str]) -> str | None:
    """The stdlib module `p` shadows when it sits directly in one of `roots` (a package shows as its
    `__init__`), else None."""
    for root in roots:
        rel = p[len(root.rstrip("/")) + 1:] if under(p, root) and p != root else None
        if not rel:
            continue
        first = rel.split("/", 1)[0]
        name = module_name(first) if "/" not in rel else (first if "." not in first else None)
        if name in modules and ("/" not in rel or rel.split("/", 1)[1].startswith("__init__.")):
            return name
    return None


def tamper_findings(
    changed: Mapping[str, int] | Sequence[str],
    policy: GradingPolicy,
    *,
    path_dirs: Sequence[str] = (),
    python_first: Sequence[str] = (),
    exempt: Sequence[str] = (),
    evidence: Evidence | None = None,
    stdlib: frozenset[str] = STDLIB_MODULES,
) -> list[tuple[str, str]]:
    """(path, reason) for each change that voids a pass under `policy` (rules in the module docstring).

    `changed` maps path -> kind (0 modified, 1 added, 2 deleted); `path_dirs` is the image's PATH;
    `python_first` the directories the verifier's interpreter searches before the standard library
    besides the workdir (PYTHONPATH); `exempt` the paths rsi's own agent runtime wrote; `evidence`
    what the sandbox holds now and the package records (None: nothing is vouched).
    """
    changes = _as_changes(changed)
    ev = evidence or Evidence()
    rec, entries = ev.records, ev.entries
    modules = stdlib - _NOT_IMPORTED
    path_set = {posixpath.normpath(d) for d in path_dirs if d.startswith("/")}
    first_roots = (policy.workdir, *[posixpath.normpath(d) for d in python_first if d.startswith("/")],
                   *policy.writable_roots)
    out: list[tuple[str, str]] = []
    level1 = policy.integrity == "declared_outputs"

    def vouched(p: str) -> bool:
        return rec.vouches(p, entries.get(p)) or rec.vouches_bytecode(p, entries)

    for p in leaves(list(changes)):
        kind = changes.get(p, MODIFIED)
        if any(under(p, e) for e in exempt):
            continue
        if level1 and not any(under(p, r) for r in policy.reads):
            continue
        if any(under(p, pr) for pr in policy.protected):
            out.append((p, "changes a protected path"))
            continue
        if is_state(p) or (p in INSTALL_STATE and rec.installed):
            continue
        inside = any(under(p, r) for r in policy.writable_roots)
        if inside and any(fnmatch.fnmatch(p, pat) for pat in policy.ignore):
            continue
        if kind != DELETED and (name := _stdlib_shadow(p, first_roots, modules)):
            out.append((p, f"shadows the standard-library module {name}"))
            continue
        if kind != DELETED and any(fnmatch.fnmatch(p, pat) for pat in STARTUP_CONFIG) and not vouched(p):
            out.append((p, "configures how every process or the verifier's pytest starts, and no package "
                           "manager installed it"))
            continue
        if kind != DELETED and is_startup_hook(p) and not vouched(p):
            out.append((p, "is a Python startup hook (.pth / sitecustomize) that no package manager installed: "
                           "the verifier's interpreter would run it first"))
            continue
        parent = posixpath.dirname(p)
        # a replaced image executable outside the roots is rule 6's (modified image file)
        if kind != DELETED and parent in path_set and (kind == ADDED or inside) and not vouched(p):
            hit = _shadows(p, path_dirs, entries) if evidence is not None else [p]
            if hit is not None:
                what = f", shadowing {hit[0]}" if hit and hit[0] != p else ""
                out.append((p, f"is a new executable in {parent}, which is on the image's PATH{what}, "
                               "and no package manager installed it"))
                continue
        if inside or level1:
            continue
        if vouched(p):
            continue
        if policy.integrity == "shared" and kind == ADDED:
            # level 3 lets the agent add files (services, installs), but not change what a package installed
            if (owner := rec.claims(p)) is not None:
                out.append((p, f"differs from what the package manager recorded for it when it installed {owner}"))
            continue
        if policy.integrity == "shared":
            out.append((p, "modifies an image file outside the writable roots and no package manager vouches "
                           "for its content"))
        else:
            out.append((p, "is outside the writable roots and no package manager vouches for it"))
    out.extend(f for f in rec.forged if f[0] in changes)
    return out
