"""Side tables: what real databases hold beside the tables a question is about.

A Spider database has up to 18 tables and most questions read one or two of them; a domain of this world has 3–7,
every one of them asked about. So each database also gets up to `world.side_tables` of these (a number and a
choice drawn from the database's seed): user accounts, logs, settings, offices, vendors… — tables with ordinary
columns and rows, no foreign key to or from the domain, never asked about. An agent that describes every table, or
picks by habit instead of by the question, pays for it in calls and tokens; one that reads the table names against
the question does not.

They belong to no domain, so adding them carries no concept across the held-out-domain split. They are named in the
database's naming style after the domain's tables (so those keep their names) and filled after them from the same
random stream (so a database's domain tables, rows and questions are the same with and without them).
"""

from __future__ import annotations

import random

from sqlenv.data.world.spec import Domain, Table, cat, date, label, num, table, text

SIDE = Domain("side", (
    table("user account", "user accounts", (5, 30),
          label("username", "person"), text("email", "email"), cat("role", "Admin|Editor|Viewer|Guest", skew=1.2),
          date("created date", 2015, 2024), abbrev="usr"),
    table("log entry", "log entries", (40, 120),
          label("event code", "code", "EV", 6), cat("action", "Insert|Update|Delete|Login|Export"),
          date("logged date", 2020, 2024), text("note", "note", null=0.4), abbrev="log"),
    table("setting", "settings", (4, 8),
          label("key", "pick", "theme", "locale", "timezone", "currency", "page size", "retention days",
                "backup time", "mail sender"),
          text("value", "note"), abbrev="cfg"),
    table("office", "offices", (2, 9),
          label("name", "pattern", "{city} Office"), text("address", "address"), text("phone", "phone"),
          num("staff count", "uniform", 2, 80), abbrev="ofc"),
    table("vendor", "vendors", (4, 20),
          label("name", "company"), text("contact email", "email"), text("phone", "phone"),
          cat("status", "Active|Inactive|Suspended", skew=1.5), abbrev="vnd"),
    table("holiday", "holidays", (5, 12),
          label("name", "pick", "New Year", "Spring Break", "Founders Day", "Midsummer", "Harvest Day",
                "Winter Break", "Labour Day", "Remembrance Day", "Independence Day", "Open Day", "Staff Day",
                "Year End"),
          date("day", 2023, 2024), abbrev="hol"),
    table("import batch", "import batches", (5, 25),
          label("batch code", "code", "B", 5), num("row count", "lognorm", 400, 1.0, 1, 50000),
          date("run date", 2021, 2024), cat("status", "Done|Failed|Pending", skew=1.4), abbrev="imp"),
    table("document", "documents", (5, 40),
          label("title", "pattern", "{noun} Report", "{adj} {noun} Notes", "Minutes of the {noun} Meeting"),
          text("link", "url"), date("uploaded date", 2019, 2024), abbrev="doc"),
))


def pick_side_tables(seed: int, db_id: str, most: int, taken: set[str]) -> tuple[Table, ...]:
    """0..`most` side tables for one database (a stable draw from its seed), none whose concept it already has."""
    if most <= 0:
        return ()
    rng = random.Random(f"sqlenv-side-tables:{seed}:{db_id}")
    options = [t for t in SIDE.tables if t.singular not in taken and t.plural not in taken]
    k = min(rng.randint(0, most), len(options))
    chosen = set(rng.sample(range(len(options)), k))
    return tuple(t for i, t in enumerate(options) if i in chosen)
