"""Automatic prefix caching for the embedded engine (vLLM's idea, on whole sequences).

After a request finishes, the KV of its sequence (prompt + completion) is kept, keyed by the
adapter that computed it and its token ids. A later request for the same adapter whose prompt shares
a token prefix with a kept sequence starts from a copy of that KV cropped to the longest common
prefix, and only its new suffix is prefilled. An agent loop's next prompt is the previous prompt +
the reply + a new observation, so most of it is found here.

Bounded: the sum of the kept KV tensors never exceeds `max_bytes`; the least recently used entries
go first, and an entry another one extends (same adapter, its tokens a prefix of the new one's) is
dropped when the longer one arrives. Adapters never share KV: a LoRA changes the keys and values of
every layer it touches, so a lookup only sees entries of the same adapter key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

# One layer's (keys, values), each [batch=1, kv_heads, tokens, head_dim].
LayerKV = tuple[torch.Tensor, torch.Tensor]


def common_prefix_len(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest common prefix of two 1-D int tensors."""
    n = min(int(a.numel()), int(b.numel()))
    if n == 0:
        return 0
    diff = torch.nonzero(a[:n] != b[:n])
    return int(diff[0, 0]) if diff.numel() else n


def cache_layers(cache: Any) -> list[LayerKV]:
    """The (keys, values) of every layer of a transformers DynamicCache."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def kv_nbytes(kv: list[LayerKV]) -> int:
    return sum(k.element_size() * k.numel() + v.element_size() * v.numel() for k, v in kv)


@dataclass
class _Entry:
    adapter: str
    ids: torch.Tensor  # 1-D int64, the tokens whose KV `kv` holds (same length)
    kv: list[LayerKV]
    nbytes: int


@dataclass
class CacheStats:
    lookups: int = 0
    hits: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    entries: int = 0
    bytes: int = 0
    max_bytes: int = 0
    evictions: int = 0


class PrefixCache:
    """LRU of per-adapter sequence KV, bounded in bytes. Thread-safe."""

    def __init__(self, max_bytes: int, *, min_match: int = 16) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.min_match = max(1, min_match)  # shorter matches are not worth a copy
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = CacheStats(max_bytes=self.max_bytes)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, adapter: str, ids: torch.Tensor) -> tuple[int, list[LayerKV] | None]:
        """(n, kv): a private copy of the KV of `ids[:n]` for `adapter`, or (0, None).

        At least one token is always left to prefill: its logits start the completion.
        """
        with self._lock:
            self.stats.lookups += 1
            self.stats.prompt_tokens += int(ids.numel())
            best_key, best_n = None, 0
            for key, e in self._entries.items():
                if e.adapter != adapter:
                    continue
                n = common_prefix_len(e.ids, ids)
                if n > best_n:
                    best_key, best_n = key, n
            best_n = min(best_n, int(ids.numel()) - 1)
            if best_key is None or best_n < self.min_match:
                return 0, None
            entry = self._entries[best_key]
            self._entries.move_to_end(best_key)
            kv = [(k[:, :, :best_n].clone(), v[:, :, :best_n].clone()) for k, v in entry.kv]
            self.stats.hits += 1
            self.stats.cached_tokens += best_n
            return best_n, kv

    def insert(self, adapter: str, ids: torch.Tensor, kv: list[LayerKV]) -> bool:
        """Keep `kv` (already a private copy, length == len(ids)); False if it cannot fit at all."""
        if not self.enabled or ids.numel() == 0:
            return False
        nbytes = kv_nbytes(kv)
        if nbytes > self.max_bytes:
            return False
        with self._lock:
            # an entry this one extends (or repeats) is redundant now
            for key in [k for k, e in self._entries.items() if e.adapter == adapter and e.ids.numel() <= ids.numel()]:
                e = self._entries[key]
                if common_prefix_len(e.ids, ids) == e.ids.numel():
                    self._drop(key)
            while self._entries and self._bytes + nbytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.stats.evictions += 1
            self._entries[self._next] = _Entry(adapter, ids.clone(), kv, nbytes)
            self._next += 1
            self._bytes += nbytes
            self._sync()
            return True

    def drop_adapter(self, adapter: str) -> None:
        """Forget every entry of `adapter` (unloaded, or a name loaded again with other weights)."""
        with self._lock:
            for key in [k for k, e in self._entries.items() if e.adapter == adapter]:
                self._drop(key)
            self._sync()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._sync()

    def reset(self) -> None:
        """Empty, with the counters at zero."""
        self.clear()
        self.stats = CacheStats(max_bytes=self.max_bytes)

    def _drop(self, key: int) -> None:
        e = self._entries.pop(key)
        self._bytes -= e.nbytes

    def _sync(self) -> None:
        self.stats.entries = len(self._entries)
        self.stats.bytes = self._bytes

    def adapters(self) -> set[str]:
        with self._lock:
            return {e.adapter for e in self._entries.values()}


__all__ = ["CacheStats", "LayerKV", "PrefixCache", "cache_layers", "common_prefix_len", "kv_nbytes"]
