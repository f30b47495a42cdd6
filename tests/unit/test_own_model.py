"""Your own model: `rsi init --model/--endpoint/--api-key-env` writes gen-0000 for an OpenAI-compatible endpoint
(and refuses bad values with one line naming the option, leaving nothing behind); `rsi run --model/--endpoint`
point one job's arms elsewhere, stored by digest so a resumed job keeps them; a request names the pinned model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.errors import InputError
from rsi.core.harness_config import HarnessConfig, check_endpoint
from rsi.harness.agent import AgentContext
from rsi.harness.agent_loop import _model_name
from rsi.loop.arms import override_model, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.store.files import load_harness_config

runner = CliRunner()
URL = "http://gpu-box:8000/v1"


def test_init_points_gen0_at_your_endpoint_and_keeps_the_configs_comments(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    r = runner.invoke(app, ["init", str(root), "--no-tasks", "--model", "Qwen/Qwen2.5-7B-Instruct",
                            "--endpoint", URL + "/", "--api-key-env", "VLLM_API_KEY", "--json"])
    assert r.exit_code == 0, r.output
    gen = json.loads(r.stdout)["generation"]
    assert gen["base_model"] == {"id": "Qwen/Qwen2.5-7B-Instruct", "digest": None}
    text = (root / "harness_configs" / "default.yaml").read_text()
    cfg = load_harness_config(root / "harness_configs" / "default.yaml")
    assert (cfg.model.endpoint, cfg.model.api_key_env, cfg.model.name) == (URL, "VLLM_API_KEY", None)
    assert "# The production harness" in text  # edited in place, not re-dumped
    assert "sk-" not in text and "VLLM_API_KEY" in text  # the variable's name, never a key
    assert yaml.safe_load((root / "rsi.yaml").read_text())["base_model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert gen["harness_config"]["digest"] == cfg.digest()
    # the other bundled configs keep the embedded model
    assert load_harness_config(root / "harness_configs" / "mini-swe.yaml").model.endpoint == "embedded"


def test_init_with_an_external_harness_points_that_config(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    r = runner.invoke(app, ["init", str(root), "--no-tasks", "--harness", "mini-swe", "--endpoint", URL])
    assert r.exit_code == 0, r.output
    assert load_harness_config(root / "harness_configs" / "mini-swe.yaml").model.endpoint == URL
    assert load_harness_config(root / "harness_configs" / "default.yaml").model.endpoint == "embedded"
    # --endpoint alone: the base model keeps its name (a server of the same model elsewhere)
    assert yaml.safe_load((root / "rsi.yaml").read_text())["base_model"] == "SmolLM2-135M-Instruct"


@pytest.mark.parametrize(("args", "needle"), [
    (["--model", "x"], "--model: needs --endpoint"),
    (["--api-key-env", "K"], "--api-key-env: needs --endpoint"),
    (["--endpoint", "localhost:8000"], "--endpoint: 'localhost:8000' is not"),
    (["--endpoint", "ftp://h/v1"], "--endpoint"),
    (["--endpoint", URL, "--api-key-env", "1-bad"], "--api-key-env: '1-bad' is not"),
    (["--endpoint", URL, "--model", "  "], "--model: must name"),
])
def test_bad_own_model_options_are_one_line_and_leave_nothing(tmp_path: Path, args: list[str], needle: str) -> None:
    root = tmp_path / "ws"
    r = runner.invoke(app, ["init", str(root), "--no-tasks", *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not root.exists()


def test_an_existing_workspace_is_not_repointed_by_init(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    assert runner.invoke(app, ["init", str(root), "--no-tasks"]).exit_code == 0
    before = (root / "harness_configs" / "default.yaml").read_text()
    r = runner.invoke(app, ["init", str(root), "--no-tasks", "--endpoint", URL])
    assert r.exit_code == 2 and "model.endpoint" in r.output
    assert (root / "harness_configs" / "default.yaml").read_text() == before


def test_a_config_endpoint_must_be_a_url() -> None:
    assert check_endpoint("embedded") == "embedded"
    assert check_endpoint("https://api.example.com/v1/") == "https://api.example.com/v1"
    raw = load_harness_config(Path(__file__).resolve().parents[2] / "harness_configs" / "default.yaml")
    data = raw.model_dump(mode="json", exclude_none=True)
    data["model"]["endpoint"] = "127.0.0.1:8000"
    with pytest.raises(ValueError, match="model.endpoint"):
        HarnessConfig.model_validate(data)


def test_run_model_and_endpoint_make_new_arms_by_digest(workspace: WorkspaceContext) -> None:
    plans = resolve_arms(workspace, "harness", [], [])
    pinned = override_model(workspace, plans, "served-name", URL)
    (p,) = pinned
    assert p.config is not None and (p.config.model.name, p.config.model.endpoint) == ("served-name", URL)
    assert p.arm.config_digest != plans[0].arm.config_digest and p.arm.config_digest == p.config.digest()
    # stored: a resumed job loads the same config back by digest
    assert workspace.config_by_digest(p.arm.config_digest).model.name == "served-name"
    assert override_model(workspace, plans, None, None) == plans
    with pytest.raises(InputError, match="--endpoint"):
        override_model(workspace, plans, None, "not a url")
    with pytest.raises(InputError, match="calls no model"):
        override_model(workspace, resolve_arms(workspace, "oracle", [], []), "m", None)


def test_a_request_names_the_pinned_model_else_the_generations(workspace: WorkspaceContext) -> None:
    gen = workspace.generation(None)
    cfg = workspace.harness_config_for(gen)
    ctx = AgentContext.__new__(AgentContext)
    ctx.generation, ctx.harness_config = gen, cfg
    assert _model_name(ctx) == gen.serve_name() == "SmolLM2-135M-Instruct"
    ctx.harness_config = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": "pinned"})})
    assert _model_name(ctx) == "pinned"


def test_run_refuses_model_options_for_an_agent_without_a_model(workspace: WorkspaceContext, tmp_path: Path) -> None:
    r = runner.invoke(app, ["-w", str(workspace.ws.root), "run", str(tmp_path), "--agent", "oracle",
                            "--model", "m"])
    assert r.exit_code == 2 and "--model" in r.output, r.output


def test_run_paths_are_names_or_paths_resolved_against_the_workspace(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    from rsi.cli.tasks import resolve_path

    root = tmp_path / "ws"
    assert runner.invoke(app, ["init", str(root)]).exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tasks").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    ctx = click.Context(click.Command("rsi"), obj={"workspace": root})
    assert resolve_path(ctx, Path("tasks")) == root / "tasks"  # -w given: the workspace's tasks/, not cwd's
    assert resolve_path(ctx, Path("append-line")) == root / "tasks" / "append-line"  # a name from `tasks list`
    assert resolve_path(ctx, tmp_path) == tmp_path
    plain = click.Context(click.Command("rsi"), obj={})
    monkeypatch.chdir(root)
    assert resolve_path(plain, Path("tasks")).resolve() == (root / "tasks").resolve()
