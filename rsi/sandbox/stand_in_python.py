"""The Python of a `python:*` stand-in, made to behave as the official image's does.

`rsi sandbox build-base --as python:3.13-slim-bookworm` gives bookworm plus rsi's portable CPython 3.13
(portable_python.py); `--as python:3.13-slim` trixie, whose own python3 is 3.13. Either way the interpreter is
Debian's, which on its own differs from the official image's CPython in ways a task's scripts notice:

- a venv (`python3 -m venv`, `uv venv`, `uv init && uv add`) records `home = /usr/local/bin` and CPython looks
  for the standard library from there (`/usr/local/lib/python3.13/os.py`, not resolving symlinks as it does for
  the interpreter itself), so the portable tree's library, kept under its own directory, was not found:
  "Could not find platform independent libraries", "Failed to import encodings module";
- Debian leaves out `ensurepip` (python3-venv) and pip, marks the library EXTERNALLY-MANAGED, installs into
  `dist-packages` (its `posix_local` scheme) and its `site` (frozen into the interpreter, so only a
  `sitecustomize` can change it) never puts `site-packages` on `sys.path`.

So a stand-in gets `layout_lines`: the portable interpreter's wrapper at /usr/local/bin/python3.13 (a file, as
the real binary is) with its standard library at /usr/local/lib/python3.13 (prefix /usr/local, as upstream),
`python3` and `python` beside it; the library's EXTERNALLY-MANAGED removed; the `posix_prefix` scheme
(pip installs into `<prefix>/lib/pythonX.Y/site-packages`, scripts into `<prefix>/bin`); a `sitecustomize` that
puts those `site-packages` on `sys.path`; a small `ensurepip` (upstream's interface) with a pip wheel the host's
pip fetched from its index; and pip itself installed with it (`pip`, `pip3`, `pip3.X`).
tests/integration/test_stand_in_python.py runs the same checks in every stand-in (and in the real image where
one is present) and compares.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rsi.core.errors import RsiError
from rsi.store.paths import cache_dir

KIT = "rsi-python-kit"  # the build context's folder of what layout_lines copies in
RECIPE = "venv-ready 2"  # in the stand-in's label: a stand-in made by an older recipe is made again

# Upstream ensurepip's interface (bootstrap, version, `python -m ensurepip [--upgrade] [--default-pip]`...),
# installing the pip wheel beside it with pip itself run from that wheel, as upstream does.
ENSUREPIP_INIT = '''"""ensurepip for rsi's stand-in Python: installs the pip wheel in _bundled (upstream's API)."""
import glob
import os
import subprocess
import sys

__all__ = ["version", "bootstrap"]
_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bundled")


def _wheel():
    return sorted(glob.glob(os.path.join(_BUNDLED, "pip-*.whl")))[-1]


def version():
    return os.path.basename(_wheel()).split("-")[1]


def bootstrap(*, root=None, upgrade=False, user=False, altinstall=False, default_pip=False, verbosity=0):
    _bootstrap(root=root, upgrade=upgrade, user=user, altinstall=altinstall, default_pip=default_pip,
               verbosity=verbosity)


def _bootstrap(*, root=None, upgrade=False, user=False, altinstall=False, default_pip=False, verbosity=0):
    if altinstall and default_pip:
        raise ValueError("Cannot use altinstall and default_pip together")
    os.environ.pop("ENSUREPIP_OPTIONS", None)
    if altinstall:
        os.environ["ENSUREPIP_OPTIONS"] = "altinstall"
    elif not default_pip:
        os.environ["ENSUREPIP_OPTIONS"] = "install"
    args = ["install", "--no-cache-dir", "--no-index", "--find-links", _BUNDLED]
    if root:
        args += ["--root", root]
    if upgrade:
        args.append("--upgrade")
    if user:
        args.append("--user")
    if verbosity:
        args.append("-" + "v" * verbosity)
    code = ("import runpy, sys; sys.path = [%r] + sys.path; sys.argv[1:] = %r; "
            "runpy.run_module('pip', run_name='__main__', alter_sys=True)" % (_wheel(), args + ["pip"]))
    cmd = [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code]
    if sys.flags.isolated:
        cmd.insert(1, "-I")
    return subprocess.run(cmd, check=True).returncode


def _main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m ensurepip")
    p.add_argument("--version", action="version", version="pip {}".format(version()))
    p.add_argument("-v", "--verbose", action="count", default=0, dest="verbosity")
    p.add_argument("-U", "--upgrade", action="store_true")
    p.add_argument("--user", action="store_true")
    p.add_argument("--root", default=None)
    p.add_argument("--altinstall", action="store_true")
    p.add_argument("--default-pip", action="store_true")
    a = p.parse_args(argv)
    return _bootstrap(root=a.root, upgrade=a.upgrade, user=a.user, verbosity=a.verbosity,
                      altinstall=a.altinstall, default_pip=a.default_pip)
'''
ENSUREPIP_MAIN = "import sys\nimport ensurepip\n\nif __name__ == '__main__':\n    sys.exit(ensurepip._main())\n"

# Debian's `site` is frozen into the interpreter: this puts <prefix>/lib/pythonX.Y/site-packages on sys.path for
# every prefix site uses (the base prefix outside a venv, and in one that includes the system's packages).
SITECUSTOMIZE = '''# rsi stand-in: site-packages on sys.path, as upstream CPython has it (Debian's site: dist-packages)
import os
import site
import sys

for _p in site.PREFIXES:
    _d = os.path.join(_p, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    if os.path.isdir(_d) and _d not in sys.path:
        site.addsitedir(_d)
'''


class StandInPythonError(RsiError):
    """The pip a stand-in's Python gets could not be fetched (the host's pip says why)."""

    exit_code = 1


def pip_wheel(python: str) -> Path:
    """The pip wheel for CPython `python` (3.13): fetched once with the host's pip from its index, then cached."""
    d = cache_dir() / "stand-in-pip" / f"py{python}"
    have = sorted(d.glob("pip-*.whl")) if d.is_dir() else []
    if have:
        return have[-1]
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetching-", dir=d.parent))
    try:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                              "--python-version", python, "--dest", str(tmp), "pip"],
                             capture_output=True, text=True, timeout=600)
        wheels = sorted(tmp.glob("pip-*.whl"))
        if got.returncode != 0 or not wheels:
            said = (got.stderr or got.stdout).strip().splitlines()
            raise StandInPythonError(f"could not fetch a pip wheel for python {python} with the host's pip "
                                     f"(its index settings): {said[-1] if said else 'no wheel'}")
        try:
            os.replace(tmp, d)
        except OSError:
            if not d.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(d.glob("pip-*.whl"))[-1]


def write_kit(ctx: Path, python: str) -> str:
    """Put ensurepip (with its pip wheel) and the sitecustomize in `ctx`/KIT; return the pip version."""
    kit = ctx / KIT
    (kit / "ensurepip" / "_bundled").mkdir(parents=True)
    wheel = pip_wheel(python)
    shutil.copy2(wheel, kit / "ensurepip" / "_bundled" / wheel.name)
    (kit / "ensurepip" / "__init__.py").write_text(ENSUREPIP_INIT)
    (kit / "ensurepip" / "__main__.py").write_text(ENSUREPIP_MAIN)
    (kit / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return wheel.name.split("-")[1]


def layout_lines(python: str, *, portable_dest: str | None) -> list[str]:
    """Dockerfile lines (after `write_kit`) that make the stand-in's CPython `python` behave as the official
    image's: `portable_dest` is where rsi's portable tree was copied (its wrapper and library move to
    /usr/local), None for the release's own interpreter in /usr/bin (linked from /usr/local/bin)."""
    lib = f"/usr/local/lib/python{python}" if portable_dest else f"/usr/lib/python{python}"
    if portable_dest:
        d = portable_dest
        place = (f"mv {d}/lib/python{python} {lib} && ln -s ../../python{python} {d}/lib/python{python} && "
                 f"cp {d}/bin/python{python} /usr/local/bin/python{python}")
    else:
        place = f"ln -sf /usr/bin/python{python} /usr/local/bin/python{python}"
    patch = (f"sed -i \"s/prefix_scheme = 'posix_local'/prefix_scheme = 'posix_prefix'/\" "
             f"$(ls {lib}/sysconfig/__init__.py {lib}/sysconfig.py 2>/dev/null)")
    return [
        f"RUN {place} && ln -sf python{python} /usr/local/bin/python3 && ln -sf python3 /usr/local/bin/python && "
        f"rm -f {lib}/EXTERNALLY-MANAGED {lib}/sitecustomize.py && {patch} && "
        f"find {lib} -name '*.pyc' -path '*sysconfig*' -delete",
        f"COPY {KIT}/ensurepip {lib}/ensurepip",
        f"COPY {KIT}/sitecustomize.py {lib}/sitecustomize.py",
        f"RUN python{python} -m ensurepip --default-pip >/dev/null && rm -rf /root/.cache/pip && "
        f"python{python} -m pip --version",
    ]
