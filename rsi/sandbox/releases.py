"""Which Debian (or Ubuntu) release a public image a Dockerfile names is built on, and its apt sources.

A stand-in made by `rsi sandbox build-base --as TAG` must be the release TAG is, so an `apt-get install`
in the task's Dockerfile gets the versions the task's author got (openssl 3.0.x on bookworm prints
`CN = x` where trixie's 3.5 prints `CN=x`). The release comes from the tag itself: a codename in it
(`python:3.13-slim-bookworm`, `debian:trixie-slim`, `ubuntu:noble`) or a version (`debian:12`,
`ubuntu:24.04`); a tag that names none (`python:3.13-slim`) gets the release its image had when
Terminal-Bench 2 was written (trixie for python 3.13, bookworm otherwise). The interpreter a
`python:X.Y` tag carries is a separate question: `python_for` says which; where the release's own
python3 is another version, the stand-in adds rsi's portable CPython 3.13 (or says it cannot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEBIAN = {"bullseye": "11", "bookworm": "12", "trixie": "13", "forky": "14"}
UBUNTU = {"focal": "20.04", "jammy": "22.04", "noble": "24.04", "plucky": "25.04", "questing": "25.10"}
# the python3 each release ships (what `apt-get install python3` and /usr/bin/python3 give)
RELEASE_PYTHON = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13", "forky": "3.13",
                  "focal": "3.8", "jammy": "3.10", "noble": "3.12", "plucky": "3.13", "questing": "3.13"}
_TRIXIE_HINTS = ("3.13", "3.14")
_PYTHON_TAG = re.compile(r"(?:^|/)python[:-]3[.-](\d+)")


@dataclass(frozen=True)
class Release:
    """A distribution release: `debian` or `ubuntu`, its codename and version."""

    distro: str
    codename: str
    version: str

    @property
    def mirror(self) -> str:
        return "http://deb.debian.org/debian" if self.distro == "debian" else "http://archive.ubuntu.com/ubuntu"

    @property
    def python(self) -> str | None:
        return RELEASE_PYTHON.get(self.codename)

    def sources(self) -> str:
        """The deb822 sources file the release's official image has (main, updates, security)."""
        if self.distro == "debian":
            return (f"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {self.codename} {self.codename}-updates\n"
                    "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                    f"Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: {self.codename}-security\n"
                    "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
        return (f"Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\n"
                f"Suites: {self.codename} {self.codename}-updates {self.codename}-backports\n"
                "Components: main universe restricted multiverse\n"
                "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n\n"
                f"Types: deb\nURIs: http://security.ubuntu.com/ubuntu/\nSuites: {self.codename}-security\n"
                "Components: main universe restricted multiverse\n"
                "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n")

    def __str__(self) -> str:
        return f"{self.distro} {self.codename}"


def release_of(codename: str) -> Release:
    """The release with this codename (ValueError for one rsi does not know)."""
    if codename in DEBIAN:
        return Release("debian", codename, DEBIAN[codename])
    if codename in UBUNTU:
        return Release("ubuntu", codename, UBUNTU[codename])
    raise ValueError(f"unknown release codename '{codename}' (known: {', '.join([*DEBIAN, *UBUNTU])})")


def release_for(tag: str) -> Release:
    """The release a public image tag is built on: a codename or version in the tag, else by its python."""
    name = tag.lower()
    repo, _, version = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    words = set(re.split(r"[^a-z0-9.]+", version))
    for codename in (*DEBIAN, *UBUNTU):
        if codename in words or re.search(rf"(^|[^a-z]){codename}($|[^a-z])", version):
            return release_of(codename)
    base = repo.split("/")[-1]
    if base == "debian":
        for codename, number in DEBIAN.items():
            if version == number or version.startswith(number + "."):
                return release_of(codename)
    if base == "ubuntu":
        for codename, number in UBUNTU.items():
            if version == number or version.startswith(number):
                return release_of(codename)
        return release_of("noble")  # ubuntu:latest
    return release_of("trixie") if any(h in version for h in _TRIXIE_HINTS) else release_of("bookworm")


def python_for(tag: str) -> str | None:
    """The CPython version a `python:X.Y...` tag's image carries in /usr/local (Terminal-Bench's
    `t-bench/python-3-13` too); None: not a python image."""
    m = _PYTHON_TAG.search(tag.lower())
    return f"3.{m.group(1)}" if m else None
