"""Regular expressions from an adapter's config, bounded before anything matches them (issue 32).

PEFT matches ``target_modules`` / ``exclude_modules`` (a string: ``re.fullmatch``),
``rank_pattern`` / ``alpha_pattern`` keys (``re.match(r"(.*\\.)?(key)$", name)``) and
``layers_pattern`` with Python's backtracking engine, here (the ranks of an adapter's
tensors) and in PEFT's child. A pattern like ``(a+)+$`` or ``(.|.)*Z`` takes time
exponential in the name's length, and one with many ``.*`` a high power of it, so
:func:`check_pattern` refuses, before any match:

* a quantifier inside a repeated part (``(a+)+``, ``(\\w+\\.)*``): nested repetition;
* an alternation inside a repeated part (``(.|.)*``, ``(ab|cd)+``), where both sides can
  match the same text (single characters, ``(a|b)*``, are a class and allowed);
* more than :data:`MAX_REPEATS` repeated parts (``.*`` counts one): the match time is then at
  most a small power of the name's length (names are at most :data:`MAX_NAME_CHARS`);
* back-references, conditionals and look-arounds; patterns over :data:`MAX_PATTERN_CHARS`.

Real patterns pass: PEFT's documented ``.*decoder.*(SelfAttention|EncDecAttention).*(q|v)$``,
full module paths, ``model.layers.\\d+.self_attn.(q|k|v)_proj``.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import AdapterError, quoted

MAX_PATTERN_CHARS = 512
MAX_REPEATS = 3
MAX_NAME_CHARS = 300
#: config keys PEFT reads as regular expressions (a string value; lists are names)
STRING_PATTERNS = ("target_modules", "exclude_modules")
PATTERN_MAPS = ("rank_pattern", "alpha_pattern")


def check_pattern(pattern: Any, where: str) -> None:
    """Refuse a regular expression whose match time is not bounded by a small power of the name's length.

    Args:
        pattern: the pattern (anything else is refused too).
        where: the file and key, for the message.

    Raises:
        AdapterError: naming the pattern and what makes it unbounded.
    """
    import re._constants as c
    import re._parser as parser

    if not isinstance(pattern, str):
        raise AdapterError(f"{where}: {quoted(pattern, 60)} is not a string pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise AdapterError(f"{where}: a pattern of {len(pattern)} characters, more than {MAX_PATTERN_CHARS}; refused")
    try:
        parsed = parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise AdapterError(f"{where}: {quoted(pattern, 60)} is not a valid regular expression ({e})") from None
    repeats = 0

    def refuse(why: str) -> AdapterError:
        return AdapterError(
            f"{where}: pattern {quoted(pattern, 60)} {why}; its match time can grow without bound, refused "
            "(write the module names, or a pattern without nested repetition)"
        )

    def walk(items: Any, repeated: bool) -> None:
        nonlocal repeats
        for op, av in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                _low, high, sub = av
                many = high == c.MAXREPEAT or high > 1
                if many and repeated:
                    raise refuse("repeats a part that repeats (nested quantifiers)")
                if many:
                    repeats += 1
                    if repeats > MAX_REPEATS:
                        raise refuse(f"has more than {MAX_REPEATS} repeated parts")
                walk(sub, repeated or many)
            elif op == c.BRANCH:
                if repeated:
                    raise refuse("repeats an alternation (nested quantifiers)")
                for alt in av[1]:
                    walk(alt, repeated)
            elif op == c.SUBPATTERN:
                walk(av[-1], repeated)
            elif op == c.ATOMIC_GROUP:
                walk(av, repeated)
            elif op in (c.GROUPREF, c.GROUPREF_EXISTS, c.ASSERT, c.ASSERT_NOT):
                raise refuse("uses a back-reference, a conditional or a look-around")

    try:
        walk(parsed, False)
    except RecursionError:
        raise refuse("is nested too deeply") from None


def check_config_patterns(config: dict[str, Any], where: str) -> None:
    """Every pattern of a PEFT adapter config (:data:`STRING_PATTERNS`, :data:`PATTERN_MAPS` keys, ``layers_pattern``).

    Raises:
        AdapterError: naming the key and the pattern.
    """
    for key in STRING_PATTERNS:
        value = config.get(key)
        if isinstance(value, str):
            check_pattern(value, f"{where}: {key}")
    for key in PATTERN_MAPS:
        value = config.get(key)
        if isinstance(value, dict):
            for pattern in value:
                check_pattern(pattern, f"{where}: {key}")
    layers = config.get("layers_pattern")
    for pattern in [layers] if isinstance(layers, str) else layers if isinstance(layers, list) else []:
        check_pattern(pattern, f"{where}: layers_pattern")


def check_name(name: str, where: str) -> None:
    """A module name patterns are matched against: at most :data:`MAX_NAME_CHARS` characters."""
    if len(name) > MAX_NAME_CHARS:
        raise AdapterError(
            f"{where}: a module name of {len(name)} characters ({quoted(name, 60)}), more than {MAX_NAME_CHARS}; refused"
        )
