"""Request fields beyond the ones a route's schema declares: accepted when they cannot change the answer,
refused with 400 naming them when they would (a server that ignored them would answer something the
caller did not ask for, and the caller could not tell).

- benign: bookkeeping that never changes the text (`user`, `metadata`, `store`, ...);
- neutral: a sampling or rendering option sent at its default value (`frequency_penalty: 0`,
  `top_k: -1`, `logit_bias: {}`, ...) — what harnesses send when they spell every option out;
- a field whose value is null counts as not sent (OpenAI's convention);
- anything else is refused: an option at a value this server does not serve (`presence_penalty: 0.5`,
  `best_of: 4`), a constraint spelling it does not serve (vLLM's legacy `guided_*`), or a field it
  does not know.
"""

from __future__ import annotations

from typing import Any

BENIGN = frozenset({
    "user", "metadata", "store", "service_tier", "request_id", "priority", "cache_salt", "prompt_cache_key",
    "safety_identifier", "kv_transfer_params",
    # at most one tool call is ever parsed (the answer stops after the first), so either value holds
    "parallel_tool_calls",
})
# field -> the values that mean "as if not sent" (compared with ==; lists and dicts too)
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,), "presence_penalty": (0,), "repetition_penalty": (1,), "logit_bias": ({},),
    "top_k": (-1, 0), "min_p": (0,), "min_tokens": (0,), "ignore_eos": (False,), "best_of": (1,),
    "use_beam_search": (False,), "length_penalty": (1,), "skip_special_tokens": (True,),
    "spaces_between_special_tokens": (True,), "include_stop_str_in_output": (False,), "stop_token_ids": ([],),
    "bad_words": ([],), "modalities": (["text"],), "chat_template_kwargs": ({},), "mm_processor_kwargs": ({},),
    "add_generation_prompt": (True,), "continue_final_message": (False,), "echo": (False,),
    "add_special_tokens": (False,),  # chat: vLLM's default (the template holds the special tokens)
    "functions": ([],), "documents": ([],),
}
# vLLM's / SGLang's constraint spellings this server does not serve (it serves structured_outputs.choice,
# a literal-alternation `regex`, tool_choice and response_format): refused with their own message
REFUSED_CONSTRAINTS = ("guided_choice", "guided_regex", "guided_json", "guided_grammar", "guided_decoding_backend",
                       "guided_whitespace_pattern", "structural_tag", "json_schema", "ebnf", "guided_options")


def refused_fields(extra: dict[str, Any], neutral: dict[str, tuple[Any, ...]] | None = None) -> list[str]:
    """Each extra field that would change the answer, as `name (what)`, for a 400; [] when all are harmless."""
    table = {**NEUTRAL, **(neutral or {})}
    out: list[str] = []
    for name, value in sorted(extra.items()):
        if value is None or name in BENIGN or name in REFUSED_CONSTRAINTS:
            continue
        if name in table:
            if not any(value == v and type(value) is not bool or value is v for v in table[name]):
                shown = " or ".join(repr(v) for v in table[name])
                out.append(f"{name}={value!r} (only {shown} is served)")
        else:
            out.append(f"{name} (not served)")
    return out


def check_extra(extra: dict[str, Any], neutral: dict[str, tuple[Any, ...]] | None = None) -> None:
    """Raise ValueError (a 400) naming every extra field that would change the answer."""
    constraints = [k for k in REFUSED_CONSTRAINTS if extra.get(k) is not None]
    if constraints:
        raise ValueError(f"unsupported constraint field(s) {', '.join(constraints)}: this server serves "
                         "structured_outputs.choice (vLLM's current spelling), tool_choice and response_format; "
                         "a constraint it ignored would be answered unconstrained")
    refused = refused_fields(extra, neutral)
    if refused:
        raise ValueError(f"unsupported field(s): {'; '.join(refused)} — this server would ignore them, "
                         "so it refuses the request")


__all__ = ["BENIGN", "NEUTRAL", "REFUSED_CONSTRAINTS", "check_extra", "refused_fields"]
