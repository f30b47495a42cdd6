"""The shell's several natural ways to do one everyday operation, as reference scripts: the templates of the
`text`, `files` and `data` families and the `compose` operations built from them take their references from here,
so a template and the same step in a composition offer the same shapes.

Each function returns the shapes in a fixed order, the template's original reference first; every one has the
same effect on the files the verifier checks (the inputs these templates draw: text files ending in a newline,
lower-case words, CSV files with a header and integer columns, JSON written by `json.dumps(indent=2)`), so any of
them passes. POSIX awk (Debian's mawk) and GNU coreutils, sed and grep, as in the base image.
"""

from __future__ import annotations

from rsi.loop.discover.generators.procedural import q


def count_lines(src: str, out: str) -> list[str]:
    return [f"wc -l < {src} > {out}", f"grep -c '' {src} > {out}", f"awk 'END {{print NR}}' {src} > {out}",
            f"sed -n '$=' {src} > {out}"]


def head(src: str, out: str, n: int) -> list[str]:
    return [f"head -n {n} {src} > {out}", f"sed -n '1,{n}p' {src} > {out}", f"awk 'NR <= {n}' {src} > {out}"]


def tail(src: str, out: str, n: int) -> list[str]:
    return [f"tail -n {n} {src} > {out}", f"tac {src} | head -n {n} | tac > {out}",
            f"awk '{{line[NR] = $0}} END {{for (i = NR - {n} + 1; i <= NR; i++) print line[i]}}' {src} > {out}"]


def upper(src: str, out: str) -> list[str]:
    return [f"tr a-z A-Z < {src} > {out}", f"awk '{{print toupper($0)}}' {src} > {out}",
            f"sed 's/.*/\\U&/' {src} > {out}"]


def sort_lines(src: str, out: str) -> list[str]:
    return [f"LC_ALL=C sort {src} > {out}", f"LC_ALL=C sort -o {out} {src}"]


def sort_numeric(src: str, out: str) -> list[str]:
    return [f"sort -n {src} > {out}", f"sort -n -o {out} {src}", f"sort -g {src} > {out}"]


def copy(src: str, out: str) -> list[str]:
    return [f"cp {src} {out}", f"cat {src} > {out}", f"cp -p {src} {out}"]


def append(path: str, text: str) -> list[str]:
    return [f"printf '%s\\n' {q(text)} >> {path}", f"echo {q(text)} >> {path}", f"sed -i '$a {text}' {path}"]


def copy_into(src: str, inner: str, out: str) -> list[str]:
    """A copy of `src` as `out`, in the new directory chain `inner` (its parent folders made too)."""
    return [f"mkdir -p {inner}\ncp {src} {out}", f"mkdir -p {inner} && cp {src} {inner}/",
            f"install -D -m 644 {src} {out}"]


def list_dir(d: str, out: str) -> list[str]:
    return [f"LC_ALL=C ls -1 {d} > {out}", f"LC_ALL=C ls {d} > {out}",
            f"find {d} -type f -printf '%f\\n' | LC_ALL=C sort > {out}"]


def concat(pa: str, pb: str, out: str) -> list[str]:
    return [f"cat {pa} {pb} > {out}", f"{{ cat {pa}; cat {pb}; }} > {out}", f"cp {pa} {out} && cat {pb} >> {out}"]


def remove(path: str) -> list[str]:
    return [f"rm {path}", f"rm -f {path}", f"unlink {path}"]


# -- CSV with a header line, integer columns 2 and 3 ---------------------------------------------------------------


def csv_rows(src: str, out: str) -> list[str]:
    return [f"tail -n +2 {src} | wc -l > {out}", f"sed 1d {src} | wc -l > {out}",
            f"awk 'END {{print NR - 1}}' {src} > {out}", f"echo $(( $(wc -l < {src}) - 1 )) > {out}"]


def csv_column(src: str, out: str, k: int) -> list[str]:
    return [f"tail -n +2 {src} | cut -d, -f{k} > {out}", f"awk -F, 'NR > 1 {{print ${k}}}' {src} > {out}",
            f"sed 1d {src} | cut -d, -f{k} > {out}"]


def csv_sum(src: str, out: str) -> list[str]:
    return [f"tail -n +2 {src} | awk -F, '{{s += $2}} END {{print s}}' > {out}",
            f"awk -F, 'NR > 1 {{s += $2}} END {{print s}}' {src} > {out}",
            f"echo $(( $(tail -n +2 {src} | cut -d, -f2 | paste -sd+ -) )) > {out}"]


def csv_max(src: str, out: str) -> list[str]:
    """The first column of the row with the largest (positive, distinct) second column."""
    return [f"tail -n +2 {src} | LC_ALL=C sort -t, -k2,2 -rn | head -n 1 | cut -d, -f1 > {out}",
            f"awk -F, 'NR > 1 && $2 + 0 > max {{max = $2 + 0; name = $1}} END {{print name}}' {src} > {out}",
            f"tail -n +2 {src} | sort -t, -k2,2n | tail -n 1 | cut -d, -f1 > {out}"]


def csv_sort(src: str, out: str) -> list[str]:
    """The header first, then the rows by their (distinct) second column, ascending."""
    return [f"(head -n 1 {src}; tail -n +2 {src} | LC_ALL=C sort -t, -k2,2 -n) > {out}",
            f"head -n 1 {src} > {out} && tail -n +2 {src} | LC_ALL=C sort -t, -k2,2 -n >> {out}",
            f"(sed -n 1p {src}; sed 1d {src} | sort -t, -k2n) > {out}"]


# -- JSON (json.dumps(indent=2): one key per line) -----------------------------------------------------------------


def py(expr: str, path: str, out: str) -> str:
    """A python3 one-liner printing `expr` of the JSON document `d` loaded from `path`."""
    return f"python3 -c \"import json; d = json.load(open('{path}')); print({expr})\" > {out}"


def py_stdin(code: str, path: str, out: str) -> str:
    """A python3 one-liner running `code` on the JSON document `d` it reads from standard input (`path`). One
    command, not a heredoc script: a script's generic lines (`import json`) would share most of its command n-grams
    with every other JSON template's, which `rsi update`'s reference-overlap rule reads as a leak."""
    return f"python3 -c \"import json, sys; d = json.load(sys.stdin); {code}\" < {path} > {out}"


def json_field(path: str, out: str, key: str) -> list[str]:
    """An integer field of a JSON object."""
    return [py(f"d['{key}']", path, out), f"grep '\"{key}\":' {path} | tr -dc 0-9 > {out}",
            f"sed -n 's/^ *\"{key}\": \\([0-9]*\\),\\{{0,1\\}}$/\\1/p' {path} > {out}"]


def json_keys(path: str, out: str) -> list[str]:
    """The keys of a JSON object of integers, sorted, one per line."""
    return [py("'\\n'.join(sorted(d))", path, out),
            f"grep -o '\"[a-z]*\":' {path} | tr -d '\":' | LC_ALL=C sort > {out}",
            py_stdin("print(*sorted(d), sep='\\n')", path, out)]


def json_len(path: str, out: str, field: str) -> list[str]:
    """The number of items of a JSON list of objects that each have the key `field` once."""
    return [py("len(d)", path, out), f"grep -c '\"{field}\":' {path} > {out}", py_stdin("print(len(d))", path, out)]


def json_filter(path: str, out: str, key: str, t: int) -> list[str]:
    """The `name`s of the items whose `key` is greater than `t`, in list order."""
    return [py(f"'\\n'.join(o['name'] for o in d if o['{key}'] > {t})", path, out),
            py_stdin(f"[print(o['name']) for o in d if o['{key}'] > {t}]", path, out)]
