"""Stand-ins for a public FROM without Docker (issue 49): an Ubuntu tag without Ubuntu's keyring is refused in one
line naming the command that makes an explicit Debian stand-in; a build that failed on a FROM the host lacks
says that command; `rsi doctor` lists what each needed tag is stood in by; the Dockerfile lines that make a
stand-in's Python venv-ready."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi.sandbox import base_image
from rsi.sandbox.base_image import BaseImageError, stand_in_command, stood_in_by, substitute_base
from rsi.sandbox.stand_in_python import ENSUREPIP_INIT, SITECUSTOMIZE, layout_lines
from tests.taskgen import make_task


@pytest.fixture
def no_keyring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(base_image, "UBUNTU_KEYRING", str(tmp_path / "no-ubuntu-archive-keyring.gpg"))


def test_an_ubuntu_tag_without_the_keyring_names_the_debian_stand_in_command(no_keyring: None) -> None:
    assert stand_in_command("ubuntu:24.04") == "rsi sandbox build-base --as ubuntu:24.04 --suite bookworm"
    assert stand_in_command("python:3.13-slim-bookworm") == "rsi sandbox build-base --as python:3.13-slim-bookworm"
    with pytest.raises(BaseImageError) as e:
        substitute_base("ubuntu:24.04", client=object())  # type: ignore[arg-type]  # refused before any daemon call
    msg = str(e.value)
    assert "\n" not in msg and "`rsi sandbox build-base --as ubuntu:24.04 --suite bookworm`" in msg, msg
    assert "keyring" in msg and "never installs an unverified release" in msg
    with pytest.raises(BaseImageError, match="`rsi sandbox build-base --suite bookworm`"):
        base_image.build_base_image("rsi-base:noble", "noble", client=object())  # type: ignore[arg-type]


def test_an_ubuntu_tag_with_the_keyring_is_its_own_release(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    keyring = tmp_path / "ubuntu-archive-keyring.gpg"
    keyring.write_bytes(b"k")
    monkeypatch.setattr(base_image, "UBUNTU_KEYRING", str(keyring))
    assert stand_in_command("ubuntu:24.04") == "rsi sandbox build-base --as ubuntu:24.04"


def test_what_a_stand_in_is_comes_from_its_label() -> None:
    label = "debian bookworm minbase + python3 3.11, standing in for ubuntu:24.04"
    assert stood_in_by({base_image.LABEL_SUBSTITUTE: label}) == "debian bookworm minbase + python3 3.11"
    assert stood_in_by({"maintainer": "x"}) is None


class _Provider:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def image_id(self, tag: str) -> str | None:
        return "sha256:1" if tag in self.present else None


def test_a_build_that_failed_on_a_missing_from_says_how_to_stand_it_in(no_keyring: None, tmp_path: Path) -> None:
    from rsi.exec.trial_record import missing_base_hint
    from rsi.store.files import load_task

    task = load_task(make_task(tmp_path, "on-noble", dockerfile="FROM ubuntu:24.04 AS build\nFROM build\n"))
    hint = missing_base_hint(_Provider(set()), task)  # type: ignore[arg-type]
    assert hint is not None and "FROM ubuntu:24.04 is not on this host" in hint, hint
    assert "`rsi sandbox build-base --as ubuntu:24.04 --suite bookworm`" in hint
    assert missing_base_hint(_Provider({"ubuntu:24.04"}), task) is None  # type: ignore[arg-type]


def test_doctor_lists_each_needed_tag_and_what_stands_in_for_it(
    no_keyring: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsi.loop.doctor import base_tag_checks

    make_task(tmp_path, "a", dockerfile="FROM python:3.13-slim-bookworm\n")
    make_task(tmp_path, "b", dockerfile="FROM python:3.13-slim-bookworm\nRUN true\n")
    make_task(tmp_path, "c", dockerfile="FROM ubuntu:24.04\n")
    make_task(tmp_path, "d", dockerfile="FROM debian:bookworm-slim\n")
    labels = {
        "python:3.13-slim-bookworm": {
            base_image.LABEL_SUBSTITUTE: "debian bookworm minbase + CPython 3.13, standing in for python:3.13-slim",
            base_image.LABEL_RELEASE: "bookworm"},
        "debian:bookworm-slim": {},
    }
    monkeypatch.setattr(base_image, "base_image_labels", lambda tag, client=None: labels.get(tag))
    monkeypatch.setattr(base_image, "stale_stand_in", lambda tag, client=None: None)
    checks = {c.name: c for c in base_tag_checks([tmp_path])}
    py = checks["base python:3.13-slim-bookworm"]
    assert py.ok and py.detail == "stood in by debian bookworm minbase + CPython 3.13; needed by 2 tasks", py
    assert checks["base debian:bookworm-slim"].detail == "the real image; needed by 1 task"
    ub = checks["base ubuntu:24.04"]
    assert not ub.ok and ub.fix == "rsi sandbox build-base --as ubuntu:24.04 --suite bookworm", ub


def test_a_stand_ins_python_gets_the_official_images_layout() -> None:
    portable = "\n".join(layout_lines("3.13", portable_dest="/usr/local/lib/rsi-python3.13"))
    # the library where a venv's `home = /usr/local/bin` makes CPython look, the wrapper a file beside it
    assert "mv /usr/local/lib/rsi-python3.13/lib/python3.13 /usr/local/lib/python3.13" in portable
    assert "cp /usr/local/lib/rsi-python3.13/bin/python3.13 /usr/local/bin/python3.13" in portable
    assert "rm -f /usr/local/lib/python3.13/EXTERNALLY-MANAGED" in portable and "posix_prefix" in portable
    assert "COPY rsi-python-kit/ensurepip /usr/local/lib/python3.13/ensurepip" in portable
    assert "-m ensurepip --default-pip" in portable
    native = "\n".join(layout_lines("3.11", portable_dest=None))
    assert "ln -sf /usr/bin/python3.11 /usr/local/bin/python3.11" in native
    assert "/usr/lib/python3.11/ensurepip" in native
    compile(ENSUREPIP_INIT, "ensurepip/__init__.py", "exec")
    compile(SITECUSTOMIZE, "sitecustomize.py", "exec")
