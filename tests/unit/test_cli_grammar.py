"""One CLI grammar (docs/cli.md, "The grammar"), checked on every command of the Typer app: `-n` is
`--concurrency`; a short flag means one thing everywhere; every command that prints a listing or a result takes
`--json`, and `--json` and every other boolean show as flags in the `--help` users see (no `<bool>`); `-w` works
after the command name too; old spellings warn once; `rsi run` says which agent runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.context import WorkspaceContext
from tests.taskgen import make_task

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

# commands that print neither a listing nor a result: servers, and an image build that reports as it goes
NO_JSON = {"rsi view", "rsi model serve", "rsi sandbox build-base"}
# commands that read no workspace
NO_WORKSPACE = {"rsi model serve"}


def _docs() -> Any:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DOCS = _docs()
COMMANDS: list[tuple[list[str], Any]] = DOCS.walk()
COMMANDS_BY_NAME = [(" ".join(p), c) for p, c in COMMANDS]
LEAVES = [(" ".join(p), c) for p, c in COMMANDS if not hasattr(c, "list_commands")]


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option"]


def _flags(opt: Any) -> list[str]:
    return [*opt.opts, *opt.secondary_opts]


def test_the_walk_finds_every_command() -> None:
    names = {n for n, _ in LEAVES}
    assert {"rsi run", "rsi discover", "rsi cycle", "rsi demo", "rsi diff", "rsi jobs list", "rsi tasks show",
            "rsi config check", "rsi tasks validate", "rsi model serve"} <= names
    assert len(names) >= 29


def test_n_is_always_concurrency() -> None:
    for path, cmd in COMMANDS:
        for opt in _options(cmd):
            if "-n" in _flags(opt):
                assert "--concurrency" in opt.opts, f"{' '.join(path)}: -n is {opt.opts}"
            if "--concurrency" in opt.opts:
                assert "-n" in opt.opts, f"{' '.join(path)}: --concurrency without -n"


def test_a_short_flag_means_one_thing_everywhere() -> None:
    meaning: dict[str, set[str]] = {}
    where: dict[str, set[str]] = {}
    for path, cmd in COMMANDS:
        for opt in _options(cmd):
            shorts = [f for f in _flags(opt) if not f.startswith("--")]
            longs = [f for f in _flags(opt) if f.startswith("--")]
            for s in shorts:
                meaning.setdefault(s, set()).add(longs[0] if longs else "?")
                where.setdefault(s, set()).add(" ".join(path))
    clashes = {s: m for s, m in meaning.items() if len(m) > 1}
    assert clashes == {}, {s: (m, where[s]) for s, m in clashes.items()}
    assert meaning["-n"] == {"--concurrency"} and meaning["-k"] == {"--attempts"}
    assert meaning["-w"] == {"--workspace"} and meaning["-c"] == {"--candidate"}


def test_counts_have_long_names() -> None:
    """No visible one-letter long option (`--n`); the old `--n` is a hidden alias of `--candidates`."""
    for path, cmd in COMMANDS:
        for opt in _options(cmd):
            short_longs = [f for f in _flags(opt) if f.startswith("--") and len(f) == 3]
            assert not short_longs or opt.hidden, f"{' '.join(path)}: {short_longs}"
    for name in ("rsi discover", "rsi cycle"):
        cmd = dict(LEAVES)[name]
        assert any("--candidates" in o.opts for o in _options(cmd)), name


def test_every_budget_has_a_unit() -> None:
    with_budget = [name for name, cmd in LEAVES if any("--budget" in _flags(o) for o in _options(cmd))]
    assert {"rsi run", "rsi expand", "rsi discover", "rsi cycle", "rsi demo"} <= set(with_budget)
    for name, cmd in LEAVES:
        if name in with_budget:
            assert any("--unit" in _flags(o) for o in _options(cmd)), f"{name}: --budget without --unit"


def test_a_trials_only_budget_refuses_another_unit(tmp_path: Path) -> None:
    for args in (["demo", "--dir", str(tmp_path / "d"), "--unit", "minutes"], ["cycle", "--unit", "tokens"],
                 ["discover", "--unit", "minutes"]):
        r = runner.invoke(app, ["-w", str(tmp_path), *args])
        assert r.exit_code == 2 and "--unit" in r.output and "rsi run" in r.output, (args, r.output)
    assert not (tmp_path / "d").exists()


def test_booleans_are_flags_or_pairs() -> None:
    """A boolean off by default is a flag (`--json`); one on by default is a `--x/--no-x` pair (`--html/--no-html`);
    no lone `--no-x`."""
    for name, cmd in LEAVES:
        for opt in _options(cmd):
            if not opt.is_bool_flag or opt.hidden or opt.opts == ["--help"] or "-h" in opt.opts:
                continue
            assert not any(f.startswith("--no-") for f in opt.opts), f"{name}: lone {opt.opts}"
            if opt.default:
                assert opt.secondary_opts, f"{name}: {opt.opts} is on by default and has no --no- spelling"


def test_every_command_that_prints_a_result_takes_json() -> None:
    missing = [n for n, c in LEAVES if n not in NO_JSON and not any("--json" in o.opts for o in _options(c))]
    assert missing == []
    for name, cmd in LEAVES:
        for opt in _options(cmd):
            if "--json" in opt.opts:
                assert opt.is_flag, f"{name}: --json takes a value"


def test_every_command_that_reads_a_workspace_takes_w() -> None:
    missing = [n for n, c in LEAVES if n not in NO_WORKSPACE
               and not any({"-w", "--workspace"} <= set(o.opts) for o in _options(c))]
    assert missing == []


def _type_column(text: str, flag: str) -> str | None:
    """The type shown in `flag`'s row of a rich --help ("" for none; None when it has no row)."""
    for line in text.splitlines():
        cells = line.strip("│ ").split()
        if cells and cells[0] == flag:
            rest = [c for c in cells[1:] if not c.startswith("-")]  # its short and negative spellings
            return rest[0] if rest and rest[0].startswith("<") else ""
    return None


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p))
def test_help_shows_booleans_as_flags(path: list[str]) -> None:
    """What `rsi ... --help` prints (the rich layout users see): a flag's row names no type, a value's does."""
    text = DOCS.live_help(path)
    assert "<bool>" not in text
    cmd = dict(COMMANDS_BY_NAME)[" ".join(path)]
    for opt in _options(cmd):
        if opt.hidden:
            continue
        shown = _type_column(text, opt.opts[0] if opt.opts[0].startswith("--") else opt.opts[-1])
        assert shown is not None, f"{' '.join(path)}: {opt.opts} not in --help"
        assert (shown == "") == bool(opt.is_flag), f"{' '.join(path)}: {opt.opts} shows {shown!r}"


def test_a_flag_refuses_a_value() -> None:
    r = runner.invoke(app, ["jobs", "list", "--json", "true"])
    assert r.exit_code == 2


def test_cli_reference_is_the_live_help() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == DOCS.render()


def test_w_after_the_command_is_the_same_as_before(workspace: WorkspaceContext, tmp_path: Path) -> None:
    root = str(workspace.ws.root)
    before = runner.invoke(app, ["-w", root, "generations", "list", "--json"])
    after = runner.invoke(app, ["generations", "list", "--json", "-w", root])
    assert before.exit_code == after.exit_code == 0, after.output
    assert json.loads(before.output) == json.loads(after.output)
    r = runner.invoke(app, ["jobs", "list", "-w", str(tmp_path / "none")])
    assert r.exit_code == 2 and f"rsi init {tmp_path / 'none'}" in r.output


def test_old_n_still_works_and_warns_once(tmp_path: Path) -> None:
    r = runner.invoke(app, ["discover", "--n", "3", "-w", str(tmp_path)])
    assert r.exit_code == 2  # no workspace there: the warning comes first, then the one-line error
    warned = [line for line in r.stderr.splitlines() if line.startswith("deprecated:")]
    assert warned == ["deprecated: --n is now --candidates; --n goes in the next release"]
    assert "deprecated" not in runner.invoke(app, ["discover", "--candidates", "3", "-w", str(tmp_path)]).stderr
    r = runner.invoke(app, ["cycle", "-c", "2", "-w", str(tmp_path)])
    assert r.exit_code == 2 and "No such option: -c" in r.output


def test_run_asks_which_agent(tmp_path: Path) -> None:
    r = runner.invoke(app, ["-w", str(tmp_path), "run", str(tmp_path)])
    assert r.exit_code == 2
    assert "--agent" in r.stderr and "harness (the model)" in r.stderr and "known_wrong" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    help_text = DOCS.live_help(["rsi", "run"])
    for agent in ("harness", "oracle", "nop", "oracle-replay", "hinted", "known_wrong"):
        assert agent in help_text, agent


def test_diff_json_is_format_json(workspace: WorkspaceContext) -> None:
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["diff", "gen-0000", "gen-0000", "--json", "--format", "md", "-w", root])
    assert r.exit_code == 2 and "--format" in r.output


def test_config_check_and_tasks_validate_print_json(workspace: WorkspaceContext, tmp_path: Path) -> None:
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["config", "check", str(workspace.ws.harness_configs_dir / "default.yaml"), "--json",
                            "-w", root])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["ok"] is True and got["name"] and len(got["digest"]) == 64
    make_task(tmp_path / "tasks", "t1")
    make_task(tmp_path / "tasks", "t2", solve=None)
    r = runner.invoke(app, ["tasks", "validate", str(tmp_path / "tasks"), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["valid"] == 2 and [t["has_solution"] for t in got["tasks"]] == [True, False]


def test_tasks_show_takes_the_name_tasks_list_prints(workspace: WorkspaceContext, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = workspace.ws.root
    make_task(root / "tasks", "dir-name", toml=None)
    listed = json.loads(runner.invoke(app, ["-w", str(root), "tasks", "list", "--json"]).stdout)
    assert [t["name"] for t in listed] == ["dir-name"]
    monkeypatch.chdir(tmp_path)  # elsewhere: names and relative paths resolve against -w, not here
    for given in ("dir-name", "tasks/dir-name"):
        r = runner.invoke(app, ["tasks", "show", given, "--json", "-w", str(root)])
        assert r.exit_code == 0, (given, r.output)
        assert json.loads(r.stdout)["name"] == "dir-name"
    # a task whose name is not its directory's
    toml = (root / "tasks" / "dir-name" / "task.toml").read_text().replace('name = "dir-name"', 'name = "other"')
    make_task(root / "tasks", "elsewhere", toml=toml)
    r = runner.invoke(app, ["-w", str(root), "tasks", "show", "other", "--json"])
    assert r.exit_code == 0, r.output
    assert Path(json.loads(r.stdout)["path"]).name == "elsewhere"
    r = runner.invoke(app, ["-w", str(root), "tasks", "show", "nosuch"])
    assert r.exit_code == 2 and "nosuch" in r.output


def test_a_failed_init_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "ws"
    r = runner.invoke(app, ["init", str(target), "--harness", "nosuch"])
    assert r.exit_code == 2 and "--harness" in r.output
    assert not target.exists()
    target.mkdir()
    (target / "mine.txt").write_text("keep")
    r = runner.invoke(app, ["-w", str(target), "init", "--harness", "nosuch", "--no-tasks"])
    assert r.exit_code == 2
    assert [p.name for p in target.iterdir()] == ["mine.txt"]
    r = runner.invoke(app, ["init", "--no-tasks", "--json", "-w", str(target)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["generation"]["id"] == "gen-0000" and (target / "rsi.yaml").is_file()
