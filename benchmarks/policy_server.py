"""A deterministic OpenAI-compatible policy server (a benchmark fixture, not the product).

It solves a task only when the harness config it is driven by has the values the task requires,
read from the request itself: `temperature` (the request's), `turns` (from "You have N turns" in
the system prompt), `variant` ("B" when the system prompt says `Variant B`, else "A") and
`few_shot` (whether a few-shot example, marked EXAMPLE, is in the messages). A task is named by
"Task <name>:" in the last user message that has one (demonstrations of other tasks come before
it); its rule is a dict of those keys (empty: any config solves it; None: nothing does). Solving =
writing `ok` to /app/out.txt (the taskgen tasks' check); otherwise it writes `no`. After one
command it answers DONE. Used by benchmarks/search_efficiency.py
and the expand tests.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

R = "${SANDBOX_ROOT:-}"
SOLVE = f'```bash\necho ok > "{R}/app/out.txt"\n```'
FAIL = f'```bash\necho no > "{R}/app/out.txt"\n```'
_TASK = re.compile(r"Task (\S+?):")
_TURNS = re.compile(r"You have (\d+) turns")

Rule = dict[str, Any] | None


def seen_config(body: dict[str, Any]) -> dict[str, Any]:
    msgs = body.get("messages", [])
    system = next((str(m.get("content") or "") for m in msgs if m.get("role") == "system"), "")
    turns = _TURNS.search(system)
    return {"temperature": round(float(body.get("temperature", 0.0)), 3),
            "turns": int(turns.group(1)) if turns else None,
            "variant": "B" if "Variant B" in system else "A",
            "few_shot": any("EXAMPLE" in str(m.get("content") or "") for m in msgs)}


def satisfied(rule: Rule, cfg: dict[str, Any]) -> bool:
    return rule is not None and all(cfg.get(k) == v for k, v in rule.items())


@dataclass
class Policy:
    rules: dict[str, Rule]
    faults: list[int] = field(default_factory=list)  # HTTP status to answer the next calls with (popped)
    stalls: int = 0  # the next calls answer only after `stall_sec` (past a client's timeout: a hung endpoint)
    stall_sec: float = 0.0
    on_call: Callable[[int, dict[str, Any]], None] | None = None  # a test's hook (e.g. kill a container)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> tuple[int, str]:
        with self.lock:
            self.calls += 1
            if self.faults:
                return self.faults.pop(0), ""
            stall = self.stalls > 0
            self.stalls -= stall
            n = self.calls
        if stall:
            time.sleep(self.stall_sec)
        if self.on_call is not None:
            self.on_call(n, body)
        msgs = body.get("messages", [])
        last = str(msgs[-1].get("content") or "") if msgs else ""
        if "[exit code" in last:
            return 200, "DONE"
        users = [str(m.get("content") or "") for m in msgs if m.get("role") == "user" and "EXAMPLE" not in
                 str(m.get("content") or "")]
        # the task's own instruction is the last user message that names one (few-shot demonstrations,
        # drawn from other tasks' trajectories, come before it)
        name = next((m.group(1) for u in reversed(users) if (m := _TASK.search(u))), None)
        ok = name is not None and satisfied(self.rules.get(name), seen_config(body))
        return 200, SOLVE if ok else FAIL


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200, {"object": "list", "data": [{"id": "policy", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        status, content = self.server.policy.answer(body)
        if status != 200:
            self._send(status, {"error": {"message": f"injected fault {status}"}})
            return
        self._send(200, {"id": "cmpl-policy", "object": "chat.completion", "model": body.get("model", "policy"),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}],
                         "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    policy: Policy


@contextmanager
def serve(policy: Policy) -> Iterator[str]:
    """Run the server on a free localhost port; yield its /v1 base URL."""
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.policy = policy
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


CONFIG = """schema_version: 1
name: policy
contract: ">=1.0,<2.0"
model:
  endpoint: {endpoint}
  request_timeout_sec: 10
action_format: text
tools: [bash, submit]
prompt:
  system: "Variant A. Reply with one bash block. You have {{{{ max_turns }}}} turns."
  instruction: "{{{{ instruction }}}}"
  few_shot:
    - role: user
      content: "EXAMPLE: say hi"
    - role: assistant
      content: "DONE"
sampling:
  temperature: 0.7
  max_tokens: 64
loop:
  max_turns: 5
search_space:
  sampling.temperature: [0.2, 0.7, 1.0]
  loop.max_turns: [3, 5, 8]
  prompt.system:
    - "Variant A. Reply with one bash block. You have {{{{ max_turns }}}} turns."
    - "Variant B. Reply with one bash block. You have {{{{ max_turns }}}} turns."
  prompt.few_shot:
    - []
"""

# Requirements a task may have (each one candidate of CONFIG's search_space fixes it).
FIXES: list[dict[str, Any]] = [{"temperature": 0.2}, {"temperature": 1.0}, {"turns": 3}, {"turns": 8},
                               {"variant": "B"}, {"few_shot": False}]
BASE: dict[str, Any] = {"temperature": 0.7, "turns": 5, "variant": "A", "few_shot": True}


def rule_for(fix: dict[str, Any]) -> dict[str, Any]:
    """The full rule: the base's values with `fix` applied (so only that candidate solves it)."""
    return {**BASE, **fix}
