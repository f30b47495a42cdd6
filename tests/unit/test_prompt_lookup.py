"""Prompt lookup's guesses: what followed the latest earlier occurrence of the current suffix."""

from __future__ import annotations

from rsi.models.server.decode import Row
from rsi.models.server.speculate import PromptLookup


def test_the_guess_is_what_followed_the_latest_match_of_the_longest_suffix() -> None:
    look = PromptLookup([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    for tok in (2, 3):
        look.push(tok)
    # "2 3" occurred twice before; the latest was followed by 7 8 2 3
    assert look.draft(3) == [7, 8, 2]
    assert look.draft(0) == []


def test_a_lone_token_match_makes_no_guess_and_the_suffix_never_matches_itself() -> None:
    look = PromptLookup([5, 6, 7])
    look.push(5)  # only a 1-gram matches: a guess from it would mostly be wrong
    assert look.draft(4) == []
    look = PromptLookup([1, 2])
    assert look.draft(4) == []  # the suffix "1 2" is not followed by anything yet


def test_guesses_stop_at_the_end_of_what_is_known() -> None:
    look = PromptLookup([4, 5, 6, 4, 5])
    assert look.draft(8) == [6, 4, 5]


def _row(temperature: float, top_p: float = 1.0, seed: int = 7) -> Row:
    import threading

    import torch

    from rsi.models.server.decode import GenRequest

    req = GenRequest(model="m", messages=[], temperature=temperature, top_p=top_p, seed=seed)
    return Row(req, torch.tensor([1]), tok=None, eos_ids=[], cancel=threading.Event())  # type: ignore[arg-type]


def test_a_sampled_guess_is_kept_or_redrawn_so_tokens_keep_their_distribution() -> None:
    """Speculative sampling with a one-point draft: over many draws, the token frequencies match the
    request's own distribution (temperature, top-p), whichever token was guessed."""
    import torch

    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -1.0, -3.0])
    for guess in (0, 2, 5):
        row = _row(0.7, top_p=0.9, seed=guess)
        p = row.dist(logits)
        assert float(p[5]) == 0.0 and abs(float(p.sum()) - 1.0) < 1e-6  # top-p cut the tail
        # 6000 draws: a frequency's SD is below 0.0065, so 0.03 is over 4.5 SD; a sampler that kept the guess
        # (or ignored top-p) would be off by more than 0.1
        n = 6_000
        counts = torch.bincount(torch.tensor([row.choose(logits, guess) for _ in range(n)]), minlength=6)
        assert float((counts / n - p).abs().max()) < 0.03, (guess, counts / n, p)


def test_a_greedy_row_takes_the_argmax_whatever_the_guess() -> None:
    import torch

    row = _row(0.0)
    assert row.choose(torch.tensor([0.1, 3.0, 0.2]), guess=2) == 1
    assert row.choose(torch.tensor([0.1, 3.0, 0.2]), guess=1) == 1


def test_the_same_seed_draws_the_same_tokens() -> None:
    import torch

    logits = torch.tensor([1.0, 0.9, 0.8, 0.7])
    a, b = _row(1.0, seed=3), _row(1.0, seed=3)
    assert [a.choose(logits, 1) for _ in range(50)] == [b.choose(logits, 1) for _ in range(50)]
