"""How long the restart check's crash burst asks each answer to be."""

from pytest_k3accept.suites.restart import crash_tokens


def test_crash_tokens_fill_the_context_within_bounds() -> None:
    assert crash_tokens(None) == 1536
    assert crash_tokens(2048) == 1920
    assert crash_tokens(16384) == 16256
    assert crash_tokens(262144) == 16384
    assert crash_tokens(100) == 16
