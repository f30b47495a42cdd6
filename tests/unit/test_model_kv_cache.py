"""The prefix cache's bookkeeping on small tensors: longest-prefix reuse, adapter isolation, the byte bound."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rsi.models.server.kv_cache import PrefixCache, common_prefix_len, kv_nbytes  # noqa: E402

LAYERS, HEADS, DIM = 2, 1, 4


def kv_for(ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fake KV whose every position holds its token id, so a copy shows which tokens it came from."""
    t = torch.tensor(ids, dtype=torch.float32).view(1, 1, -1, 1).expand(1, HEADS, len(ids), DIM).contiguous()
    return [(t.clone(), -t.clone()) for _ in range(LAYERS)]


def ids(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.long)


def test_common_prefix_len() -> None:
    assert common_prefix_len(ids(1, 2, 3), ids(1, 2, 4, 5)) == 2
    assert common_prefix_len(ids(1, 2), ids(1, 2, 3)) == 2
    assert common_prefix_len(ids(9), ids(1)) == 0
    assert common_prefix_len(ids(), ids(1)) == 0


def test_lookup_returns_a_private_copy_of_the_longest_common_prefix() -> None:
    c = PrefixCache(1 << 20, min_match=2)
    seq = list(range(10, 20))
    c.insert("base", torch.tensor(seq), kv_for(seq))
    n, kv = c.lookup("base", torch.tensor([*seq[:6], 99, 98]))
    assert n == 6 and kv is not None
    assert kv[0][0].shape == (1, HEADS, 6, DIM) and kv[0][0][0, 0, :, 0].tolist() == seq[:6]
    kv[0][0].zero_()  # the caller extends its copy; the kept entry is untouched
    n2, kv2 = c.lookup("base", torch.tensor(seq))
    assert n2 == len(seq) - 1, "one prompt token is always left to prefill"
    assert kv2 is not None and kv2[0][0][0, 0, :, 0].tolist() == seq[:-1]
    assert c.stats.hits == 2 and c.stats.cached_tokens == 6 + 9


def test_adapters_never_share_kv() -> None:
    c = PrefixCache(1 << 20, min_match=1)
    seq = [1, 2, 3, 4, 5]
    c.insert("lora-a#1", torch.tensor(seq), kv_for(seq))
    assert c.lookup("lora-b#2", torch.tensor([*seq, 6])) == (0, None)
    assert c.lookup("base", torch.tensor([*seq, 6])) == (0, None)
    assert c.lookup("lora-a#1", torch.tensor([*seq, 6]))[0] == 5
    c.drop_adapter("lora-a#1")
    assert c.lookup("lora-a#1", torch.tensor([*seq, 6])) == (0, None)


def test_the_byte_bound_holds_and_the_least_recently_used_goes_first() -> None:
    one = kv_nbytes(kv_for(list(range(8))))
    c = PrefixCache(3 * one, min_match=1)
    seqs = [[k * 100 + i for i in range(8)] for k in range(5)]
    for k, s in enumerate(seqs[:3]):
        c.insert(f"a{k}", torch.tensor(s), kv_for(s))
    c.lookup("a0", torch.tensor([*seqs[0], 1]))  # a0 is now the most recently used
    for k, s in enumerate(seqs[3:], start=3):
        c.insert(f"a{k}", torch.tensor(s), kv_for(s))
        assert c.nbytes <= c.max_bytes
    assert c.adapters() == {"a0", "a3", "a4"} and c.stats.evictions == 2
    too_big = list(range(40))
    assert not c.insert("x", torch.tensor(too_big), kv_for(too_big)) and c.nbytes <= c.max_bytes


def test_an_entry_the_new_one_extends_is_dropped() -> None:
    c = PrefixCache(1 << 20, min_match=1)
    c.insert("base", ids(1, 2, 3), kv_for([1, 2, 3]))
    c.insert("base", ids(1, 2, 3, 4, 5), kv_for([1, 2, 3, 4, 5]))
    c.insert("base", ids(1, 2, 9), kv_for([1, 2, 9]))  # a sibling, not an extension: both stay
    assert len(c) == 2


def test_a_zero_budget_turns_it_off() -> None:
    c = PrefixCache(0)
    assert not c.enabled and not c.insert("base", ids(1, 2), kv_for([1, 2]))
