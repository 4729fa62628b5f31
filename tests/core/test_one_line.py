"""errors.one_line: the one way a message quotes an exception on one line."""

from __future__ import annotations

import pytest

from fusion_core.errors import LoadError, one_line


@pytest.mark.parametrize(
    ("error", "options", "expected"),
    [
        (LoadError("first\n  second\n"), {}, "first second"),  # every line, joined (the CLI's stderr)
        (ValueError("first\n  second"), {"first": True}, "first"),
        (KeyError("x"), {"named": True}, "KeyError: 'x'"),
        (ValueError(""), {"named": True}, "ValueError"),  # no text: the type alone
        (ValueError(""), {}, "ValueError"),
        (ValueError("a" * 500), {"first": True, "limit": 300}, "a" * 300),
        (ValueError("\n\nlate start\nmore"), {"first": True, "named": True}, "ValueError: late start"),
    ],
)
def test_one_line(error, options, expected):
    assert one_line(error, **options) == expected
