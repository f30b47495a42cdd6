"""ATIF trajectory models: the rules Harbor's validator enforces, and the terminal view."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console

from rsi.harness.atif import (
    Metrics,
    ObservationResult,
    ToolCall,
    Trajectory,
    TrajectoryRecorder,
    load_trajectory,
)
from rsi.report.trajectory import render_trajectory


def _recorded(tmp_path: Path) -> Path:
    rec = TrajectoryRecorder(session_id="s1", model_name="m-g1-abcd1234")
    rec.add("system", "be brief")
    rec.add("user", "make hello.txt")
    rec.add_agent(
        message="```bash\necho hi\n```",
        tool_calls=[ToolCall(tool_call_id="c1", function_name="bash", arguments={"command": "echo hi"})],
        results=[ObservationResult(source_call_id="c1", content="hi\n[exit code 0]")],
        metrics=Metrics(prompt_tokens=12, completion_tokens=4, cached_tokens=8),
    )
    rec.rsi_extra.update(task="hello", harness_config_digest="ab" * 32, harness_config_name="default")
    rec.finish(prompt_tokens=12, completion_tokens=4, cached_tokens=8)
    return rec.write(tmp_path / "trajectory.json")


def test_round_trip_and_harbor_field_names(tmp_path: Path) -> None:
    path = _recorded(tmp_path)
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == "ATIF-v1.7"
    assert set(raw) >= {"schema_version", "session_id", "agent", "steps", "final_metrics", "extra"}
    assert raw["agent"]["name"] and raw["agent"]["version"]
    step = raw["steps"][2]
    assert step["timestamp"].endswith("Z")
    assert step["tool_calls"][0] == {
        "tool_call_id": "c1",
        "function_name": "bash",
        "arguments": {"command": "echo hi"},
    }
    assert step["observation"] == {"results": [{"source_call_id": "c1", "content": "hi\n[exit code 0]"}]}
    assert raw["final_metrics"]["total_cached_tokens"] == 8
    assert load_trajectory(path).rsi["task"] == "hello"


def test_rejects_steps_out_of_order() -> None:
    with pytest.raises(ValidationError, match="step_id"):
        Trajectory.model_validate(
            {
                "agent": {"name": "a", "version": "1"},
                "steps": [{"step_id": 2, "source": "user", "message": "x"}],
            }
        )


def test_rejects_agent_fields_on_user_steps_and_dangling_call_ids() -> None:
    with pytest.raises(ValidationError, match="only allowed on agent steps"):
        Trajectory.model_validate(
            {
                "agent": {"name": "a", "version": "1"},
                "steps": [{"step_id": 1, "source": "user", "message": "x", "metrics": {"prompt_tokens": 1}}],
            }
        )
    with pytest.raises(ValidationError, match="names no tool call"):
        Trajectory.model_validate(
            {
                "agent": {"name": "a", "version": "1"},
                "steps": [
                    {
                        "step_id": 1,
                        "source": "agent",
                        "message": "",
                        "observation": {"results": [{"source_call_id": "ghost", "content": "x"}]},
                    }
                ],
            }
        )
    with pytest.raises(ValidationError, match="ISO 8601"):
        Trajectory.model_validate(
            {
                "agent": {"name": "a", "version": "1"},
                "steps": [{"step_id": 1, "source": "user", "message": "x", "timestamp": "yesterday"}],
            }
        )


def test_loads_a_harbor_style_file_with_unknown_fields() -> None:
    t = Trajectory.model_validate(
        {
            "schema_version": "ATIF-v1.7",
            "session_id": "s",
            "agent": {"name": "terminus-2", "version": "2.0.0"},
            "steps": [
                {
                    "step_id": 1,
                    "source": "agent",
                    "message": "hi",
                    "reasoning_effort": "low",
                    "metrics": {"prompt_tokens": 3, "logprobs": [-0.1]},
                }
            ],
            "subagent_trajectories": [],
        }
    )
    assert t.rsi == {} and t.steps[0].metrics.prompt_tokens == 3


def test_render_shows_header_steps_calls_and_observations(tmp_path: Path) -> None:
    buf = io.StringIO()
    render_trajectory(_recorded(tmp_path), Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    for expected in (
        "hello",
        "m-g1-abcd1234",
        "default @ abababababab",
        "prompt 12, completion 4, cached 8",
        "3 · agent",
        "bash: echo hi",
        "← c1",
        "[exit code 0]",
        "be brief",
    ):
        assert expected in text, expected
