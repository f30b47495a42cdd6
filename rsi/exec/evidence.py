"""Reading what the change rules need from a frozen sandbox: the changed files' digests, the names
later on PATH, and the package managers' records (tamper.py, packages.py).

Only what a rule asks about is read, and nothing when the agent stayed inside the writable roots
(the usual trial), so grading costs no more than before. A new directory is read in one archive
(a `pip install` adds thousands of files under a few new directories); a modified file on its own.
What cannot be read (over the size cap) stays unknown, and unknown is never vouched for.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Sequence

from rsi.exec.grading import GradingPolicy, leaves, under
from rsi.exec.packages import INSTALL_STATE, Entry, Records, file_entry, is_record_file, is_state
from rsi.exec.tamper import ADDED, DELETED, Evidence, is_startup_hook, later_on_path
from rsi.sandbox.base import Sandbox

MAX_READ_BYTES = 512 * 1024 * 1024  # a trial that installs more than this leaves the rest unread (not vouched)


def wanted(changes: dict[str, int], policy: GradingPolicy, path_dirs: Sequence[str],
           exempt: Sequence[str] = ()) -> tuple[set[str], set[str]]:
    """(changed paths to read, unchanged paths to probe) for the rules to decide `changes`."""
    if policy.integrity == "declared_outputs":
        return set(), set()  # only the declared reads reach the verifier; no install can matter there
    path_set = {posixpath.normpath(d) for d in path_dirs if d.startswith("/")}
    read: set[str] = set()
    probe: set[str] = set()
    for p in leaves(list(changes)):
        if any(under(p, e) for e in exempt) or any(under(p, pr) for pr in policy.protected):
            continue
        if is_record_file(p):
            read.add(p)
            continue
        if is_state(p) or p in INSTALL_STATE:
            continue
        inside = any(under(p, r) for r in policy.writable_roots)
        on_path = posixpath.dirname(p) in path_set
        if inside and not on_path and not is_startup_hook(p):
            continue
        read.add(p)
        if on_path and changes[p] != DELETED:
            probe.update(q for q in later_on_path(p, path_dirs) if q not in changes)
            read.update(q for q in later_on_path(p, path_dirs) if q in changes)
        if p.endswith(".pyc") and posixpath.basename(posixpath.dirname(p)) == "__pycache__":
            pkg_dir = posixpath.dirname(posixpath.dirname(p))
            src = posixpath.join(pkg_dir, posixpath.basename(p).split(".", 1)[0] + ".py")
            if src in changes:
                read.add(src)
    # every record file changed in the trial, also those under a directory that is itself new
    read.update(p for p in changes if is_record_file(p))
    return read, probe


def _top_added(p: str, changes: dict[str, int]) -> str:
    """The highest directory above `p` that the trial added (one archive holds all of it), else `p`."""
    top = p
    parent = posixpath.dirname(p)
    while parent not in ("", "/") and changes.get(parent) == ADDED:
        top = parent
        parent = posixpath.dirname(parent)
    return top


def _entries_from_archive(path: str, data: bytes, want: set[str], keep: set[str],
                          out: dict[str, Entry], budget: list[int]) -> None:
    base = posixpath.dirname(path.rstrip("/")) or "/"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar:
            full = posixpath.normpath(posixpath.join(base, m.name))
            if full not in want:
                continue
            if m.isdir():
                out[full] = Entry("dir", m.mode)
            elif m.issym():
                out[full] = Entry("link", m.mode, link=m.linkname)
            elif m.isfile():
                if m.size > budget[0]:
                    continue
                f = tar.extractfile(m)
                if f is None:
                    continue
                body = f.read()
                budget[0] -= len(body)
                out[full] = file_entry(body, m.mode, keep=full in keep)
            elif m.islnk():
                target = posixpath.normpath(posixpath.join(base, m.linkname))
                if target in out:
                    out[full] = out[target]
            else:
                out[full] = Entry("other", m.mode)


def gather(box: Sandbox, changes: dict[str, int], policy: GradingPolicy, path_dirs: Sequence[str],
           exempt: Sequence[str] = ()) -> Evidence:
    """The evidence the rules need about `changes` in the (frozen) `box`."""
    read, probe = wanted(changes, policy, path_dirs, exempt)
    if not read and not probe:
        return Evidence()
    entries: dict[str, Entry] = {}
    keep = {p for p in read if is_record_file(p)}
    budget = [MAX_READ_BYTES]
    groups: dict[str, set[str]] = {}
    for p in sorted(read | probe):
        if changes.get(p) == DELETED:
            entries[p] = Entry("absent")
            continue
        groups.setdefault(_top_added(p, changes), set()).add(p)
    for top, members in sorted(groups.items()):
        data = box.get_archive(top) if budget[0] > 0 else None
        if data is None:
            if budget[0] > 0:
                for p in members:
                    entries.setdefault(p, Entry("absent"))
            continue
        _entries_from_archive(top, data, members, keep, entries, budget)
    records = Records.build(changes, entries)
    unread = sorted(p for p in read | probe if p not in entries)
    return Evidence(entries=entries, records=records, unread=unread)


def vouch_record(changes: dict[str, int], policy: GradingPolicy, evidence: Evidence) -> dict[str, object]:
    """For the trial's record: how many changes outside the writable roots a package manager vouched
    for, and what was left unread (never vouched)."""
    rec, entries = evidence.records, evidence.entries
    outside = [p for p in leaves(list(changes))
               if not any(under(p, r) for r in policy.writable_roots) and not is_state(p)]
    vouched = [p for p in outside if rec.vouches(p, entries.get(p)) or rec.vouches_bytecode(p, entries)]
    return {"vouched": len(vouched), "examples": vouched[:20], "unread": evidence.unread[:20]}
