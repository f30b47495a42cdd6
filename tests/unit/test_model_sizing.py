"""The server's sizing rule: figures from the machine, overrides by argument or environment."""

from __future__ import annotations

import pytest

from rsi.core.errors import RsiError
from rsi.models.sizing import MIB, size_server

GIB = 1 << 30


def test_two_cores_run_one_decode_thread_no_batching_and_a_bounded_cache() -> None:
    s = size_server(env={}, cores=2, memory_bytes=24 * GIB)
    assert (s.threads, s.prefill_threads, s.max_batch) == (1, 2, 1)
    assert s.prefix_cache_bytes == 1024 * MIB and s.kernels == "default" and s.overrides == ()
    assert "2 cores" in s.summary() and "prefix cache 1024 MiB" in s.summary()


def test_bigger_and_smaller_machines() -> None:
    big = size_server(env={}, cores=32, memory_bytes=256 * GIB)
    assert (big.threads, big.prefill_threads, big.max_batch) == (4, 8, 4)
    small = size_server(env={}, cores=1, memory_bytes=1 * GIB)
    assert (small.threads, small.max_batch) == (1, 1) and small.prefix_cache_bytes == 102 * MIB


def test_overrides_win_and_are_named() -> None:
    env = {"RSI_MODEL_MAX_BATCH": "3", "RSI_MODEL_PREFIX_CACHE_MB": "0"}
    s = size_server(threads=2, env=env, cores=2, memory_bytes=8 * GIB)
    assert (s.threads, s.max_batch, s.prefix_cache_bytes) == (2, 3, 0)
    assert set(s.overrides) == {"threads", "max_batch", "prefix_cache_mb"} and "prefix cache off" in s.summary()


@pytest.mark.parametrize(
    "kwargs", [{"env": {"RSI_MODEL_THREADS": "two"}}, {"max_batch": 0, "env": {}}, {"kernels": "int4", "env": {}}]
)
def test_bad_overrides_are_refused(kwargs: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(RsiError):
        size_server(cores=2, memory_bytes=GIB, **kwargs)
