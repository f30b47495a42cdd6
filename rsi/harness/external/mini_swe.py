"""mini-swe-agent (https://mini-swe-agent.com, PyPI `mini-swe-agent`) as an external harness.

Where it runs, and why: the program runs *unmodified* on the host, in the trial's worker, through its own Python
API — its `DefaultAgent` (the loop: templates, step limit, format errors, submission), its own model class
(`litellm_textbased` or `litellm`, from its config) pointed at the trial's gateway — with one piece rsi supplies
through mini-swe-agent's documented extension point, the *environment*: `SandboxEnvironment` runs each command in
the trial's sandbox with rsi's sandbox interface. So:
- the container stays the task's own image (no Python, litellm or network needed inside it; an offline install
  into arbitrary task images is not needed at all), and the verifier, integrity levels and tamper checks see
  exactly what a built-in trial's do;
- the limits are enforced by rsi where the program cannot loosen them: each command's timeout is capped by the
  effective `command_timeout_sec` and the remaining agent time, output is cut to the contract's
  `observation_max_chars`, and the gateway caps tokens, turns and time (rsi.harness.external.base);
- the program is installed on the host from the `rsi[external]` extra (setup time), so trials run offline.

mini-swe-agent's config file is the harness's prompt surface: `agent.system_template`, `agent.instance_template`,
`agent.step_limit`, `model.model_kwargs` (sampling), `model.observation_template`, `model.action_regex`, ... rsi sets
only the model's name/base URL/key (the gateway session) and the environment.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from typing import Any

from rsi.harness.actions import truncate_middle
from rsi.harness.external.runner import RUNNERS, ExternalResult, ExternalRun
from rsi.sandbox.base import Sandbox

SUBMIT_WORD = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _quiet_imports() -> None:
    """mini-swe-agent prints a banner and reads a global .env on import; litellm fetches a price map from the
    network. None of that belongs in a trial: quiet, local, and no retries behind the gateway's back."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "rsi-mini-swe-agent"))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
    # one attempt per call: an endpoint failure is the trial runner's to retry (as infra), not the program's
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")


class SandboxEnvironment:
    """mini-swe-agent's Environment protocol (execute / get_template_vars / serialize) over an rsi sandbox."""

    def __init__(self, sandbox: Sandbox, *, workdir: str, command_timeout: float, deadline: float,
                 observation_max_chars: int, env: dict[str, str] | None = None, timeout: float | None = None,
                 cwd: str = "") -> None:
        self.sandbox = sandbox
        self.workdir = cwd or workdir
        self.command_timeout = command_timeout
        self.deadline = deadline
        self.observation_max_chars = observation_max_chars
        self.env = dict(env or {})
        self.config_timeout = timeout
        self.commands = 0
        self.config = {"cwd": self.workdir, "env": self.env, "timeout": self.timeout()}

    def timeout(self) -> float:
        """The effective command timeout: the program's own (if set), capped by rsi's and the time left."""
        t = self.command_timeout if self.config_timeout is None else min(self.command_timeout, self.config_timeout)
        return max(0.0, min(t, self.deadline - time.monotonic()))

    def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted, TimeExceeded

        command = str(action.get("command", ""))
        limit = self.timeout() if timeout is None else min(float(timeout), self.timeout())
        if limit <= 0:
            raise TimeExceeded({"role": "exit", "content": "TimeExceeded",
                                "extra": {"exit_status": "TimeExceeded", "submission": ""}})
        self.commands += 1
        res = self.sandbox.exec(command, timeout=limit, workdir=cwd or self.workdir, env=self.env or None)
        text = res.stdout + (res.stderr if res.stderr else "")
        output: dict[str, Any] = {"output": truncate_middle(text, self.observation_max_chars),
                                  "returncode": res.exit_code, "exception_info": ""}
        if res.timed_out:
            output["returncode"] = -1
            output["exception_info"] = f"The command timed out after {limit:g} seconds and was killed."
        lines = text.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_WORD and res.exit_code == 0 and not res.timed_out:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"cwd": self.workdir, "timeout": self.timeout(), "system": "Linux", "release": "", "version": "",
                "machine": "x86_64", **self.env, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": {"cwd": self.workdir, "env": self.env,
                                                    "timeout": self.config_timeout},
                                    "environment_type": "rsi.harness.external.mini_swe.SandboxEnvironment"}}}


class MiniSweAgentRunner:
    program = "mini-swe-agent"

    def run(self, run: ExternalRun) -> ExternalResult:
        _quiet_imports()
        import litellm
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.models import get_model

        litellm.suppress_debug_info = True  # its "Provider List" banner on every cost lookup

        cfg = copy.deepcopy(run.harness.config)
        lim = run.limits
        model_cfg = dict(cfg.get("model") or {})
        model_cfg.setdefault("model_class", "litellm_textbased")
        # the gateway session: litellm's `openai/` provider sends `model=<serve name>` to `api_base`
        model_cfg["model_name"] = f"openai/{run.model}"
        kwargs = dict(model_cfg.get("model_kwargs") or {})
        kwargs.update(api_base=run.base_url, api_key=run.api_key,
                      timeout=max(1.0, run.deadline - time.monotonic()))
        model_cfg["model_kwargs"] = kwargs
        model_cfg.setdefault("cost_tracking", "ignore_errors")
        model = get_model(config=model_cfg)

        env_cfg = dict(cfg.get("environment") or {})
        env = SandboxEnvironment(run.sandbox, workdir=run.workdir, command_timeout=lim.command_timeout_sec,
                                 deadline=run.deadline, observation_max_chars=lim.observation_max_chars,
                                 env={str(k): str(v) for k, v in (env_cfg.get("env") or {}).items()},
                                 timeout=float(env_cfg["timeout"]) if env_cfg.get("timeout") else None,
                                 cwd=str(env_cfg.get("cwd") or ""))
        agent_cfg = dict(cfg.get("agent") or {})
        # the effective limits, never looser than the program's own (the config check refused looser ones)
        steps = int(agent_cfg.get("step_limit") or 0)
        agent_cfg["step_limit"] = min(steps, lim.max_turns) if steps > 0 else lim.max_turns
        wall = int(agent_cfg.get("wall_time_limit_seconds") or 0)
        agent_cfg["wall_time_limit_seconds"] = min(wall, int(lim.agent_timeout_sec)) if wall > 0 \
            else int(lim.agent_timeout_sec)
        agent_cfg["output_path"] = run.ctx.trial_dir / "mini-swe-agent.traj.json"
        agent = DefaultAgent(model, env, **agent_cfg)
        info = agent.run(task=run.ctx.task.instruction)
        final = [{k: v for k, v in m.items() if k != "extra"} for m in agent.messages if m.get("role") != "exit"]
        return ExternalResult(exit_status=str(info.get("exit_status") or ""), final_messages=final,
                              extra={"commands": env.commands, "n_calls": agent.n_calls,
                                     "submission": str(info.get("submission") or "")[:2000]})


RUNNERS.add("mini-swe-agent", MiniSweAgentRunner)
