"""One colour per fusion family, shared by the app and the saved tree images (issue 33: the
same family was maroon in one and blue in the other).

Derived from the family's name, never from the order families are listed or enabled in, so
turning one on or off never recolours the others.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from functools import cache

# Colour-blind safe (Okabe-Ito and Paul Tol), dark enough for white text on a badge, and
# none close to the amber of rejected candidates or the grey of mixed ancestors.
FAMILY_COLOURS = ("#56B4E9", "#CC79A7", "#999933", "#332288", "#009E73", "#882255", "#0072B2")


def family_colours(names: Iterable[str]) -> dict[str, str]:
    """A stable colour per family name: ``FAMILY_COLOURS[crc32(name) % n]``.

    Collisions among ``names`` (the registered families) are resolved deterministically:
    names are placed in sorted order, each taking the next free colour after its own, so
    the result depends only on the set of names, never on their order or which are enabled.

    Args:
        names: every registered family (not only the enabled ones).

    Returns:
        name -> colour as '#rrggbb'.
    """
    return dict(_family_colours(tuple(sorted(set(names)))))


@cache
def _family_colours(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    n = len(FAMILY_COLOURS)
    taken: set[int] = set()
    out = []
    for name in names:
        slot = zlib.crc32(name.encode()) % n
        if len(taken) < n:
            while slot in taken:
                slot = (slot + 1) % n
        taken.add(slot)
        out.append((name, FAMILY_COLOURS[slot]))
    return tuple(out)
