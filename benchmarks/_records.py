"""What a benchmark run measured, as a JSON record the results page is rendered from.

Each script collects its figures in a `Recorder` and writes one record per run to
`benchmarks/records/<script>.json` (the newest run of a script replaces the one before; git keeps the history).
A record holds the figures (value, unit, the target beside it, the seed's or a peer's number where one exists),
the command that measured them, the commit and date, and the machine's facts, so a figure on the results page
always says where and on what it was measured. `scripts/render_results.py` renders `docs/results.md` from the
newest records.

`RSI_BENCH_RECORDS` points the records elsewhere (tests do); `RSI_BENCH_RECORDS=off` writes none.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"

_TARGET = re.compile(r"^\s*(<=|>=|<|>|==)\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$")


class Compare(BaseModel):
    """A number to read the figure against: the seed's, a peer's, or an earlier rsi's."""

    model_config = ConfigDict(extra="forbid")
    who: str
    value: int | float | str


class Figure(BaseModel):
    """One measured figure. `target` is a comparison such as "<= 1.15" (or None: reported, not gated)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    label: str
    value: float | int | str | None
    unit: str = ""
    target: str | None = None
    met: bool | None = None
    compare: list[Compare] = Field(default_factory=list)
    note: str = ""

    def model_post_init(self, _ctx: Any) -> None:
        if self.target is not None and self.met is None and isinstance(self.value, int | float):
            self.met = target_met(self.target, float(self.value))


class Machine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: int | None
    cpu_model: str
    memory_gib: float | None
    gpu: str
    python: str
    platform: str
    packages: dict[str, str] = Field(default_factory=dict)


class Record(BaseModel):
    """One run of one benchmark script."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = SCHEMA_VERSION
    script: str
    title: str
    command: str
    commit: str
    dirty: bool = False
    date: str
    wall_sec: float | None = None
    machine: Machine
    context: str = ""
    provenance: Literal["measured", "transcribed"] = "measured"
    figures: list[Figure]


def target_met(target: str, value: float) -> bool:
    """Whether `value` meets a target written as "<= 1.15", ">= 2", ..."""
    m = _TARGET.match(target)
    if m is None:
        raise ValueError(f"target {target!r}: write it as an operator and a number, e.g. '<= 1.15'")
    op, bound = m.group(1), float(m.group(2))
    return {"<=": value <= bound, ">=": value >= bound, "<": value < bound, ">": value > bound,
            "==": value == bound}[op]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _code_changed() -> bool:
    """Uncommitted changes to what runs (records, docs and other prose do not make a run dirty)."""
    return bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/records",
                     ":!docs", ":!*.md"))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _gpu() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
        return ", ".join(names) if out.returncode == 0 and names else "none"
    except (OSError, subprocess.SubprocessError):
        return "none"


def machine_facts() -> Machine:
    """The facts a reader needs to compare a figure with theirs (no secrets: no host name, no paths)."""
    packages = {}
    for name in ("rsi", "torch", "transformers", "peft", "docker", "ray"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return Machine(cpus=os.cpu_count(), cpu_model=_cpu_model(), memory_gib=_memory_gib(), gpu=_gpu(),
                   python=platform.python_version(), platform=f"{platform.system()} {platform.machine()}",
                   packages=packages)


def records_dir() -> Path | None:
    """Where records go: `RSI_BENCH_RECORDS` (a directory, or "off"), else benchmarks/records."""
    env = os.environ.get("RSI_BENCH_RECORDS")
    if env == "off":
        return None
    return Path(env) if env else RECORDS


class Recorder:
    """Collects a run's figures and writes its record; `add` also prints the figure's line."""

    def __init__(self, script: str, title: str, *, argv: list[str] | None = None, context: str = "",
                 commit: str | None = None, date: datetime | None = None,
                 provenance: Literal["measured", "transcribed"] = "measured") -> None:
        """`commit`/`date`: where a script reads a finished run (not one it ran), the run's own; `provenance`
        "transcribed": a run from before the scripts wrote records, copied from its printed output."""
        self.script = script
        self.provenance = provenance
        self._commit = commit
        self.title = title
        self.context = context
        self.command = " ".join(["python", f"benchmarks/{script}.py", *(sys.argv[1:] if argv is None else argv)])
        self.figures: list[Figure] = []
        self._t0 = datetime.now(UTC)
        # the code that runs is the code at the start (a later commit in the same tree must not claim the run)
        self._head = _git("rev-parse", "--short=12", "HEAD") or "unknown"
        self._dirty = _code_changed()
        self._date = date
        self.wall_sec: float | None = None

    def add(self, id: str, label: str, value: float | int | str | None, unit: str = "", *,
            target: str | None = None, met: bool | None = None, compare: dict[str, int | float | str] | None = None,
            note: str = "", echo: bool = False) -> Figure:
        if isinstance(value, float):
            value = round(value, 6)
        fig = Figure(id=id, label=label, value=value, unit=unit, target=target, met=met,
                     compare=[Compare(who=k, value=v) for k, v in (compare or {}).items()], note=note)
        self.figures = [f for f in self.figures if f.id != id] + [fig]
        if echo:
            print(f"{id} {value} {unit}".rstrip() + (f" (target {target})" if target else ""), flush=True)
        return fig

    def record(self) -> Record:
        dirty = self._commit is None and (self._dirty or _code_changed())
        wall = self.wall_sec if self.wall_sec is not None else (datetime.now(UTC) - self._t0).total_seconds()
        return Record(script=self.script, title=self.title, command=self.command,
                      commit=self._commit or self._head, dirty=dirty,
                      date=(self._date or self._t0).strftime("%Y-%m-%dT%H:%M:%SZ"), wall_sec=round(wall, 1),
                      machine=machine_facts(), context=self.context, provenance=self.provenance,
                      figures=self.figures)

    def write(self) -> Path | None:
        """Write the record (nothing when no figure was measured or records are off); returns its path."""
        out = records_dir()
        if out is None or not self.figures:
            return None
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.script}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.record().model_dump_json(indent=2, exclude_none=False) + "\n")
        tmp.replace(path)
        print(f"record: {path}", flush=True)
        return path


def load_records(directory: Path) -> list[Record]:
    """Every record in `directory`, by script name; a malformed one is an error naming the file."""
    out = []
    for path in sorted(directory.glob("*.json")):
        try:
            out.append(Record.model_validate_json(path.read_text()))
        except ValueError as e:
            first = str(e).splitlines()
            raise ValueError(f"{path}: not a benchmark record ({' '.join(first[:3])})") from None
    return out
