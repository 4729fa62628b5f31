"""``fusion_config`` validation: family names, ``True``/``False``/options, options against each schema.

``{"qkv": True, "gate_up": False, "kv_proj": {"min_in_features": 1024}}``: the enabled
families in the user's order, each with its options checked against the family's
``options_schema()``. :func:`configured_family` gives the family configured with them
(what discovery and loading run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import InvalidFusionConfigError
from ..families import get_family

if TYPE_CHECKING:
    from ..families.base import FusionSpec

FusionConfig = Mapping[str, "bool | Mapping[str, Any]"]

#: An export that stock transformers would load wrong names its families with this prefix
#: in config.json: transformers refuses the name loudly ("Unknown fusion type"), we strip it.
GUARD_PREFIX = "fusion_core:"


def validate_fusion_config(fusion_config: FusionConfig | None) -> list[tuple[str, dict[str, Any]]]:
    """The enabled families of ``fusion_config``, in the user's order, with their options.

    Options (``{"qkv": {"option": value}}``) are checked against the family's
    ``options_schema()``; the returned options are the ones given (defaults are filled in
    by :meth:`FusionSpec.with_options`, so a ``fusion_config`` written to config.json
    records only what the user chose).

    Raises:
        UnknownFamilyError: a name that is not registered (the message lists the known ones).
        InvalidFusionConfigError: a value that is neither ``True``/``False`` nor a mapping,
            or an option the family does not know or of the wrong type (the message names
            the family and the option).
    """
    if fusion_config is None:
        return []
    if not isinstance(fusion_config, Mapping):
        raise InvalidFusionConfigError(
            f"fusion_config must be a mapping of family name -> True/False/options, got {type(fusion_config).__name__}"
        )
    enabled: list[tuple[str, dict[str, Any]]] = []
    for name, options in fusion_config.items():
        if isinstance(name, str):
            name = name.removeprefix(GUARD_PREFIX)  # a guarded export's name (see GUARD_PREFIX)
        spec = get_family(name)
        if options is False:
            continue
        if options is True:
            enabled.append((name, {}))
        elif isinstance(options, Mapping):
            try:
                spec.validate_options(options)
            except ValueError as e:
                raise InvalidFusionConfigError(str(e)) from None
            enabled.append((name, dict(options)))
        else:
            raise InvalidFusionConfigError(
                f"invalid option for fusion {name!r}: expected True, False or a mapping of options, got {options!r}"
            )
    return enabled


def configured_family(name: str, options: Mapping[str, Any] | None = None) -> FusionSpec:
    """The registered family ``name`` configured with ``options`` (what discovery and loading run).

    Raises:
        UnknownFamilyError: ``name`` is not registered.
        InvalidFusionConfigError: a bad option (see :func:`validate_fusion_config`).
    """
    try:
        return get_family(name).with_options(options)
    except ValueError as e:
        raise InvalidFusionConfigError(str(e)) from None
