"""The release a public base image tag is built on (sandbox/releases.py) and apt-get's "no such package" in a
failed build (sandbox/docker_build.py): what makes a stand-in the author's release and a build error one line."""

from __future__ import annotations

import pytest

from rsi.sandbox.docker_build import apt_missing
from rsi.sandbox.releases import python_for, release_for, release_of


@pytest.mark.parametrize(("tag", "codename", "python"), [
    ("python:3.13-slim-bookworm", "bookworm", "3.13"),  # the tag's codename wins over its python
    ("python:3.13-slim-trixie", "trixie", "3.13"),
    ("python:3.13-slim", "trixie", "3.13"),
    ("python:3.11-slim", "bookworm", "3.11"),
    ("python:3.12-bookworm", "bookworm", "3.12"),
    ("debian:bullseye-slim", "bullseye", None),
    ("debian:12", "bookworm", None),
    ("debian:13.1-slim", "trixie", None),
    ("debian:bookworm-20250520-slim", "bookworm", None),
    ("ubuntu:24.04", "noble", None),
    ("ubuntu:22.04", "jammy", None),
    ("ubuntu:noble", "noble", None),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "bookworm", "3.13"),
])
def test_release_and_python_of_a_tag(tag: str, codename: str, python: str | None) -> None:
    assert release_for(tag).codename == codename
    assert python_for(tag) == python


def test_a_release_has_its_official_images_apt_sources() -> None:
    src = release_of("bookworm").sources()
    assert "Suites: bookworm bookworm-updates" in src and "Suites: bookworm-security" in src
    assert "deb.debian.org/debian-security" in src and "trixie" not in src
    assert "noble-security" in release_of("noble").sources()
    assert release_of("bookworm").python == "3.11" and release_of("trixie").python == "3.13"
    with pytest.raises(ValueError, match="unknown release codename 'hamm'"):
        release_of("hamm")


@pytest.mark.parametrize(("log", "pkg"), [
    ("Reading package lists...\nE: Version '3.5.1-1' for 'openssl' was not found\n", "openssl=3.5.1-1"),
    ("E: Unable to locate package nosuchpkg\n", "nosuchpkg"),
    ("E: Couldn't find any package by glob 'python3.13'\nE: Couldn't find any package by regex 'python3.13'\n",
     "python3.13"),
    ("\x1b[91mE: Package 'libfoo1' has no installation candidate\n\x1b[0m", "libfoo1"),
    (" libbar : Depends: libbaz (>= 3) but it is not installable\nE: Unable to correct problems\n", "libbar"),
])
def test_apt_gets_missing_package_is_named(log: str, pkg: str) -> None:
    got = apt_missing(log)
    assert got is not None and got[0] == pkg and got[1].startswith(("E:", "libbar"))


def test_other_build_failures_name_no_package() -> None:
    assert apt_missing("The command '/bin/sh -c make' returned a non-zero code: 2\n") is None
