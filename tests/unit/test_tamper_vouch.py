"""The change rules with package-manager evidence: installing passes, hand edits and forged records void."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from rsi.core.contract import Contract
from rsi.core.task import Task, TaskSpec
from rsi.exec.grading import GradingPolicy, grading_policy
from rsi.exec.packages import Entry, Records, file_entry
from rsi.exec.tamper import Evidence, tamper_findings
from rsi.store.files import load_contract

CONTRACT: Contract = load_contract(Path(__file__).parents[2] / "contracts" / "hcp-1.0.yaml")
PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
TOOL = b"#!/bin/sh\necho 42\n"
SITE = "/usr/local/lib/python3.11/dist-packages"


def _policy(mode: str | None = None) -> GradingPolicy:
    spec = TaskSpec.model_validate({"schema_version": "1.1", "verifier": {"environment_mode": mode} if mode else {}})
    return grading_policy(Task(name="t", path="/t", spec=spec, instruction="x", digest="d", env_digest="e",
                               has_solution=True), CONTRACT)


def _text(s: str) -> Entry:
    return file_entry(s.encode(), 0o644, keep=True)


def _dpkg(pkg: str = "rsi-greet", files: dict[str, bytes] | None = None, *, with_list: bool = True,
          with_status: bool = True) -> tuple[dict[str, int], dict[str, Entry]]:
    files = files if files is not None else {"/usr/bin/rsi-greet": TOOL}
    changes: dict[str, int] = {}
    entries: dict[str, Entry] = {}
    sums = "".join(f"{hashlib.md5(d).hexdigest()}  {p.lstrip('/')}\n" for p, d in files.items())
    entries[f"/var/lib/dpkg/info/{pkg}.md5sums"] = _text(sums)
    if with_list:
        entries[f"/var/lib/dpkg/info/{pkg}.list"] = _text("/.\n/usr\n/usr/bin\n" + "".join(f"{p}\n" for p in files))
    if with_status:
        entries["/var/lib/dpkg/status"] = _text(f"Package: {pkg}\nStatus: install ok installed\nVersion: 2.0\n\n")
    changes.update(dict.fromkeys(entries, 0))
    return changes, entries


def _findings(changes: dict[str, int], entries: dict[str, Entry], policy: GradingPolicy | None = None
              ) -> list[tuple[str, str]]:
    ev = Evidence(entries=entries, records=Records.build(changes, entries))
    return tamper_findings(changes, policy or _policy(), path_dirs=PATH, evidence=ev)


def test_a_dpkg_upgrade_vouches_for_the_file_it_replaced() -> None:
    changes, entries = _dpkg()
    changes["/usr/bin/rsi-greet"] = 0
    entries["/usr/bin/rsi-greet"] = file_entry(TOOL, 0o755)
    entries["/usr/local/bin/rsi-greet"] = Entry("absent")
    assert _findings(changes, entries) == []
    assert _findings(changes, entries, _policy("shared")) == []


def test_a_hand_edit_of_a_package_file_voids_at_every_level() -> None:
    changes, entries = _dpkg()
    changes["/usr/bin/rsi-greet"] = 0
    entries["/usr/bin/rsi-greet"] = file_entry(b"#!/bin/sh\necho 41\n", 0o755)
    for mode in (None, "shared"):
        found = _findings(changes, entries, _policy(mode))
        assert [p for p, _ in found] == ["/usr/bin/rsi-greet"], found
        assert "no package manager vouches" in found[0][1]


def test_rewritten_checksums_without_an_install_are_a_forgery() -> None:
    changes, entries = _dpkg(with_list=False, with_status=False)
    changes["/usr/bin/rsi-greet"] = 0
    entries["/usr/bin/rsi-greet"] = file_entry(TOOL, 0o755)  # matches the forged md5sums
    found = dict(_findings(changes, entries))
    assert "/usr/bin/rsi-greet" in found
    assert "rewrites dpkg's checksums of rsi-greet" in found["/var/lib/dpkg/info/rsi-greet.md5sums"]


def _record(dist: str, files: dict[str, bytes]) -> str:
    rows = [f"{rel},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for rel, d in files.items()]
    return "\n".join([*rows, f"{dist}/RECORD,,", f"{dist}/INSTALLER,,"]) + "\n"


def test_pip_record_vouches_for_installed_files_and_not_for_edits() -> None:
    dist = "rsi_greet-1.0.dist-info"
    body = b"def answer():\n    return 40 + 2\n"
    record = f"{SITE}/{dist}/RECORD"
    changes = {SITE: 1, f"{SITE}/rsi_greet": 1, f"{SITE}/rsi_greet/__init__.py": 1, f"{SITE}/{dist}": 1,
               record: 1, f"{SITE}/{dist}/INSTALLER": 1}
    entries = {record: _text(_record(dist, {"rsi_greet/__init__.py": body})),
               f"{SITE}/rsi_greet/__init__.py": file_entry(body, 0o644),
               f"{SITE}/{dist}/INSTALLER": file_entry(b"uv\n", 0o644)}
    assert _findings(changes, entries) == []
    entries[f"{SITE}/rsi_greet/__init__.py"] = file_entry(b"def answer():\n    return 42\n", 0o644)
    assert [p for p, _ in _findings(changes, entries)] == [f"{SITE}/rsi_greet/__init__.py"]
    shared = _findings(changes, entries, _policy("shared"))
    assert [p for p, _ in shared] == [f"{SITE}/rsi_greet/__init__.py"] and "recorded" in shared[0][1]


def test_a_startup_hook_no_installer_wrote_voids_even_at_the_shared_level() -> None:
    pth = f"{SITE}/zz.pth"
    entries = {pth: file_entry(b"import os\n", 0o644)}
    for mode in (None, "shared"):
        found = _findings({SITE: 1, pth: 1}, entries, _policy(mode))
        assert [p for p, _ in found] == [pth] and "startup hook" in found[0][1]


def test_a_new_executable_voids_only_when_it_shadows_a_later_name() -> None:
    shared = _policy("shared")
    planted = {"/usr/local/bin/python3": file_entry(b"#!/bin/sh\n", 0o755), "/usr/bin/python3": file_entry(b"x", 0o755),
               "/usr/sbin/python3": Entry("absent"), "/sbin/python3": Entry("absent"), "/bin/python3": Entry("absent")}
    found = _findings({"/usr/local/bin/python3": 1}, planted, shared)
    assert found and "shadowing /usr/bin/python3" in found[0][1]
    fresh = {"/usr/local/bin/mytool": file_entry(b"#!/bin/sh\n", 0o755),
             **{f"{d}/mytool": Entry("absent") for d in PATH[2:]}}
    assert _findings({"/usr/local/bin/mytool": 1}, fresh, shared) == []  # a new name shadows nothing
    # ... but the snapshot level still refuses an unvouched file outside the writable roots
    assert [p for p, _ in _findings({"/usr/local/bin/mytool": 1}, fresh)] == ["/usr/local/bin/mytool"]


def test_alternatives_links_and_bytecode_of_installed_sources_are_vouched() -> None:
    changes, entries = _dpkg(files={"/usr/lib/python3/dist-packages/greet/__init__.py": b"x = 1\n"})
    src = "/usr/lib/python3/dist-packages/greet/__init__.py"
    pyc = "/usr/lib/python3/dist-packages/greet/__pycache__/__init__.cpython-311.pyc"
    changes.update({src: 1, pyc: 1, "/var/lib/dpkg/alternatives/greet": 1, "/etc/alternatives/greet": 1,
                    "/usr/bin/greet": 1})
    entries.update({src: file_entry(b"x = 1\n", 0o644), pyc: file_entry(b"\x00pyc", 0o644),
                    "/var/lib/dpkg/alternatives/greet": _text(f"auto\n/usr/bin/greet\n\n{src}\n50\n\n"),
                    "/etc/alternatives/greet": Entry("link", link=src),
                    "/usr/bin/greet": Entry("link", link="/etc/alternatives/greet"),
                    **{f"{d}/greet": Entry("absent") for d in PATH[4:]}})
    assert _findings(changes, entries) == []
    # a forged byte-code file next to a source no install of this trial wrote is not vouched
    stdlib_pyc = "/usr/lib/python3.11/__pycache__/difflib.cpython-311.pyc"
    changes[stdlib_pyc] = 1
    entries[stdlib_pyc] = file_entry(b"\x00evil", 0o644)
    assert [p for p, _ in _findings(changes, entries)] == [stdlib_pyc]


def test_package_state_is_bookkeeping_and_a_deleted_image_file_is_not() -> None:
    changes = {"/var/lib/apt/lists/x_Packages": 1, "/var/cache/apt/pkgcache.bin": 0, "/var/log/apt/history.log": 0}
    assert _findings(changes, {}) == []
    assert [p for p, _ in _findings({"/etc/ld.so.cache": 0}, {})] == ["/etc/ld.so.cache"]  # no install happened
    found = _findings({"/usr/bin/cat": 2}, {"/usr/bin/cat": Entry("absent")})
    assert [p for p, _ in found] == ["/usr/bin/cat"]


def test_loader_and_pytest_configuration_void_even_at_the_shared_level() -> None:
    for path in ("/etc/ld.so.preload", "/conftest.py", "/etc/ld.so.conf.d/zz.conf"):
        for mode in (None, "shared"):
            found = _findings({path: 1}, {path: file_entry(b"/tmp/evil.so\n", 0o644)}, _policy(mode))
            assert [p for p, _ in found] == [path] and "starts" in found[0][1], (path, mode, found)
