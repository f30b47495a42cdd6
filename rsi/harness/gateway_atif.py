"""A trial's trajectory (ATIF) built from its recording gateway's calls, and nothing else.

For an external harness the gateway's records are the truth of what the model saw and said: each call's request
messages, sampling, the exact prompt and completion token ids, log-probs, served model and adapter. The trajectory
is a view of those records:

- the head (system + first user message) is the first call's request messages;
- each call is one agent step: its message is the answer's text, its `extra` holds the call's token ids and
  log-probs (what `rsi update` trains on, unchanged), sampling, served model/adapter and the gateway's verdict;
- a step's observation is what the harness sent next: the messages the next call's request adds after this call's
  answer (for the last call, the harness's own final messages, where the runner gives them);
- `extra.rsi.messages` is that conversation flattened (head, then each answer and what followed it), one assistant
  message per answered call, so a dataset line pairs turn k with call k's ids. Whether each answer was in the next
  call's prompt is recorded (`in_next_prompt`): mini-swe-agent leaves a malformed answer out of its history.
"""

from __future__ import annotations

from typing import Any

from rsi.harness.atif import Metrics, ObservationResult, TrajectoryRecorder
from rsi.models.gateway import GatewayCall

SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed")


def _answer(call: GatewayCall) -> dict[str, Any]:
    choice = ((call.response or {}).get("choices") or [{}])[0]
    return dict(choice.get("message") or {})


def _plain(m: dict[str, Any]) -> dict[str, Any]:
    """A message as training and the viewer need it: role, content (+ tool fields where set)."""
    out: dict[str, Any] = {"role": m.get("role"), "content": m.get("content")}
    for k in ("tool_calls", "tool_call_id", "name"):
        if m.get(k):
            out[k] = m[k]
    return out


def _content(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, list):  # multimodal parts: the text parts
        return "".join(str(p.get("text") or "") for p in c if isinstance(p, dict))
    return str(c or "")


def _key(m: dict[str, Any]) -> tuple[str, str]:
    return str(m.get("role")), _content(m)


def _follow(call: GatewayCall, nxt: list[dict[str, Any]] | None) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the answer of `call` is in the next prompt, and the messages the harness added after it."""
    if nxt is None:
        return False, []
    sent = list(call.request.get("messages") or [])
    if [_key(m) for m in nxt[: len(sent)]] != [_key(m) for m in sent]:  # the harness rewrote its history
        return False, nxt
    rest = nxt[len(sent):]
    answer = _answer(call)
    if rest and rest[0].get("role") == "assistant" and _content(rest[0]) == _content(answer):
        return True, rest[1:]
    return False, rest


def sampling_of(call: GatewayCall) -> dict[str, Any]:
    """The sampling the endpoint got: the harness's fields with the gateway's changes applied."""
    merged = {**call.request, **(call.forwarded or {})}
    return {k: merged[k] for k in SAMPLING_KEYS if merged.get(k) is not None}


def trajectory_from_calls(
    calls: list[GatewayCall],
    *,
    session_id: str,
    agent_name: str,
    agent_version: str,
    model_name: str,
    final_messages: list[dict[str, Any]] | None,
    instruction: str,
) -> tuple[TrajectoryRecorder, list[dict[str, Any]]]:
    """The recorder (steps added, not finished) and the flattened conversation."""
    rec = TrajectoryRecorder(session_id=session_id, agent_name=agent_name, model_name=model_name,
                             agent_extra={"recorded_by": "rsi-gateway"})
    rec.trajectory.agent.version = agent_version  # the external program's version, not rsi's
    answered = [c for c in calls if c.ok]
    first = calls[0].request.get("messages") if calls else None
    head: list[dict[str, Any]] = [_plain(m) for m in first or [{"role": "user", "content": instruction}]]
    for m in head:
        rec.add("system" if m["role"] == "system" else "user", _content(m))
    flat = list(head)
    requests = [list(c.request.get("messages") or []) for c in calls]
    for i, call in enumerate(calls):
        nxt = requests[i + 1] if i + 1 < len(calls) else final_messages
        extra: dict[str, Any] = {
            "turn": answered.index(call) + 1 if call.ok else None,
            "gateway": {"index": call.index, "status": call.status, "refused": call.refused,
                        "clamped": call.clamped or None, "sampling": sampling_of(call),
                        "served_model": call.served_model, "adapter_sha256": call.adapter_sha256,
                        "adapter_check": call.adapter_check, "upstream_sec": call.upstream_sec,
                        "gateway_sec": call.gateway_sec, "prompt_messages": len(call.request.get("messages") or [])},
        }
        if not call.ok:
            why = call.refused or f"HTTP {call.status} from the model endpoint"
            rec.add_agent(message="", model_name=call.pinned_model, extra=extra,
                          results=[ObservationResult(content=why, extra={"gateway_error": True})]).timestamp = call.at
            continue
        answer = _answer(call)
        in_next, added = _follow(call, nxt)
        extra["gateway"]["in_next_prompt"] = in_next
        extra.update(finish_reason=((call.response or {}).get("choices") or [{}])[0].get("finish_reason"),
                     prompt_token_ids=call.prompt_token_ids, completion_token_ids=call.completion_token_ids,
                     logprobs=call.logprobs)
        results = [ObservationResult(content=_content(m), extra={"role": m.get("role")}) for m in added]
        rec.add_agent(message=_content(answer), model_name=call.served_model or call.pinned_model,
                      metrics=Metrics(prompt_tokens=call.usage.prompt_tokens,
                                      completion_tokens=call.usage.completion_tokens,
                                      cached_tokens=call.usage.cached_tokens),
                      results=results or None, extra=extra).timestamp = call.at  # when the gateway saw the call
        flat.append(_plain({**answer, "role": "assistant"}))
        flat.extend(_plain(m) for m in added)
    return rec, flat


__all__ = ["sampling_of", "trajectory_from_calls"]
