"""The training dataset (DESIGN §4.6) and its exporters.

`dataset.jsonl` holds one trajectory per line: OpenAI chat `messages` + `tools`, `reward`,
`accepted`, `group_id` + `sample_index`, `advantage`, `prompt_messages` (how many leading messages
are the harness's head — system, few-shot, instruction — and so never trained on), `provenance`
(generation, harness config digest, task digest, template, trial, job; `replay` for an accepted trajectory of
an earlier generation mixed in) and, where the server gave them, `tokens`: per policy turn the prompt and
completion token ids and the sampling logprobs, exactly as served. `validation: true` marks an accepted
trajectory of a validation template: a backend measures it and never trains on it (nor do the exports).
`manifest.json` beside it has the counts and the dataset's digest (sha256 of the JSONL bytes).

Exporters: OpenAI fine-tune JSONL (accepted trajectories; head assistant messages carry
`weight: 0`, tool-call arguments as JSON text) and a TRL conversational dataset (accepted
trajectories; `messages` + `tools`, tool-call arguments as dicts, as TRL's chat templates want them).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATASET = "dataset.jsonl"
MANIFEST = "manifest.json"
OPENAI_EXPORT = "openai_finetune.jsonl"
TRL_EXPORT = "trl_sft.jsonl"


@dataclass
class DatasetLine:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reward: float
    accepted: bool
    group_id: str
    sample_index: int
    advantage: float
    prompt_messages: int
    provenance: dict[str, Any]
    tokens: list[dict[str, Any]] | None = None
    validation: bool = False  # held out of training: only measured (the early-stopping curve)
    # who chose the actions (DESIGN §12): `self` keeps the group-advantage path; `hinted:<level>` and `oracle`
    # are SFT only (their actions were chosen in another context: no advantage, no tokens, no ratio)
    source: str = "self"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "messages": self.messages,
            "tools": self.tools,
            "reward": self.reward,
            "accepted": self.accepted,
            "group_id": self.group_id,
            "sample_index": self.sample_index,
            "advantage": self.advantage,
            "prompt_messages": self.prompt_messages,
            "provenance": self.provenance,
            "source": self.source,
        }
        if self.tokens is not None:
            out["tokens"] = self.tokens
        if self.validation:
            out["validation"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DatasetLine:
        return cls(
            messages=list(d["messages"]), tools=list(d.get("tools") or []), reward=float(d["reward"]),
            accepted=bool(d["accepted"]), group_id=str(d["group_id"]), sample_index=int(d["sample_index"]),
            advantage=float(d["advantage"]), prompt_messages=int(d["prompt_messages"]),
            provenance=dict(d.get("provenance") or {}), tokens=d.get("tokens"),
            validation=bool(d.get("validation", False)), source=str(d.get("source", "self")),
        )


@dataclass
class DatasetInfo:
    path: Path
    digest: str
    counts: dict[str, Any] = field(default_factory=dict)


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(x, sort_keys=True, ensure_ascii=False) + "\n" for x in lines).encode()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_dataset(out_dir: Path, lines: list[DatasetLine], counts: dict[str, Any]) -> DatasetInfo:
    """Write dataset.jsonl + manifest.json (+ both exports); the digest is over the JSONL bytes."""
    data = _jsonl([ln.as_json() for ln in lines])
    digest = hashlib.sha256(data).hexdigest()
    path = out_dir / DATASET
    _write(path, data)
    accepted = [ln for ln in lines if ln.accepted and not ln.validation]
    _write(out_dir / OPENAI_EXPORT, _jsonl([openai_line(ln) for ln in accepted]))
    _write(out_dir / TRL_EXPORT, _jsonl([trl_line(ln) for ln in accepted]))
    full = {
        "trajectories": len(lines),
        "accepted": len(accepted),
        "validation": sum(1 for ln in lines if ln.validation),
        "replay": sum(1 for ln in lines if ln.provenance.get("replay")),
        "with_tokens": sum(1 for ln in lines if ln.tokens),
        "groups": len({ln.group_id for ln in lines}),
        **sample_counts(accepted),
        **counts,
    }
    manifest = {"dataset": DATASET, "digest": digest, "counts": full,
                "exports": {"openai": OPENAI_EXPORT, "trl": TRL_EXPORT}}
    _write(out_dir / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return DatasetInfo(path=path, digest=digest, counts=full)


def sample_counts(lines: list[DatasetLine]) -> dict[str, dict[str, int]]:
    """Samples per source (`self`, `hinted:<n>`, `oracle`), per template and per family (`update --dry-run`, the
    update summary and the report show them)."""
    out: dict[str, dict[str, int]] = {"by_source": {}, "by_template": {}, "by_family": {}}
    for ln in lines:
        tpl = str(ln.provenance.get("template") or f"task:{ln.provenance.get('task')}")
        family = tpl.split("/", 1)[0] if "/" in tpl else "misc"
        for key, val in (("by_source", ln.source), ("by_template", tpl), ("by_family", family)):
            out[key][val] = out[key].get(val, 0) + 1
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def read_dataset(path: Path) -> list[DatasetLine]:
    return [DatasetLine.from_json(json.loads(t)) for t in path.read_text().splitlines() if t.strip()]


def _arguments_dict(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


def _arguments_text(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)


def openai_line(ln: DatasetLine) -> dict[str, Any]:
    """OpenAI chat fine-tuning format: only the policy's own assistant turns carry weight 1."""
    msgs: list[dict[str, Any]] = []
    for i, m in enumerate(ln.messages):
        out: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
        if m["role"] == "assistant":
            if m.get("tool_calls"):
                out["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["function"]["name"],
                                  "arguments": _arguments_text(c["function"]["arguments"])}}
                    for c in m["tool_calls"]
                ]
            out["weight"] = 0 if i < ln.prompt_messages else 1
        if m["role"] == "tool":
            out["tool_call_id"] = m.get("tool_call_id")
        if out.get("content") is None and m["role"] != "assistant":
            out["content"] = ""
        msgs.append(out)
    line: dict[str, Any] = {"messages": msgs}
    if ln.tools:
        line["tools"] = ln.tools
    return line


def trl_line(ln: DatasetLine) -> dict[str, Any]:
    """TRL's conversational format: `messages` (tool-call arguments as dicts) and `tools`."""
    msgs = copy.deepcopy(ln.messages)
    for m in msgs:
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = _arguments_dict(c["function"]["arguments"])
        if m.get("content") is None:
            m["content"] = ""
    return {"messages": msgs, "tools": ln.tools}


__all__ = ["sample_counts", "DATASET", "MANIFEST", "OPENAI_EXPORT", "TRL_EXPORT", "DatasetInfo", "DatasetLine",
           "openai_line", "read_dataset", "trl_line", "write_dataset"]
