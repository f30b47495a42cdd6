"""Where the files rsi ships live: the contract, the default harness config, the starter tasks, the suites.

The repository is itself a workspace; `rsi init` copies its contract, harness configs and
starter tasks from the source tree rsi is installed from (`pip install -e .`).
"""

from __future__ import annotations

from pathlib import Path

from rsi.core.errors import RsiError

_ROOT = Path(__file__).resolve().parents[2]


def bundled_root() -> Path:
    if (_ROOT / "contracts" / "hcp-1.0.yaml").is_file():
        return _ROOT
    raise RsiError(
        f"rsi's bundled contract was not found under {_ROOT}; install rsi from a source checkout "
        "with `pip install -e .`",
        exit_code=1,
    )


def bundled_contract() -> Path:
    return bundled_root() / "contracts" / "hcp-1.0.yaml"


def bundled_harness_configs() -> Path:
    return bundled_root() / "harness_configs"


def bundled_tasks() -> Path:
    return bundled_root() / "tasks"


def bundled_suites() -> Path:
    """Fixed task sets no generator wrote (`suites/<name>/`), which `rsi init` copies into a workspace."""
    return bundled_root() / "suites"
