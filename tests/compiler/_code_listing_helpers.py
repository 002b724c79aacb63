"""A helper in another module, called as module.function from tests/compiler/test_code_listing.py."""


def plus_one_while_small(x):
    while x < 5.0:
        x = x + 1.0
    return x
