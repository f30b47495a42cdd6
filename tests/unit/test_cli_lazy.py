"""A command imports what it needs when it runs: `rsi --version` loads no store, `rsi diff` none of the other
commands' code (the cycle's, the viewer's web stack), and `rsi --help` still lists every command."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
sys.argv = ["rsi", *{argv!r}]
from rsi.cli.app import main
try:
    main()
except SystemExit:
    pass
print("MODULES " + json.dumps(sorted(m for m in sys.modules if m.startswith(("rsi.", "sqlalchemy", "fastapi")))))
"""


def _modules(*argv: str) -> tuple[set[str], str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=list(argv))], capture_output=True, text=True,
                         timeout=120).stdout
    line = next(x for x in out.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line[len("MODULES "):])), out


def test_version_loads_no_command() -> None:
    mods, out = _modules("--version")
    assert "rsi 0.1.0" in out
    assert not any(m.startswith(("sqlalchemy", "rsi.store", "rsi.loop", "rsi.cli.cycle")) for m in mods), mods


def test_a_command_loads_only_its_own_module() -> None:
    mods, _ = _modules("diff", "--help")
    assert "rsi.cli.diff" in mods
    assert not {"rsi.cli.cycle", "rsi.cli.jobs", "rsi.cli.view", "rsi.cli.model"} & mods
    assert not any(m.startswith(("fastapi", "rsi.view")) for m in mods)


def test_help_lists_every_command() -> None:
    _, out = _modules("--help")
    for name in ("init", "run", "discover", "expand", "update", "promote", "diff", "cycle", "demo", "view", "tasks",
                 "trials", "generations", "jobs"):
        assert f" {name} " in out, name
