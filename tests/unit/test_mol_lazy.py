"""Lazy MoL summaries (issue 41): a summary is computed only when another adapter's view shows the turn, never
before the turn's answer, the same whenever it is computed; action-only turns get a deterministic digest; every
adapter's prompts (route, answer, summary, warm-up) still extend each other byte for byte."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rsi.core.mol import SHORT_ROUTE_QUESTION, MolSpec, route_legend, summary_request
from rsi.harness.fakes import ScriptedChatModel
from rsi.harness.history import CallRecord, TurnEvent, chatml
from rsi.harness.mol import MolInfraError, MolSession, SummarySlot
from rsi.harness.mol_digest import action_digest, touched_files

DOMAINS = {"L0": [], "L1": ["files", "text", "pipeline"], "L2": ["data", "logs"], "L3": ["pyfix"]}
NAMES = {lab: f"{lab.lower()}-serve" for lab in DOMAINS}
REQUEST = summary_request(32)


def _reply(messages: list[dict[str, Any]]) -> str:
    last = str(messages[-1].get("content"))
    if last == REQUEST:
        return f"summary after {len(messages)} messages"
    user = next(str(m["content"]) for m in reversed(messages)
                if m["role"] == "user" and not str(m["content"]).startswith(("Which adapter", SHORT_ROUTE_QUESTION)))
    return "I looked at it: the answer is 3.\nDONE" if "chat" in user else "```bash\nls > out.txt\n```"


def _session(summaries: str = "lazy", finish_word: str | None = None, legend: bool = False) -> MolSession:
    return MolSession(MolSpec(domains=DOMAINS, summary_tokens=32, route_legend=legend), NAMES,
                      [{"role": "system", "content": "sys"}], summaries=summaries,  # type: ignore[arg-type]
                      finish_word=finish_word)


def _turn(s: MolSession, model: ScriptedChatModel, user: str, *, idle: str = "none") -> None:
    """One user turn as a served conversation runs it: route, the chosen adapter's answer turns, the end of
    the turn; then idle-time work (`settle`: summaries; `warm`: summaries and L0's warm-up) or none."""
    s.add_user(user)
    s.route(model)
    res = model.chat(NAMES[s.label], s.messages())
    s.append(TurnEvent(turn=1, author=s.label, format="text", content=res.content,
                       calls=(CallRecord("", "bash", "ls > out.txt", {"command": "ls > out.txt"}),)
                       if "```" in (res.content or "") else (),
                       observations=("(no output)\n[exit code 0]",) if "```" in (res.content or "") else ()))
    res = model.chat(NAMES[s.label], s.messages())  # the finish reply
    s.append(TurnEvent(turn=2, author=s.label, format="text", content="DONE"))
    s.end_turn()
    if idle == "settle":
        s.settle(model)
    elif idle == "warm":
        s.prewarm(model)


def _prompts(model: ScriptedChatModel) -> dict[str, list[tuple[str, str]]]:
    """Every request each serve name got (chat and choice), in order: (kind, ChatML) with kind `main` (route,
    answer), `summary` or `warm` (a one-token warm-up)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in sorted([*model.requests, *model.choice_requests], key=lambda r: r["seq"]):
        kind = ("summary" if r["messages"][-1]["content"] == REQUEST else
                "warm" if r.get("max_tokens") == 1 else "main")
        out.setdefault(r["model"], []).append((kind, chatml(r["messages"])))
    return out


class Model(ScriptedChatModel):
    """A scripted model that numbers chat and choice requests in one sequence."""

    def __init__(self, labels: list[str]) -> None:
        super().__init__([_reply], labels=labels)
        self._n = 0

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
        out = super().chat(model, messages, **kw)
        self._n += 1
        self.requests[-1]["seq"] = self._n
        return out

    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], **kw: Any) -> Any:
        out = super().choose(model, messages, labels, **kw)
        self._n += 1
        self.choice_requests[-1]["seq"] = self._n
        return out


USERS = ["list files", "parse the log", "chat with me", "rename a file", "fix it", "chat again"]
LABELS = ["L1", "L2", "L0", "L1", "L3", "L0"]


@pytest.mark.parametrize("legend", [False, True])
@pytest.mark.parametrize("idle", ["none", "settle", "warm"])
def test_every_adapters_prompts_extend_each_other_byte_for_byte(idle: str, legend: bool) -> None:
    model = Model(LABELS)
    s = _session(legend=legend)
    for u in USERS:
        _turn(s, model, u, idle=idle)
    warmed = 0
    for name, ps in _prompts(model).items():
        # every route or answer prompt starts with the adapter's previous one, byte for byte, and with the
        # warm-up's messages after a warm-up; a warm-up extends the last one; a summary (made when a view first
        # needs it, perhaps turns later) extends the adapter's last prompt of the turn it summarises
        mains: list[str] = [""]
        last_warm = ""
        for kind, text in ps:
            if kind == "summary":
                assert any(text.startswith(m) for m in mains[1:]), f"{name}: a summary branches off no prompt"
                continue
            assert text.startswith(mains[-1]), f"{name}: a {kind} prompt does not extend the previous prompt"
            if kind == "main":
                assert text.startswith(last_warm.removesuffix("<|im_start|>assistant\n")), name
                mains.append(text)
                last_warm = ""
            else:
                last_warm, warmed = text, warmed + 1
        assert sum(k == "main" for k, _ in ps) >= 2, name
    assert (warmed > 0) == (idle == "warm")


def test_a_summary_is_the_same_whenever_it_is_computed() -> None:
    on_demand, idle = Model(LABELS), Model(LABELS)
    a, b = _session(), _session()
    for u in USERS:
        _turn(a, on_demand, u)
        _turn(b, idle, u, idle="settle")
    got_a = [(e.index, e.label, e.text) for e in a.timeline if isinstance(e, SummarySlot)]
    got_b = [(e.index, e.label, e.text) for e in b.timeline if isinstance(e, SummarySlot)]
    # on demand, the last turn's summary is never made (nobody needed it); idle time made it anyway
    assert got_a[:-1] == got_b[:-1] and got_a[-1][2] is None and got_b[-1][2] is not None

    def asked(m: ScriptedChatModel) -> list[str]:
        return sorted(chatml(r["messages"]) for r in m.requests if r["messages"][-1]["content"] == REQUEST)

    assert set(asked(on_demand)) < set(asked(idle))  # the same prompts, one fewer
    assert len(asked(on_demand)) == len(USERS) - 1


def test_no_summary_before_the_answer_and_none_nobody_needs() -> None:
    model = Model(["L1", "L1"])
    s = _session()
    _turn(s, model, "list files")
    assert not [r for r in model.requests if r["messages"][-1]["content"] == REQUEST]  # one turn: none at all
    assert s.as_json()["summaries"] == [{"user_turn": 1, "label": "L1", "text": None, "source": "pending"}]
    _turn(s, model, "rename a file")
    # L0 routes the second message: its view shows L1's first turn, so that summary is made then, after the
    # first turn's answers; L1 answers again with its own turn verbatim; the second turn's stays pending
    kinds = [("summary" if r["messages"][-1]["content"] == REQUEST else "answer", r["seq"]) for r in model.requests]
    first_summary = next(seq for k, seq in kinds if k == "summary")
    assert [k for k, _ in kinds].count("summary") == 1
    assert max(seq for k, seq in kinds[:2] if k == "answer") < first_summary  # after turn 1's answer
    assert [x["source"] for x in s.as_json()["summaries"]] == ["model", "pending"]
    assert s.summary_wait[2] >= 0.0 and [r.hop for r in s.records].count("summary") == 1
    assert [(r.hop, r.user_turn) for r in s.records] == [("route", 1), ("summary", 1), ("route", 2)]


def test_the_owner_never_sees_its_own_summary_and_others_see_it_once_settled() -> None:
    model = Model(["L1"])
    s = _session()
    _turn(s, model, "list files")
    assert not any("summary after" in str(m.get("content")) for m in s.view("L1"))
    with pytest.raises(MolInfraError, match="not settled"):
        s.view("L2")
    s.settle(model, "L2")
    assert {"role": "assistant", "content": "[L1] summary after 6 messages"} in s.view("L2")


def test_an_action_only_turn_gets_the_digest_and_no_summary_call() -> None:
    model = Model(["L1", "L2"])
    s = _session(finish_word="DONE")
    _turn(s, model, "list files")
    _turn(s, model, "parse the log")
    assert not [r for r in model.requests if r["messages"][-1]["content"] == REQUEST]
    slot = next(e for e in s.timeline if isinstance(e, SummarySlot))
    assert slot.source == "digest" and slot.text == "Ran 1 command(s): `ls > out.txt` (exit 0). Files touched: out.txt."
    assert {"role": "assistant", "content": f"[L1] {slot.text}"} in s.view("L2")


def test_a_turn_with_prose_is_summarised_by_the_model() -> None:
    model = Model(["L0", "L1"])
    s = _session(finish_word="DONE")
    _turn(s, model, "chat with me")
    _turn(s, model, "list files")
    assert [x["source"] for x in s.as_json()["summaries"]] == ["model", "digest"]


def test_digest_reads_commands_outcomes_and_files() -> None:
    turns = [
        TurnEvent(1, "L1", "text", "```bash\nmkdir -p out && cp a.txt out/b.txt\n```",
                  (CallRecord("", "bash", "", {"command": "mkdir -p out && cp a.txt out/b.txt"}),),
                  ("(no output)\n[exit code 0]",)),
        TurnEvent(2, "L1", "text", "```bash\nsed -i 's/x/y/' conf.ini 2>/dev/null | tee -a log.txt\n```",
                  (CallRecord("", "bash", "", {"command": "sed -i 's/x/y/' conf.ini 2>/dev/null | tee -a log.txt"}),),
                  ("sed: no such file\n[exit code 2]",)),
        TurnEvent(3, "L1", "text", "```bash\nsleep 100\n```", (CallRecord("", "bash", "", {"command": "sleep 100"}),),
                  ("(no output)\n[timed out after 30s]",)),
        TurnEvent(4, "L1", "text", "DONE"),
    ]
    text = action_digest(turns, "DONE")
    assert text == ("Ran 3 command(s): `mkdir -p out && cp a.txt out/b.txt` (exit 0); "
                    "`sed -i 's/x/y/' conf.ini 2>/dev/null | tee -a log.txt` (exit 2); `sleep 100` (timed out). "
                    "Files touched: out, out/b.txt, conf.ini, log.txt.")
    assert action_digest(turns, "DONE") == text  # deterministic
    prose = [TurnEvent(1, "L1", "text", "Let me look.\n```bash\nls\n```",
                       (CallRecord("", "bash", "", {"command": "ls"}),), ("a\n[exit code 0]",))]
    assert action_digest(prose, "DONE") is None
    assert action_digest([TurnEvent(1, "L1", "text", "DONE")], "DONE") is None  # no action: nothing to digest
    assert touched_files("echo hi > /tmp/x 2>&1; cat a >> b") == ["/tmp/x", "b"]


def test_idle_settling_and_a_route_never_run_a_summary_twice() -> None:
    model = Model(["L1", "L2", "L1"])
    s = _session()
    _turn(s, model, "list files")
    t = threading.Thread(target=s.settle, args=(model,))
    t.start()
    s.add_user("parse the log")
    s.route(model)  # waits for the idle-time settle (one lock), never summarises the same slot again
    t.join()
    assert [r.hop for r in s.records].count("summary") == 1


def test_inline_policy_is_unchanged() -> None:
    model = Model(["L1"])
    s = _session(summaries="inline")
    _turn(s, model, "list files")
    assert s.end_turn() is None and not any(isinstance(e, SummarySlot) for e in s.timeline)


def test_the_route_legend_is_in_l0s_system_message_alone_and_the_route_question_is_short() -> None:
    """route_legend: L0's view explains the labels once, in its system message (cached with the head); the
    per-turn route question is short; the other adapters' views and a config without the field are unchanged."""
    from pathlib import Path

    import yaml

    from rsi.core.contract import Contract
    from rsi.core.harness_config import HarnessConfig
    from rsi.core.task import Task, TaskSpec
    from rsi.harness.mol import route_prompt

    model = Model(LABELS)
    s = _session(legend=True)
    _turn(s, model, USERS[0])
    route = model.choice_requests[0]["messages"]
    assert route[0]["content"] == "sys\n\n" + route_legend(DOMAINS) and "L2: data, logs" in route[0]["content"]
    assert route[-1] == {"role": "user", "content": SHORT_ROUTE_QUESTION} and len(SHORT_ROUTE_QUESTION) < 60
    assert s.view("L1")[0] == {"role": "system", "content": "sys"}
    assert "route_legend" not in MolSpec(domains=DOMAINS).model_dump()  # an older config keeps its digest
    assert MolSpec(domains=DOMAINS, route_legend=True).model_dump()["route_legend"] is True
    # routing examples and the promote gate ask in the same form as the session (route_prompt)
    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "harness_configs" / "default.yaml").read_text())
    contract = Contract.model_validate(yaml.safe_load((root / "contracts" / "hcp-1.0.yaml").read_text()))
    task = Task(name="t", path="/nonexistent", spec=TaskSpec(), instruction="list files", digest="0" * 64,
                env_digest="0" * 64, has_solution=True)
    for legend in (False, True):
        raw["mol"] = {"domains": DOMAINS, **({"route_legend": True} if legend else {})}
        cfg = HarnessConfig.model_validate(raw)
        msgs = route_prompt(cfg, contract, task, DOMAINS)
        assert msgs[-2]["role"] == "user" and "list files" in msgs[-2]["content"]
        assert (msgs[-1]["content"] == SHORT_ROUTE_QUESTION) is legend
        assert msgs[0]["content"].endswith(route_legend(DOMAINS)) is legend
