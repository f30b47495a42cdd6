"""How the embedded model server sizes itself from the machine (no torch here: `rsi doctor` reads it).

Every figure has an override, as a `rsi model serve` option or the environment variable beside it:

- decode threads: half the cores, 1..4 (decoding is bound by reading the weights; the rest of the
  cores stay with the sandboxes). `RSI_MODEL_THREADS`
- prefill threads: all cores, 1..8 (prefill is compute-bound and short). `RSI_MODEL_PREFILL_THREADS`
- max batch: half the cores, 1..4 greedy requests decoded together in one forward pass.
  `RSI_MODEL_MAX_BATCH`
- speculate: up to 8 prompt-lookup guesses checked per forward pass for a request decoded alone
  (speculate.py; greedy answers and sampled distributions unchanged); 0 turns it off. `RSI_MODEL_SPECULATE`
- prefix cache: 10 % of the memory, 64 MiB..1 GiB; 0 turns it off. `RSI_MODEL_PREFIX_CACHE_MB`
- queue: requests waiting beyond the running batch; more are answered 503 (clients retry).
  `RSI_MODEL_MAX_QUEUE`
- kernels: `default` (transformers' own); `int8` did not keep greedy answers (benchmarks/README.md).
  `RSI_MODEL_KERNELS`
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.errors import RsiError

MIB = 1 << 20
KERNELS = ("default", "int8")
DEFAULT_KERNELS = "default"
DEFAULT_SPECULATE = 8


def machine_cores() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup v2 `cpu.max` quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def machine_memory() -> int:
    """Bytes of memory: MemTotal, capped by a cgroup v2 `memory.max` limit."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError):
        pass
    try:
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if raw != "max":
            total = min(total, int(raw)) if total else int(raw)
    except (OSError, ValueError):
        pass
    return total or 4096 * MIB


@dataclass(frozen=True)
class ServerSizing:
    cores: int
    memory_bytes: int
    threads: int
    prefill_threads: int
    max_batch: int
    prefix_cache_bytes: int
    max_queue: int
    kernels: str
    speculate: int = 0
    overrides: tuple[str, ...] = field(default=())  # which figures were set by hand

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overrides"] = list(self.overrides)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerSizing:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["overrides"] = tuple(known.get("overrides") or ())
        return cls(**known)

    def summary(self) -> str:
        cache = f"{self.prefix_cache_bytes // MIB} MiB" if self.prefix_cache_bytes else "off"
        by_hand = f"; set by hand: {', '.join(self.overrides)}" if self.overrides else ""
        return (
            f"{self.cores} cores, {self.memory_bytes / (1 << 30):.1f} GiB -> threads {self.threads} "
            f"(prefill {self.prefill_threads}), batch {self.max_batch}, prefix cache {cache}, "
            f"queue {self.max_queue}, kernels {self.kernels}, "
            f"speculate {self.speculate or 'off'}{by_hand}"
        )


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise RsiError(f"{name}: '{raw}' is not a whole number", exit_code=2) from None


def size_server(
    *,
    threads: int | None = None,
    prefill_threads: int | None = None,
    max_batch: int | None = None,
    prefix_cache_mb: int | None = None,
    max_queue: int | None = None,
    kernels: str | None = None,
    speculate: int | None = None,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
    memory_bytes: int | None = None,
) -> ServerSizing:
    """The server's figures: explicit arguments, else the environment, else the machine's rule."""
    env = os.environ if env is None else env
    cores = cores or machine_cores()
    memory_bytes = memory_bytes or machine_memory()
    overrides: list[str] = []

    def pick(name: str, given: int | None, var: str, rule: int, lo: int) -> int:
        value = given if given is not None else _env_int(env, var)
        if value is None:
            return rule
        if value < lo:
            raise RsiError(f"{name} must be at least {lo} (got {value})", exit_code=2)
        overrides.append(name)
        return value

    half = max(1, min(4, cores // 2))
    cache_rule = min(1024 * MIB, max(64 * MIB, memory_bytes // 10))
    t = pick("threads", threads, "RSI_MODEL_THREADS", half, 1)
    pt = pick("prefill_threads", prefill_threads, "RSI_MODEL_PREFILL_THREADS", max(1, min(8, cores)), 1)
    b = pick("max_batch", max_batch, "RSI_MODEL_MAX_BATCH", half, 1)
    cache_mb = pick("prefix_cache_mb", prefix_cache_mb, "RSI_MODEL_PREFIX_CACHE_MB", cache_rule // MIB, 0)
    q = pick("max_queue", max_queue, "RSI_MODEL_MAX_QUEUE", 64, 1)
    spec = pick("speculate", speculate, "RSI_MODEL_SPECULATE", DEFAULT_SPECULATE, 0)
    k = kernels or env.get("RSI_MODEL_KERNELS") or DEFAULT_KERNELS
    if k not in KERNELS:
        raise RsiError(f"kernels: '{k}' is not one of {', '.join(KERNELS)}", exit_code=2)
    if k != DEFAULT_KERNELS:
        overrides.append("kernels")
    return ServerSizing(
        cores=cores,
        memory_bytes=memory_bytes,
        threads=t,
        prefill_threads=pt,
        max_batch=b,
        prefix_cache_bytes=cache_mb * MIB,
        max_queue=q,
        kernels=k,
        speculate=spec,
        overrides=tuple(overrides),
    )


__all__ = ["KERNELS", "ServerSizing", "machine_cores", "machine_memory", "size_server"]
