"""The registry of everyday domains the procedural world draws its databases from.

`DOMAINS` lists the domain names in a fixed order (the build order, so database ids and
contents don't depend on dict or file ordering); `get_domain` returns a validated spec.
Catalogue mistakes (an FK to a later table, fewer than 3 or more than 7 tables, no
2-hop chain) fail at import, not halfway through a build.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlenv.data.world.catalog_commerce import COMMERCE_DOMAINS
from sqlenv.data.world.catalog_leisure import LEISURE_DOMAINS
from sqlenv.data.world.catalog_public import PUBLIC_DOMAINS
from sqlenv.data.world.spec import Domain

_ALL: tuple[Domain, ...] = (*PUBLIC_DOMAINS, *COMMERCE_DOMAINS, *LEISURE_DOMAINS)
for _d in _ALL:
    _d.validate()

DOMAINS: tuple[str, ...] = tuple(d.name for d in _ALL)
_BY_NAME = {d.name: d for d in _ALL}
if len(_BY_NAME) != len(_ALL):
    raise ValueError(f"duplicate domain names in {DOMAINS}")


def get_domain(name: str) -> Domain:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown domain {name!r}; known: {', '.join(DOMAINS)}") from None


def select_domains(names: Sequence[str] | None) -> list[Domain]:
    """The requested domains in registry order (None or empty: all); unknown names fail."""
    if not names:
        return list(_ALL)
    wanted = set(names)
    unknown = sorted(wanted - set(DOMAINS))
    if unknown:
        raise KeyError(f"unknown domain(s) {unknown}; known: {', '.join(DOMAINS)}")
    return [d for d in _ALL if d.name in wanted]
