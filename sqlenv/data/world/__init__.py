"""The procedural SQL world: the default, embedded data source (no download needed).

`build_world(out_dir, seed=...)` writes SQLite databases over everyday domains (school,
airline, hospital, retail, ... see `DOMAINS`) in Spider layout and returns natural-language
questions with gold SQL at all four Spider hardness levels, each one checked by the oracle
(`checks.py`). Same seed, same bytes; another seed, another world. Modules:

- spec.py, catalog_*.py, domains.py: what each domain's tables are, as concepts;
- naming.py: per-database naming styles (snake_case, CamelCase, abbreviations, prefixes);
- values.py, populate.py: seeded realistic values with skew, written deterministically;
- schema.py: the in-memory view templates read; templates*.py: question templates;
- checks.py: the oracle gate; generate.py: per-database sampling; build.py: the whole world.
"""

from sqlenv.data.world.build import WorldResult, build_world
from sqlenv.data.world.domains import DOMAINS
from sqlenv.data.world.naming import STYLE_NAMES

__all__ = ["DOMAINS", "STYLE_NAMES", "WorldResult", "build_world"]
