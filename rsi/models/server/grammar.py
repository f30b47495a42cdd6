"""Character-level grammars for constrained decoding (pure; no torch).

A grammar is a tree of nodes (a literal, a JSON string, a JSON number, a sequence, alternatives, a
repetition, a lazily built node for recursion). `start(node)` gives a parse state; `feed(state, text)`
gives the state after `text`, or None when no text the grammar accepts starts that way. A state is a
tuple of configurations, each a linked stack of what is left to match (alternatives are followed side
by side, as an NFA), so a state is immutable and trying a token on it costs nothing to undo.

`accepts(state)`: the text so far is a whole match (an end-of-sequence token may follow);
`finished(state)`: nothing more can follow (decoding stops here); `next_chars(state)`: the characters
that may come next (None: almost any), which the decoder uses to skip tokens that cannot fit.

The JSON grammars (schema.py builds them from a JSON schema) write no insignificant whitespace but
one optional space after `:` and `,`, as `json.dumps` does: a model writes what it has seen, and a
grammar that allowed any whitespace would let it pad forever.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NUMBER_MAX_CHARS = 24  # a number longer than this is never needed and would let a model count forever


@dataclass(frozen=True, eq=False)
class Lit:
    text: str


@dataclass(frozen=True, eq=False)
class Str:
    """A JSON string (quotes included): escapes checked, raw control characters refused."""

    min_len: int = 0
    max_len: int | None = None


@dataclass(frozen=True, eq=False)
class Num:
    """A JSON number; `integer` allows no fraction or exponent."""

    integer: bool = False


@dataclass(frozen=True, eq=False)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Rep:
    """`item` repeated between `min` and `max` (None: unbounded) times; the item must not match empty text."""

    item: Node
    min: int = 0
    max: int | None = None


@dataclass(frozen=True, eq=False)
class Lazy:
    """A node built on first use (recursive grammars: any JSON value holds any JSON value)."""

    make: Callable[[], Node]
    _built: list[Node] = field(default_factory=list, repr=False)

    def get(self) -> Node:
        if not self._built:
            self._built.append(self.make())
        return self._built[0]


Node = Lit | Str | Num | Seq | Alt | Rep | Lazy  # nodes compare by identity: hashing a state is cheap
EMPTY = Seq(())
SP = Alt((Lit(" "), EMPTY))  # one optional space

# In-progress frames on a stack: ("L", text, i) | ("S", phase, n, Str) | ("N", integer, phase, n) | ("R", Rep, count)
Frame = tuple[Any, ...]
Stack = tuple[Any, Any] | None  # (top: Node | Frame, rest: Stack); None is the empty stack (a whole match)
State = tuple[Stack, ...]

_S_OPEN, _S_IN, _S_ESC = 0, 1, 2  # string phases; 3..6: hex digits of a \u escape (phase 6 is the last)
_HEX = frozenset(string.hexdigits)
_ESCAPES = frozenset('"\\/bfnrt')
_DIGITS = frozenset(string.digits)
_NONZERO = frozenset("123456789")
# number phases
_N_START, _N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(9)
_N_ACCEPT = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})


def _num_next(integer: bool, phase: int, c: str) -> int | None:
    if phase in (_N_START, _N_MINUS):
        if c == "-" and phase == _N_START:
            return _N_MINUS
        return _N_ZERO if c == "0" else _N_INT if c in _NONZERO else None
    if phase in (_N_ZERO, _N_INT):
        if c in _DIGITS and phase == _N_INT:
            return _N_INT
        if integer:
            return None
        return _N_DOT if c == "." else _N_E if c in "eE" else None
    if phase in (_N_DOT, _N_FRAC):
        if c in _DIGITS:
            return _N_FRAC
        return _N_E if c in "eE" and phase == _N_FRAC else None
    if phase == _N_E and c in "+-":
        return _N_ESIGN
    return _N_EXP if c in _DIGITS else None


def _num_chars(integer: bool, phase: int) -> set[str]:
    return {c for c in "-0123456789.eE+" if _num_next(integer, phase, c) is not None}


def _expand(stack: Stack, out: list[Stack]) -> None:
    """Every configuration `stack` can be in before its next character: a character-consuming frame on top,
    or the empty stack (a whole match)."""
    while stack is not None:
        top, rest = stack
        if isinstance(top, tuple):
            kind = top[0]
            if kind == "R":
                rep, count = top[1], top[2]
                if rep.max is None or count < rep.max:
                    _expand((rep.item, (("R", rep, count + 1), rest)), out)
                if count < rep.min:
                    return
                stack = rest
                continue
            out.append(stack)
            if kind == "N" and top[2] in _N_ACCEPT:  # a number may end here or go on
                stack = rest
                continue
            return
        if isinstance(top, Lit):
            if top.text:
                out.append((("L", top.text, 0), rest))
                return
            stack = rest
        elif isinstance(top, Str):
            out.append((("S", _S_OPEN, 0, top), rest))
            return
        elif isinstance(top, Num):
            out.append((("N", top.integer, _N_START, 0), rest))
            return
        elif isinstance(top, Seq):
            for item in reversed(top.items):
                rest = (item, rest)
            stack = rest
        elif isinstance(top, Alt):
            for opt in top.options:
                _expand((opt, rest), out)
            return
        elif isinstance(top, Rep):
            stack = (("R", top, 0), rest)
        elif isinstance(top, Lazy):
            stack = (top.get(), rest)
        else:  # pragma: no cover - a programming error
            raise TypeError(f"not a grammar node: {top!r}")
    out.append(None)


def _step(stack: tuple[Frame, Stack], c: str) -> Stack | bool:
    """`stack` (a consuming frame on top) after `c`; False when `c` cannot come next."""
    top, rest = stack
    kind = top[0]
    if kind == "L":
        text, i = top[1], top[2]
        if text[i] != c:
            return False
        return rest if i + 1 == len(text) else (("L", text, i + 1), rest)
    if kind == "S":
        phase, n, node = top[1], top[2], top[3]
        room = node.max_len is None or n < node.max_len
        if phase == _S_OPEN:
            return (("S", _S_IN, 0, node), rest) if c == '"' else False
        if phase == _S_IN:
            if c == '"':
                return rest if n >= node.min_len else False
            if not room or ord(c) < 0x20:
                return False
            return (("S", _S_ESC if c == "\\" else _S_IN, n if c == "\\" else n + 1, node), rest)
        if phase == _S_ESC:
            if c == "u":
                return (("S", 3, n, node), rest)
            return (("S", _S_IN, n + 1, node), rest) if c in _ESCAPES else False
        if c not in _HEX:
            return False
        return (("S", _S_IN, n + 1, node), rest) if phase == 6 else (("S", phase + 1, n, node), rest)
    # "N"
    integer, phase, n = top[1], top[2], top[3]
    nxt = _num_next(integer, phase, c)
    if nxt is None or n >= NUMBER_MAX_CHARS:
        return False
    return (("N", integer, nxt, n + 1), rest)


def _close(stacks: list[Stack]) -> State:
    out: list[Stack] = []
    for s in stacks:
        _expand(s, out)
    if len(out) > 1:
        out = list(dict.fromkeys(out))  # the same configuration reached twice is followed once
    return tuple(out)


def start(node: Node) -> State:
    return _close([(node, None)])


def feed(state: State, text: str) -> State | None:
    """The state after `text`, or None when the grammar allows nothing that starts this way."""
    for c in text:
        nxt: list[Stack] = []
        for stack in state:
            if stack is not None:
                got = _step(stack, c)
                if got is not False:
                    nxt.append(got)  # type: ignore[arg-type]
        if not nxt:
            return None
        state = _close(nxt)
    return state


def accepts(state: State) -> bool:
    return None in state


def finished(state: State) -> bool:
    """A whole match that nothing can extend."""
    return all(s is None for s in state)


def next_chars(state: State) -> set[str] | None:
    """The characters that may come next; None when (almost) any may (inside a JSON string)."""
    chars: set[str] = set()
    for stack in state:
        if stack is None:
            continue
        top = stack[0]
        kind = top[0]
        if kind == "L":
            chars.add(top[1][top[2]])
        elif kind == "S":
            phase = top[1]
            if phase == _S_OPEN:
                chars.add('"')
            elif phase == _S_IN:
                return None
            elif phase == _S_ESC:
                chars |= _ESCAPES | {"u"}
            else:
                chars |= _HEX
        else:
            chars |= _num_chars(top[1], top[2])
    return chars


def matches(node: Node, text: str) -> bool:
    """Whole-text match (tests and checks)."""
    state = feed(start(node), text)
    return state is not None and accepts(state)


__all__ = ["EMPTY", "SP", "Alt", "Lazy", "Lit", "Node", "Num", "Rep", "Seq", "State", "Str", "accepts", "feed",
           "finished", "matches", "next_chars", "start"]
