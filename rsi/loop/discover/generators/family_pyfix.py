"""The `pyfix` family: small Python fixes, each checked by calling the function (a wrong operator, a
comparison at its boundary, a missing return, the wrong string method; an off-by-one loop, the second
largest item, an accumulator reset in the loop, a counter that raises KeyError, a syntax error; vowels in any
case and an average with two bugs above).

Each environment holds one module in /app, so "the {name} module in /app" or "{name}.py, the only .py file in /app"
names it as well as its path does; the last two phrasings of each level-1/2 template say it so (a person's words).
A fix has three natural shapes: the `sed` edit, the same edit in python3, and the whole corrected module written
out (`_fixes`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from rsi.loop.discover.generators.procedural import (
    NUMBER_WORDS,
    WORDS,
    Level,
    ProceduralFamily,
    Template,
    pick,
    register,
    say,
)


def _module(rng: random.Random) -> tuple[str, str, str]:
    """(module file name, function name, path)."""
    mod, fn = pick(rng, WORDS, 2)
    name = f"{mod}_{rng.randint(10, 99)}"
    return name, f"{fn}_value", f"/app/{name}.py"


def _call_check(path: str, fn: str, cases: Sequence[tuple[tuple[Any, ...], Any]]) -> str:
    return (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('m', {path!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "try:\n    spec.loader.exec_module(m)\nexcept Exception as e:\n"
        f"    fail(f'{path} does not load: {{e!r}}')\n"
        f"for args, want in {list(cases)!r}:\n"
        "    try:\n"
        f"        got = m.{fn}(*args)\n"
        "    except Exception as e:\n"
        f"        fail(f'{fn}{{args}} raised {{e!r}}')\n"
        "    if got != want or type(got) is not type(want):\n"
        f"        fail(f'{fn}{{args}} returned {{got!r}}, expected {{want!r}}')\n"
    )


def _write(path: str, source: str) -> str:
    """A script that replaces `path` with `source`."""
    return f"cat > {path} <<'PYEOF'\n{source}PYEOF"


def _replace(path: str, old: str, new: str) -> str:
    """A python3 one-liner that replaces `old` with `new` in `path` (one command: a script of generic lines, `from
    pathlib import Path`, would share most of its command n-grams with every other template's, and `rsi update`'s
    reference-overlap rule would take a train replay of one for a leak of another held-out template's)."""
    return (f"python3 -c \"from pathlib import Path; p = Path('{path}'); "
            f"p.write_text(p.read_text().replace({old!r}, {new!r}))\"")


def _fixes(path: str, src: str, old: str, new: str) -> list[str]:
    """The other shapes of a fix that turns `old` into `new` in the module `src`: the edit in python3, and the whole
    corrected module written out."""
    return [_replace(path, old, new), _write(path, src.replace(old, new))]


def _level(instruction: str, ph: tuple[int, int], mod: str, path: str, fn: str, src: str,
           cases: Sequence[tuple[tuple[Any, ...], Any]], solve: str, wrong: list[str], what: str,
           shapes: Sequence[str] = ()) -> Level:
    return Level(instruction=instruction, env_files={f"{mod}.py": src}, test_checks=_call_check(path, fn, cases),
                 solve=solve, wrong=wrong, reads=[path], what=f"{fn} in {path} {what}", phrasing=ph,
                 shapes=list(shapes))


# -- level 1 -------------------------------------------------------------------------------------

OPS = [("sum", "+", "-", "*"), ("product", "*", "+", "-"), ("difference a - b", "-", "+", "*")]


def operator(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    what, good, bad, wrong = rng.choice(OPS)
    src = f"def {fn}(a, b):\n    return a {bad} b\n"
    cases = [((a, b), eval(f"{a} {good} {b}")) for a, b in ((rng.randint(2, 9), rng.randint(2, 9)), (7, 3), (0, 5))]
    instruction, ph = say(rng, [
        "The function `{fn}(a, b)` in `{path}` should return the {what} of its arguments, but it uses `{bad}`. "
        "Fix it so it uses `{good}`.",
        "`{fn}(a, b)` in `{path}` is meant to compute the {what} of `a` and `b`; it wrongly applies `{bad}`. "
        "Correct the operator to `{good}`.",
        "Fix `{path}`: `{fn}(a, b)` must return the {what} (operator `{good}`), not use `{bad}`.",
        "A bug in `{path}`: `{fn}(a, b)` applies `{bad}` where the {what} needs `{good}`. Patch the operator.",
        "The {fn} function in the {mod} module in /app is meant to give the {what} of its two arguments, but it "
        "uses the wrong operator. Fix it.",
        "Something is off in {mod}.py, the only .py file in /app: {fn} should return the {what} of a and b and does "
        "not. Correct the operator it uses.",
    ], fn=fn, path=path, mod=mod, what=what, bad=bad, good=good)
    return _level(instruction, ph, mod, path, fn, src, cases,
                  f"sed -i 's/return a {bad} b/return a {good} b/' {path}",
                  [f"sed -i 's/return a {bad} b/return a {wrong} b/' {path}",
                   f"sed -i 's/return a {bad} b/return b {good} a {bad} 1/' {path}"], f"computes the {what}",
                  _fixes(path, src, f"return a {bad} b", f"return a {good} b"))


def comparison(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    bad, good, flip, words, step = rng.choice([(">", ">=", "<=", "at least", 1), ("<", "<=", ">=", "at most", -1)])
    limit = rng.randint(10, 90)
    src = f"def {fn}(x, limit):\n    return x {bad} limit\n"
    cases = [((limit, limit), True), ((limit - step, limit), False), ((limit + 3 * step, limit), True)]
    instruction, ph = say(rng, [
        "`{fn}(x, limit)` in `{path}` should return True when `x` is {words} `limit`, but it returns False when "
        "`x` equals `limit`. Fix it.",
        "In `{path}`, `{fn}(x, limit)` must be True for every `x` {words} `limit` (equality included); today "
        "`{fn}({limit}, {limit})` is False. Fix the comparison.",
        "Fix the boundary of `{fn}(x, limit)` in `{path}`: it should answer whether `x` is {words} `limit`, "
        "counting `x == limit` as True.",
        "Patch `{path}` so that `{fn}(x, limit)` is True whenever `x` is {words} `limit`; at the moment the "
        "case `x == limit` comes out False.",
        "In the Python file in /app, {fn} should say whether x is {words} limit, yet it answers False when the "
        "two are equal (try {limit} and {limit}). Fix the comparison.",
        "{mod}.py, the only .py file in /app, has a boundary bug: {fn}(x, limit) must be True for x {words} limit, "
        "equality included. Make it so.",
    ], fn=fn, path=path, mod=mod, words=words, limit=limit)
    return _level(instruction, ph, mod, path, fn, src, cases,
                  f"sed -i 's/x {bad} limit/x {good} limit/' {path}",
                  [f"sed -i 's/x {bad} limit/x {flip} limit/' {path}", f"sed -i 's/x {bad} limit/x == limit/' {path}"],
                  f"tests x {good} limit", _fixes(path, src, f"x {bad} limit", f"x {good} limit"))


def missing_return(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    k = rng.randint(2, 9)
    src = f"def {fn}(xs):\n    result = []\n    for x in xs:\n        result.append(x * {k})\n"
    cases = [(([1, 2],), [k, 2 * k]), (([],), []), (([5],), [5 * k])]
    instruction, ph = say(rng, [
        "`{fn}(xs)` in `{path}` builds a list of every item times {k} but never returns it (it returns None). "
        "Make it return the list.",
        "In `{path}`, `{fn}(xs)` computes `result` (each item multiplied by {k}) and then forgets to return it. "
        "Fix that.",
        "Fix `{path}` so that `{fn}(xs)` returns the list it builds (`[x * {k} for each x]`) instead of None.",
        "`{fn}(xs)` in `{path}` has no return statement for the list it builds (each element times {k}), so "
        "callers get None. Add it.",
        "The {fn} function in the {mod} module in /app multiplies every item by {kw} into a list and then returns "
        "nothing. Make it hand that list back.",
        "Callers of {fn} in {mod}.py (the only .py file in /app) get None instead of the list it builds (each element "
        "times {kw}). Fix the function so it returns the list.",
    ], fn=fn, path=path, mod=mod, k=k, kw=NUMBER_WORDS[k])
    return _level(instruction, ph, mod, path, fn, src, cases, f"printf '    return result\\n' >> {path}",
                  [f"printf '    return xs\\n' >> {path}", f"printf '    print(result)\\n' >> {path}"],
                  "returns the list",
                  [f"echo '    return result' >> {path}", _write(path, src + "    return result\n")])


def string_method(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    what, good, bad = rng.choice([("upper case", "upper", "lower"), ("lower case", "lower", "upper")])
    w1, w2 = pick(rng, WORDS, 2)
    src = f"def {fn}(s):\n    return s.{bad}()\n"
    cases = [((f"{w1} {w2}",), getattr(f"{w1} {w2}", good)()), (("Mixed Case",), getattr("Mixed Case", good)()),
             ((w1.upper(),), getattr(w1.upper(), good)())]
    instruction, ph = say(rng, [
        "`{fn}(s)` in `{path}` should return `s` in {what}, but it calls `.{bad}()`. Fix it.",
        "In `{path}`, `{fn}(s)` must turn the whole string into {what}; it uses the wrong string method. Fix it.",
        "Fix `{path}`: `{fn}(s)` returns `s.{bad}()` where it should return `s` entirely in {what}.",
        "Calling `{fn}(s)` from `{path}` should give back `s` all in {what}; the method `.{bad}()` it uses "
        "today is the wrong one. Patch it.",
        "The {fn} function in the {mod} module in /app is supposed to return its string entirely in {what}, but "
        "it calls the wrong string method. Fix it.",
        "In {mod}.py, the only .py file in /app, {fn}(s) must turn the whole of s into {what}; right now it does the "
        "opposite. Correct it.",
    ], fn=fn, path=path, mod=mod, what=what, bad=bad)
    return _level(instruction, ph, mod, path, fn, src, cases, f"sed -i 's/s.{bad}()/s.{good}()/' {path}",
                  [f"sed -i 's/s.{bad}()/s.title()/' {path}", f"sed -i 's/s.{bad}()/s.swapcase()/' {path}"],
                  f"returns {what}", _fixes(path, src, f"s.{bad}()", f"s.{good}()"))


# -- level 2 -------------------------------------------------------------------------------------


def off_by_one(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = f"def {fn}(n):\n    total = 0\n    for i in range(1, n):\n        total += i\n    return total\n"
    cases = [((n,), n * (n + 1) // 2) for n in (1, 3, rng.randint(5, 20))]
    instruction, ph = say(rng, [
        "`{fn}(n)` in `{path}` should return 1 + 2 + ... + n (so `{fn}(3)` is 6), but its loop stops one too "
        "early. Fix it.",
        "In `{path}`, `{fn}(n)` must sum the integers 1 through n inclusive (`{fn}(3)` == 6); it leaves out n. "
        "Fix the loop.",
        "Fix the off-by-one in `{path}`: `{fn}(n)` should add up 1..n including n, e.g. `{fn}(3)` returns 6.",
        "Patch `{path}`: `{fn}(n)` is meant to total every integer from 1 up to and including n (for example "
        "`{fn}(3) == 6`), but the last number is skipped.",
        "The {fn} function in the {mod} module in /app should add up the whole numbers from one to n, n "
        "included (three gives six), but it stops short. Fix the loop.",
        "In {mod}.py, the only .py file in /app, {fn}(n) leaves n itself out of its sum of 1 to n, so {fn}(3) is 3 "
        "instead of 6. Correct it.",
    ], fn=fn, path=path, mod=mod)
    return _level(instruction, ph, mod, path, fn, src, cases, f"sed -i 's/range(1, n)/range(1, n + 1)/' {path}",
                  [f"sed -i 's/range(1, n)/range(0, n)/' {path}", f"sed -i 's/range(1, n)/range(1, n + 2)/' {path}"],
                  "sums 1..n", _fixes(path, src, "range(1, n)", "range(1, n + 1)"))


def second_largest(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = f"def {fn}(xs):\n    return sorted(xs)[1]\n"
    big = rng.sample(range(10, 99), 4)
    cases = [((big,), sorted(big)[-2]), (([3, 1, 2],), 2), (([5, 9],), 5)]
    instruction, ph = say(rng, [
        "`{fn}(xs)` in `{path}` should return the second largest number of the list `xs`, but it returns the "
        "second smallest. Fix it.",
        "In `{path}`, `{fn}(xs)` must give the runner-up: the largest value after the maximum. It picks from the "
        "wrong end of the sorted list. Fix it.",
        "Fix `{path}` so that `{fn}(xs)` returns the second biggest item of `xs` (for [3, 1, 2] that is 2; for "
        "[5, 9] it is 5).",
        "Patch `{fn}(xs)` in `{path}`: it must give back the value just below the maximum of `xs` (for [3, 1,"
        " 2] that is 2), not the second smallest.",
        "The {fn} function in the {mod} module in /app should pick the runner-up of a list of numbers (the biggest "
        "one after the maximum) but takes it from the wrong end. Fix it.",
        "In {mod}.py, the only .py file in /app, {fn} returns the second smallest value of its list; it should return "
        "the second largest (five for [5, 9]). Correct it.",
    ], fn=fn, path=path, mod=mod)
    return _level(instruction, ph, mod, path, fn, src, cases, f"sed -i 's/sorted(xs)\\[1\\]/sorted(xs)[-2]/' {path}",
                  [f"sed -i 's/sorted(xs)\\[1\\]/sorted(xs)[-1]/' {path}",
                   f"sed -i 's/sorted(xs)\\[1\\]/sorted(xs, reverse=True)[2]/' {path}"], "returns the second largest",
                  _fixes(path, src, "sorted(xs)[1]", "sorted(xs)[-2]"))


def accumulate(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    what, op, start = rng.choice([("sum", "+=", 0), ("product", "*=", 1)])
    src = f"def {fn}(xs):\n    for x in xs:\n        total = {start}\n        total {op} x\n    return total\n"
    good = f"def {fn}(xs):\n    total = {start}\n    for x in xs:\n        total {op} x\n    return total\n"
    early = f"def {fn}(xs):\n    total = {start}\n    for x in xs:\n        total {op} x\n        return total\n"
    vals = rng.sample(range(2, 9), 3)
    want = sum(vals) if what == "sum" else vals[0] * vals[1] * vals[2]
    cases = [((vals,), want), (([],), start), (([4],), 4)]
    instruction, ph = say(rng, [
        "`{fn}(xs)` in `{path}` should return the {what} of the numbers in `xs` ({start} for an empty list), but "
        "it resets its running total inside the loop. Fix it.",
        "In `{path}`, `{fn}(xs)` must compute the {what} of `xs` (an empty list gives {start}); the accumulator "
        "starts over on every item. Fix the function.",
        "Fix `{path}`: `{fn}(xs)` only keeps the last item because `total` is re-initialised in the loop. It should "
        "return the {what} of all items, {start} for none.",
        "Patch `{path}`: because the running total of `{fn}(xs)` is reset on each pass of the loop, only the "
        "last item survives. It must give the {what} of every item ({start} for an empty list).",
        "The {fn} function in the {mod} module in /app should work out the {what} of a list of numbers, yet it "
        "starts its total over for each item. Fix it (an empty list gives {start}).",
        "In {mod}.py, the only .py file in /app, {fn} ends up with just the last number because its running {what} is "
        "reset inside the loop. Make it return the {what} of all of them, {start} when there are none.",
    ], fn=fn, path=path, mod=mod, what=what, start=start)
    hoist = f"    total = {start}\n    for x in xs:\n"
    return _level(instruction, ph, mod, path, fn, src, cases, _write(path, good),
                  [f"sed -i '/total = {start}/d' {path}", _write(path, early)], f"returns the {what}",
                  [_replace(path, f"    for x in xs:\n        total = {start}\n", hoist)])


def dict_count(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = f"def {fn}(words):\n    counts = {{}}\n    for w in words:\n        counts[w] += 1\n    return counts\n"
    a, b, c = pick(rng, WORDS, 3)
    cases = [(([a, b, a],), {a: 2, b: 1}), (([],), {}), (([c, c, c, a],), {c: 3, a: 1})]
    instruction, ph = say(rng, [
        "`{fn}(words)` in `{path}` should return a dict mapping each word to how often it occurs, but it raises "
        "KeyError on the first word. Fix it.",
        "In `{path}`, `{fn}(words)` must count the words of a list (word -> number of occurrences); it fails with "
        "KeyError because it never starts a count. Fix it.",
        "Fix `{path}` so that `{fn}(['x', 'y', 'x'])` returns `{{'x': 2, 'y': 1}}` instead of raising KeyError.",
        "Patch `{fn}(words)` in `{path}`: it must build a word -> occurrences dict, but crashes with KeyError"
        " because a word seen for the first time has no entry yet.",
        "The {fn} function in the {mod} module in /app should count how often each word of a list occurs (a dict "
        "from word to count), but the first new word makes it crash. Fix it.",
        "In {mod}.py, the only .py file in /app, {fn} raises KeyError instead of returning each word's number of "
        "occurrences; {a}, {b}, {a} should give {a} 2 and {b} 1. Repair it.",
    ], fn=fn, path=path, mod=mod, a=a, b=b)
    return _level(instruction, ph, mod, path, fn, src, cases,
                  f"sed -i 's/counts\\[w\\] += 1/counts[w] = counts.get(w, 0) + 1/' {path}",
                  [f"sed -i 's/counts\\[w\\] += 1/counts[w] = 1/' {path}",
                   f"sed -i 's/counts\\[w\\] += 1/counts.setdefault(w, 0)/' {path}"], "counts the words",
                  _fixes(path, src, "counts[w] += 1", "counts[w] = counts.get(w, 0) + 1"))


def syntax(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = f"def {fn}(x):\n    if x < 0\n        return -x\n    return x\n"
    n = rng.randint(5, 50)
    cases = [((-3,), 3), ((4,), 4), ((0,), 0), ((-n,), n)]
    instruction, ph = say(rng, [
        "`{path}` does not load: the `if` in `{fn}(x)` lacks its colon. Fix the syntax so `{fn}(x)` returns the "
        "absolute value of `x`.",
        "Python refuses to import `{path}` (a syntax error in `{fn}`). Repair it; `{fn}(x)` should return `x` "
        "without its sign (the absolute value).",
        "Fix the syntax error in `{path}` so the module loads and `{fn}(-3)` returns 3 and `{fn}(4)` returns 4.",
        "Importing `{path}` fails with a SyntaxError inside `{fn}`. Patch the code so that it imports and "
        "`{fn}(x)` gives back `x` made non-negative (its absolute value).",
        "The {mod} module in /app will not even import: {fn} has a syntax slip. Fix it so the module loads and "
        "{fn}(x) returns the absolute value of x (minus {n} gives {n}).",
        "Python chokes on {mod}.py, the only .py file in /app, because of a typo in {fn}. Mend it; {fn} should give x "
        "without its sign, so {fn}(-{n}) is {n}.",
    ], fn=fn, path=path, mod=mod, n=n)
    return _level(instruction, ph, mod, path, fn, src, cases, f"sed -i 's/if x < 0$/if x < 0:/' {path}",
                  [f"sed -i 's/if x < 0$/if x < 0:/; s/return -x/return x/' {path}",
                   f"sed -i '/if x < 0/d; /return -x/d' {path}"], "returns |x|",
                  _fixes(path, src, "if x < 0\n", "if x < 0:\n"))


# -- levels 3 and 4 ------------------------------------------------------------------------------


def vowels(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = (f"def {fn}(text):\n    count = 0\n    for ch in text:\n        if ch in 'aeiou':\n"
           "            count += 1\n    return count\n")
    words = pick(rng, WORDS, 3)
    cases: list[tuple[tuple[Any, ...], Any]] = [
        ((w.capitalize() + " " + w.upper(),), 2 * sum(c in "aeiou" for c in w)) for w in words]
    cases.append((("Yes sky",), 1))
    instruction, ph = say(rng, [
        "`{fn}(text)` in `{path}` should count the vowels a, e, i, o, u in `text`, upper or lower case, but it "
        "misses upper-case vowels. Fix it.",
        "In `{path}`, `{fn}(text)` must count vowels (a, e, i, o, u) regardless of case; capitals are not counted "
        "today. Fix it.",
        "Fix `{path}`: `{fn}('AE io')` should be 4, since `{fn}(text)` counts a, e, i, o, u in either case (y is "
        "not a vowel).",
    ], fn=fn, path=path)
    return _level(instruction, ph, mod, path, fn, src, cases,
                  f"sed -i 's/for ch in text:/for ch in text.lower():/' {path}",
                  [f"sed -i \"s/'aeiou'/'aeiouy'/\" {path}", f"sed -i \"s/'aeiou'/'AEIOU'/\" {path}"],
                  "counts vowels in any case")


def average(rng: random.Random) -> Level:
    mod, fn, path = _module(rng)
    src = f"def {fn}(xs)\n    if not xs:\n        return 0\n    return sum(xs) // len(xs)\n"
    cases: list[tuple[tuple[Any, ...], Any]] = [(([1, 2],), 1.5), (([],), 0), (([4, 4, 5],), 13 / 3)]
    instruction, ph = say(rng, [
        "`{path}` defines `{fn}(xs)`, which should return the average of a list of numbers (0 for an empty list), "
        "as a float such as 1.5. The file does not even load, and the average is rounded down. Fix both bugs.",
        "Two bugs in `{path}`: a syntax error keeps it from loading, and `{fn}(xs)` rounds the mean down. It should "
        "return the exact average as a float (1.5 for [1, 2]) and 0 for an empty list.",
        "Make `{path}` load and make `{fn}(xs)` return the true mean of `xs` (a float, e.g. 1.5 for [1, 2]; 0 for "
        "[]). There are two separate mistakes.",
    ], fn=fn, path=path)
    return _level(instruction, ph, mod, path, fn, src, cases,
                  f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/; s|sum(xs) // len(xs)|sum(xs) / len(xs)|' {path}",
                  [f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/' {path}",
                   f"sed -i 's/def {fn}(xs)$/def {fn}(xs):/; s|sum(xs) // len(xs)|round(sum(xs) / len(xs))|' {path}"],
                  "returns the float average")


@register
class PyfixFamily(ProceduralFamily):
    name = "pyfix"
    family = "pyfix"
    templates = (
        Template("operator", 1, operator), Template("comparison", 1, comparison),
        Template("missing-return", 1, missing_return), Template("string-method", 1, string_method),
        Template("off-by-one", 2, off_by_one), Template("second-largest", 2, second_largest),
        Template("accumulate", 2, accumulate), Template("dict-count", 2, dict_count), Template("syntax", 2, syntax),
        Template("vowels", 3, vowels), Template("average", 4, average),
    )
