from src.util import greet


def test_greet():
    assert greet('a') == 'hello a'
