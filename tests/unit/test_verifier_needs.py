"""What a verifier's scripts fetch (sandbox/verifier_needs.py): pinned requirements, pythons, apt, downloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi.sandbox.verifier_needs import apt_provided, commands, image_apt_packages, verifier_needs

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_a_terminal_bench_2_test_sh_pins_pytest_and_its_plugin() -> None:
    needs = verifier_needs((FIXTURES / "tb21" / "csv-region-totals" / "tests" / "test.sh").read_text())
    assert needs.pinned == ["pytest-json-ctrf==0.3.5", "pytest==8.4.1"]
    assert needs.unpinned == []  # `uvx ... pytest` is the tool -w pins
    assert needs.pythons == ["3.13"] and not needs.project and needs.apt == ["curl"]
    assert needs.fetches == [] and needs.other_use == set()  # curl only fetches uv's installer


def test_a_terminal_bench_1_run_tests_sh_adds_pytest_to_a_uv_project() -> None:
    needs = verifier_needs((FIXTURES / "tb1" / "tb1-line-stats" / "run-tests.sh").read_text())
    assert needs.pinned == ["pytest==8.4.1"] and needs.project and needs.unpinned == []


@pytest.mark.parametrize(("script", "pinned", "unpinned"), [
    ("uvx -w pytest==8.4.1 pytest /tests\n", ["pytest==8.4.1"], []),
    ("uvx --with=pytest==8.4.1,requests==2.32.3 pytest\n", ["pytest==8.4.1", "requests==2.32.3"], []),
    ("uvx --with 'numpy>=1,<3' --from pytest==8.4.1 pytest\n", ["pytest==8.4.1"], ["numpy>=1,<3"]),
    ("uvx ruff@0.6.9 check /app\n", ["ruff==0.6.9"], []),
    ("uvx ruff check /app\n", [], ["ruff"]),
    ("uvx ruff@latest check\n", [], ["ruff@latest"]),
    ("uv tool run --with pytest-timeout==2.3.1 pytest==8.4.1\n", ["pytest-timeout==2.3.1", "pytest==8.4.1"], []),
    ("uv run --with pytest==8.4.1 --with pyyaml==6.0.2 pytest /tests -q\n", ["pytest==8.4.1", "pyyaml==6.0.2"], []),
    ("uv pip install --system pytest==8.4.1 'requests[socks]==2.32.3'\n",
     ["pytest==8.4.1", "requests[socks]==2.32.3"], []),
    ("uv pip install pytest\n", [], ["pytest"]),
    ("uv add --dev pytest==8.4.1 numpy==2.1.0\n", ["numpy==2.1.0", "pytest==8.4.1"], []),
    ("pip install pytest==8.4.1 && python -m pytest\n", ["pytest==8.4.1"], []),
    ("python3 -m pip install -q --no-cache-dir requests\n", [], ["requests"]),
    ("uvx -w $PYTEST pytest\n", [], ["$PYTEST", "pytest"]),
    ("uv pip install git+https://github.com/x/y\n", [], ["git+https://github.com/x/y"]),
    ("echo 'uvx ruff' # uvx black\n", [], []),  # quoted text and comments are not commands
    ("cat > /tmp/t.py <<'EOF'\npip install flask\nEOF\npython3 /tmp/t.py\n", [], []),  # a here-document body
])
def test_the_requirements_a_script_asks_for(script: str, pinned: list[str], unpinned: list[str]) -> None:
    needs = verifier_needs(script)
    assert needs.pinned == pinned
    assert sorted(r.text for r in needs.unpinned) == sorted(unpinned)


def test_a_requirements_file_is_read_through_the_callback() -> None:
    files = {"/tests/requirements.txt": "# tools\npytest==8.4.1\n-r more.txt\n", "/tests/more.txt": "hypothesis\n"}
    needs = verifier_needs("uv pip install -r /tests/requirements.txt\n", files.get)
    assert needs.pinned == ["pytest==8.4.1"] and [r.text for r in needs.unpinned] == ["hypothesis"]
    missing = verifier_needs("pip install -r /tests/absent.txt\n", files.get)
    assert [r.text for r in missing.unpinned] == ["-r /tests/absent.txt"]


@pytest.mark.parametrize(("script", "pythons"), [
    ("uvx -p 3.13 pytest\n", ["3.13"]),
    ("uvx --python=cpython3.12 pytest\n", ["3.12"]),
    ("UV_PYTHON=3.11 uv run pytest\n", ["3.11"]),
    ("export UV_PYTHON=python3.10\nuvx pytest\n", ["3.10"]),
    ("uv venv -p 3.13.1 /v\n", ["3.13"]),
    ("uvx pytest\n", []),
])
def test_the_python_asked_for(script: str, pythons: list[str]) -> None:
    assert verifier_needs(script).pythons == pythons


def test_apt_installs_and_downloads() -> None:
    needs = verifier_needs(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl jq=1.6-2\n"
        "apt install -o Dpkg::Use-Pty=0 -y git\n"
        "curl -sSf http://localhost:8080/health\n"
        "curl -o /tmp/data.csv https://example.org/data.csv\n"
        "wget -q https://astral.sh/uv/install.sh\n"
        "git clone https://github.com/acme/fixtures /tmp/f\n"
        "git clone /app/repo /tmp/copy\n")
    assert needs.apt == ["curl", "jq", "git"]
    assert needs.fetches == ["https://example.org/data.csv (curl)", "https://github.com/acme/fixtures (git clone)"]
    assert needs.other_use == {"curl"}  # curl also reaches a service; wget only fetches uv's installer


def test_which_debian_packages_count_as_provided() -> None:
    dockerfile = ("FROM python:3.13-slim\n"
                  "RUN apt-get update && apt-get install -y \\\n    jq tmux && rm -rf /var/lib/apt\n")
    assert image_apt_packages(dockerfile) == {"jq", "tmux"}
    only_installer = verifier_needs("curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\n")
    also_service = verifier_needs("curl -s http://localhost:8080/\n")
    assert apt_provided("curl", only_installer, "FROM debian\n")
    assert not apt_provided("curl", also_service, "FROM debian\n")  # rsi's curl only answers the installer
    assert apt_provided("jq", only_installer, dockerfile) and apt_provided("coreutils", only_installer, "")
    assert apt_provided("python3", only_installer, dockerfile) and not apt_provided("python3", only_installer,
                                                                                    "FROM debian:bookworm\n")
    assert not apt_provided("ffmpeg", only_installer, dockerfile)


def test_commands_split_at_shell_operators() -> None:
    assert commands("a 1 && b 2 | c; (d)\nif e; then f; fi\n") == [
        ["a", "1"], ["b", "2"], ["c"], ["d"], ["if", "e"], ["then", "f"], ["fi"]]
    assert commands("uvx \\\n  -w pytest==8 \\\n  pytest\n") == [["uvx", "-w", "pytest==8", "pytest"]]
