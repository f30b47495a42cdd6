"""Prompt lookup's guesses: what followed the latest earlier occurrence of the current suffix."""

from __future__ import annotations

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
