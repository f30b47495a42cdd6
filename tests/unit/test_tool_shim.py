"""The verify-time tool shim: which test scripts get it, what it holds, and how its curl/wget wrappers behave."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rsi.sandbox import tool_shim
from rsi.sandbox.tool_shim import SHIM_BIN, SHIM_DIR, build_shim, wants_shim

TB2 = "curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\nuvx -p 3.13 pytest\n"


@pytest.mark.parametrize(("script", "want"), [
    (TB2, True),
    ("wget -qO- https://astral.sh/uv/install.sh | sh\n", True),
    ("uv run pytest /tests\n", True),
    ("cd /app && uvx pytest\n", True),
    ("python3 /tests/check.py\n", False),
    ("uvicorn app:main && echo 1 > /logs/verifier/reward.txt\n", False),
])
def test_which_test_scripts_get_the_shim(script: str, want: bool) -> None:
    assert wants_shim(script) is want


def test_no_shim_for_a_test_that_needs_none() -> None:
    assert build_shim("python3 /tests/check.py\n", home="/root", image_path="/usr/bin") is None


def test_the_shim_holds_uv_where_the_installer_puts_it_and_says_so() -> None:
    if tool_shim.host_uv() is None:
        pytest.fail("the uv wheel is an rsi dependency: pip install uv")
    shim = build_shim(TB2, home="/root", image_path="/usr/bin:/bin", host_env={"UV_DEFAULT_INDEX": "https://m/simple"})
    assert shim is not None
    paths = {p for p, _, _ in shim.files}
    assert {f"{SHIM_BIN}/uv", f"{SHIM_BIN}/uvx", "/root/.local/bin/uv", "/root/.local/bin/uvx",
            "/root/.local/bin/env", f"{SHIM_BIN}/curl", f"{SHIM_BIN}/wget"} <= paths
    assert shim.env["PATH"] == f"{SHIM_BIN}:/usr/bin:/bin" and shim.env["UV_DEFAULT_INDEX"] == "https://m/simple"
    assert shim.record["used"] is True and "PyPI uv wheel" in str(shim.record["uv"])
    assert "stand-in" in str(shim.record["installer"]) and str(shim.record["python"]).startswith("from the image")


@pytest.mark.parametrize(("script", "version"), [
    (TB2, "3.13"),
    ("uv run --python=3.12 pytest\n", "3.12"),
    ("uvx --python cpython3.11 pytest\n", "3.11"),
    ("UV_PYTHON=3.10 uv run pytest\n", "3.10"),
    ("uv venv -p python3.13 /v && /v/bin/python -m pytest\n", "3.13"),
    ("uvx pytest /tests\n", None),
    ("curl -p 3 x\n", None),
])
def test_the_python_version_a_script_asks_uv_for(script: str, version: str | None) -> None:
    assert tool_shim.asked_python(script) == version


def test_a_python_the_image_lacks_goes_last_on_path_and_into_the_record(tmp_path: Path) -> None:
    from rsi.sandbox.base import HostTree

    asked: list[str | None] = []
    tree = HostTree(tmp_path, "/usr/local/lib/rsi-python3.13", "/usr/local/lib/rsi-python3.13/bin", "rsi's python")

    def python(version: str | None) -> HostTree | str:
        asked.append(version)
        return tree

    shim = build_shim(TB2, home="/root", image_path="/usr/bin:/bin", python=python)
    assert shim is not None and asked == ["3.13"] and shim.trees == [tree]
    # the image's own interpreters come first: rsi's only answers when the image has none
    assert shim.env["PATH"] == f"{SHIM_BIN}:/usr/bin:/bin:/usr/local/lib/rsi-python3.13/bin"
    assert shim.record["python"] == "rsi's python"
    said = build_shim("uvx pytest\n", home="/root", image_path="/usr/bin", python=lambda v: f"from the image ({v})")
    assert said is not None and not said.trees and said.record["python"] == "from the image (None)"
    assert said.env["PATH"] == f"{SHIM_BIN}:/usr/bin"


def test_the_staged_verifier_archive_carries_the_python_tree(tmp_path: Path) -> None:
    import io
    import tarfile

    from rsi.exec.verify import stage_archive
    from rsi.sandbox.base import HostTree

    (tmp_path / "py" / "bin").mkdir(parents=True)
    (tmp_path / "py" / "bin" / "python3.13").write_text("#!/bin/sh\n")
    (tmp_path / "py" / "bin" / "python3.13").chmod(0o755)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("uvx -p 3.13 pytest\n")
    shim = build_shim(TB2, home="/root", image_path="/usr/bin", python=lambda v: HostTree(
        tmp_path / "py", "/usr/local/lib/rsi-python3.13", "/usr/local/lib/rsi-python3.13/bin", "rsi's python"))
    with tarfile.open(fileobj=io.BytesIO(stage_archive(tmp_path / "tests", {}, shim))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    exe = members["usr/local/lib/rsi-python3.13/bin/python3.13"]
    assert exe.mode & 0o111 and exe.uid == 0 and f"{SHIM_BIN.lstrip('/')}/uvx" in members


def test_without_a_uv_wheel_the_record_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool_shim, "host_uv", lambda: None)
    shim = build_shim(TB2, home="/root", image_path="/usr/bin")
    assert shim is not None and not shim.files and shim.record["used"] is False and "pip install uv" in str(
        shim.record["why"])


def _wrapper(tmp: Path, name: str) -> tuple[Path, dict[str, str]]:
    """The wrapper script as it lands in the sandbox, run on the host: SHIM_DIR paths mapped into tmp."""
    shim_dir, real = tmp / "shim", tmp / "real"
    (shim_dir / "bin").mkdir(parents=True)
    real.mkdir()
    text = tool_shim.WRAPPER.format(name=name, dir=shim_dir, bin=shim_dir / "bin")
    (shim_dir / "bin" / name).write_text(text)
    (shim_dir / "uv-installer.sh").write_text("# stand-in\n")
    (real / name).write_text(f'#!/bin/sh\necho "real {name} $*"\n')
    for p in (shim_dir / "bin" / name, real / name):
        p.chmod(0o755)
    assert SHIM_DIR in tool_shim.WRAPPER.format(name=name, dir=SHIM_DIR, bin=SHIM_BIN)
    return shim_dir / "bin" / name, {**os.environ, "PATH": f"{shim_dir / 'bin'}:{real}:/usr/bin:/bin"}


def test_curl_answers_the_installer_fetch_and_passes_everything_else_on(tmp_path: Path) -> None:
    curl, env = _wrapper(tmp_path, "curl")
    got = subprocess.run([str(curl), "-LsSf", "https://astral.sh/uv/0.9.5/install.sh"], capture_output=True,
                         text=True, env=env)
    assert got.returncode == 0 and got.stdout == "# stand-in\n" and "rsi shim" in got.stderr
    out = tmp_path / "inst.sh"
    subprocess.run([str(curl), "-sSf", "-o", str(out), "https://astral.sh/uv/install.sh"], env=env, check=True)
    assert out.read_text() == "# stand-in\n"
    other = subprocess.run([str(curl), "-s", "http://example.org/x"], capture_output=True, text=True, env=env)
    assert other.stdout.strip() == "real curl -s http://example.org/x"


def test_wget_writes_the_stand_in_where_wget_would(tmp_path: Path) -> None:
    wget, env = _wrapper(tmp_path, "wget")
    piped = subprocess.run([str(wget), "-qO-", "https://astral.sh/uv/install.sh"], capture_output=True, text=True,
                           env=env)
    assert piped.stdout == "# stand-in\n"
    subprocess.run([str(wget), "-q", "https://astral.sh/uv/install.sh"], env=env, cwd=tmp_path, check=True)
    assert (tmp_path / "install.sh").read_text() == "# stand-in\n"


# -- apt-get / apt: answered offline for what rsi or the image provides, passed on otherwise

def _apt(tmp: Path, name: str = "apt-get", provided: tuple[str, ...] = ("curl",)) -> tuple[Path, dict[str, str], Path]:
    """The apt wrapper as it lands in the sandbox, run on the host against a fake real apt-get and dpkg-query."""
    from rsi.sandbox import apt_shim

    shim_dir, real = tmp / "shim", tmp / "real"
    (shim_dir / "bin").mkdir(parents=True)
    real.mkdir()
    wrapper = shim_dir / "bin" / name
    wrapper.write_text(apt_shim.wrapper(name, shim_dir=str(shim_dir), shim_bin=str(shim_dir / "bin"),
                                        provided=provided))
    log = tmp / "real.log"
    (real / name).write_text(f'#!/bin/sh\necho "real {name} $*" >> {log}\necho "E: Unable to locate package $3"\n'
                             "exit 100\n")
    (real / "dpkg-query").write_text('#!/bin/sh\nfor a; do last="$a"; done\n'
                                     '[ "$last" = libfoo1 ] && printf "install ok installed" && exit 0\nexit 1\n')
    (real / "jq").write_text("#!/bin/sh\n")
    for p in (wrapper, real / name, real / "dpkg-query", real / "jq"):
        p.chmod(0o755)
    return wrapper, {**os.environ, "PATH": f"{shim_dir / 'bin'}:{real}:/usr/bin:/bin"}, log


def test_apt_get_update_and_an_install_of_what_is_provided_are_answered_offline(tmp_path: Path) -> None:
    apt, env, log = _apt(tmp_path)
    up = subprocess.run([str(apt), "update"], capture_output=True, text=True, env=env)
    assert up.returncode == 0 and "rsi shim: apt-get update answered offline" in up.stderr
    got = subprocess.run([str(apt), "install", "-y", "--no-install-recommends", "curl", "libfoo1=1.2", "jq"],
                         capture_output=True, text=True, env=env)
    assert got.returncode == 0, got.stderr
    assert "curl: provided by rsi's shim" in got.stderr and "libfoo1: installed in the image" in got.stderr
    assert "jq: its command is in the image" in got.stderr
    assert not log.exists()  # the real apt-get never ran


def test_apt_get_install_of_something_else_goes_to_the_real_apt_get(tmp_path: Path) -> None:
    apt, env, log = _apt(tmp_path)
    subprocess.run([str(apt), "update"], capture_output=True, env=env, check=True)
    got = subprocess.run([str(apt), "install", "-y", "ffmpeg"], capture_output=True, text=True, env=env)
    assert got.returncode == 100 and "Unable to locate package ffmpeg" in got.stdout
    assert "rsi cannot provide ffmpeg offline; running the real apt-get" in got.stderr
    # the update it answered runs for real first, so that with a network the install works as before
    assert log.read_text().splitlines() == ["real apt-get update", "real apt-get install -y ffmpeg"]
    plain = subprocess.run([str(apt), "clean"], capture_output=True, text=True, env=env)
    assert plain.returncode == 100 and log.read_text().splitlines()[-1] == "real apt-get clean"


def test_apt_answers_too_and_only_for_what_the_shim_stands_in_for(tmp_path: Path) -> None:
    apt, env, log = _apt(tmp_path, "apt", provided=("rsi-fake-tool",))
    ok = subprocess.run([str(apt), "install", "-y", "rsi-fake-tool"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "rsi-fake-tool: provided by rsi's shim" in ok.stderr
    apt, env, log = _apt(tmp_path / "no", "apt", provided=())
    got = subprocess.run([str(apt), "install", "-y", "rsi-fake-tool"], capture_output=True, text=True, env=env)
    assert got.returncode == 100 and log.read_text().strip() == "real apt install -y rsi-fake-tool"


def test_the_shim_serves_the_fetched_wheels_offline(tmp_path: Path) -> None:
    from rsi.sandbox.verifier_needs import verifier_needs
    from rsi.sandbox.wheel_cache import WheelSet

    wheels = WheelSet(tmp_path, "k", ["pytest==8.4.1"], ["3.13"], ["pytest-8.4.1-py3-none-any.whl"], fetched=False)
    shim = build_shim(TB2 + "uvx -w pytest==8.4.1 pytest\n", home="/root", image_path="/usr/bin", wheels=wheels,
                      host_env={"UV_DEFAULT_INDEX": "https://m/simple"})
    assert shim is not None
    assert {t.dest for t in shim.trees} == {tool_shim.WHEELS}
    assert shim.env["UV_OFFLINE"] == "1" and shim.env["UV_NO_INDEX"] == "1"
    assert shim.env["UV_FIND_LINKS"] == tool_shim.WHEELS and "UV_DEFAULT_INDEX" not in shim.env
    assert {f"{SHIM_BIN}/apt-get", f"{SHIM_BIN}/apt"} <= {p for p, _, _ in shim.files}
    assert shim.record["wheels"]["source"].startswith("from the host's cache")  # type: ignore[index]
    assert "uv runs offline" in str(shim.record["offline"])
    # an unpinned requirement cannot be served: uv keeps its index (and says why)
    loose = build_shim("uvx ruff check\n", home="/root", image_path="/usr/bin", host_env={"UV_DEFAULT_INDEX": "x"})
    assert loose is not None and "UV_OFFLINE" not in loose.env and loose.env["UV_DEFAULT_INDEX"] == "x"
    assert "uvx ruff (not pinned" in str(loose.record["offline"])
    pip = build_shim("pip install pytest==8.4.1\n", home="/root", image_path="/usr/bin", wheels=wheels,
                     needs=verifier_needs("pip install pytest==8.4.1\n"))
    assert pip is not None and pip.env["PIP_NO_INDEX"] == "1" and pip.env["PIP_FIND_LINKS"] == tool_shim.WHEELS
