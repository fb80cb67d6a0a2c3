"""Value generators for one database: realistic labels, skewed numbers, ISO dates.

Every draw goes through the database's own `random.Random` and its own seeded `Faker`
instance (`Faker.seed_instance`), never through global random state, so a database's
contents are a pure function of its seed. Dates are drawn from the rng, not from Faker's
date helpers, because those are relative to *today* and would change the data daily.

Skew is deliberate: numbers are mostly log-normal (a few big salaries, many small
ones), categories and foreign-key targets follow a Zipf-like popularity over an order
shuffled per database, so "most common" and "has no ..." questions have real answers.
"""

from __future__ import annotations

import datetime as dt
import math
import random

from faker import Faker

from sqlenv.data.world.spec import Column

# Word lists for composed labels. Faker has no titles or product names that read well.
_ADJ = ("Silent Golden Hidden Broken Crimson Distant Electric Frozen Gentle Hollow Infinite Lonely "
        "Midnight Northern Quiet Restless Scarlet Secret Silver Velvet Wild Bright Burning Endless "
        "Fading Ancient Amber Azure Lucky Brave").split()
_NOUN = ("River Garden Horizon Mirror Ocean Shadow Storm Harbor Echo Kingdom Lantern Meadow Mountain "
         "Orchard Signal Summer Tide Valley Window Winter Forest Promise Journey Castle Island Compass "
         "Feather Bridge Ember Canyon").split()
_PRODUCT = (("Classic Deluxe Compact Ultra Smart Eco Pro Mini Premium Travel Urban Nordic").split(),
            ("Bamboo Steel Leather Cotton Ceramic Glass Oak Wool Carbon Linen Copper Cork").split(),
            ("Lamp Chair Backpack Mug Jacket Kettle Desk Blanket Bottle Speaker Notebook Wallet Helmet "
             "Watch Tent").split())
_DISH = (("Grilled Roasted Spicy Smoked Crispy Braised Steamed Glazed Stuffed Charred").split(),
         ("Chicken Salmon Tofu Beef Shrimp Lamb Mushroom Duck Pork Eggplant Halloumi Cod").split(),
         ("Salad Curry Tacos Risotto Bowl Sandwich Skewers Stew Noodles Pizza Burger Soup").split())
_TITLE_PATTERNS = ("The {adj} {noun}", "{adj} {noun}", "{noun} of {noun2}", "The {noun} and the {noun2}",
                   "{adj} {nouns}", "A {adj} {noun}")


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def zipf_weights(n: int, s: float) -> list[float]:
    """Cumulative Zipf weights 1/(rank+1)^s; s=0 is uniform."""
    cum, total = [], 0.0
    for r in range(n):
        total += 1.0 / (r + 1) ** s
        cum.append(total)
    return cum


class ValueSource:
    """All randomness of one database: an rng and a Faker, both seeded from `seed`."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.fake = Faker("en_US")
        self.fake.seed_instance(seed)

    # --- labels -------------------------------------------------------------------------
    def _fill(self, pattern: str) -> str:
        r, f = self.rng, self.fake
        noun, noun2 = r.sample(_NOUN, 2)
        return pattern.format(adj=r.choice(_ADJ), noun=noun, noun2=noun2, nouns=_plural(noun), nouns2=_plural(noun2),
                              city=f.city(),
                              last=f.last_name(), first=f.first_name(), street=f.street_name())

    def label(self, col: Column) -> str:
        """One label candidate; uniqueness is the caller's job (it retries)."""
        f, r, g = self.fake, self.rng, col.gen
        if g == "person":
            return f"{f.first_name()} {f.last_name()}"
        if g == "company":
            return f.company()
        if g == "city":
            return f.city()
        if g == "country":
            return f.country()
        if g == "street":
            return f.street_address()
        if g == "title":
            return self._fill(r.choice(_TITLE_PATTERNS))
        if g == "product":
            return " ".join(r.choice(part) for part in _PRODUCT)
        if g == "dish":
            return " ".join(r.choice(part) for part in _DISH)
        if g == "pattern":  # params are format patterns, e.g. "{city} Art Museum"
            return self._fill(r.choice(col.params))
        if g == "pick":  # a fixed vocabulary ("Cardiology", ...), drawn without repeats by retrying
            return r.choice(col.params)
        if g == "code":  # params: prefix, number of digits -> "FL4821"
            prefix, digits = col.params
            return f"{prefix}{r.randint(10 ** (digits - 1), 10 ** digits - 1)}"
        raise ValueError(f"unknown label generator {g!r}")

    # --- other kinds ------------------------------------------------------------------------
    def text(self, col: Column) -> str:
        f, g = self.fake, col.gen
        if g == "email":
            return f.email()
        if g == "phone":
            return f.numerify("###-###-####")
        if g == "address":
            return f.street_address()
        if g == "note":
            return f.sentence(nb_words=6)
        if g == "url":
            return f"https://{f.domain_name()}"
        raise ValueError(f"unknown text generator {g!r}")

    def number(self, col: Column) -> int | float:
        dist, *a = col.params
        r = self.rng
        if dist == "uniform":
            lo, hi = a
            v = r.uniform(lo, hi) if col.gen == "real" else r.randint(int(lo), int(hi))
        elif dist == "lognorm":  # median, spread (sigma of log), clip lo, clip hi
            median, spread, lo, hi = a
            v = min(max(median * math.exp(r.gauss(0.0, spread)), lo), hi)
        elif dist == "normal":
            mean, sd, lo, hi = a
            v = min(max(r.gauss(mean, sd), lo), hi)
        else:
            raise ValueError(f"unknown distribution {dist!r}")
        # Reals keep two decimals (prices, ratings) so questions can quote them exactly.
        return round(v, 2) if col.gen == "real" else int(round(v))

    def date(self, col: Column) -> str:
        first, last = col.params
        start = dt.date(first, 1, 1).toordinal()
        end = dt.date(last, 12, 31).toordinal()
        # Skewed towards recent days (activity grows over time): max of two uniforms.
        day = max(self.rng.randint(start, end), self.rng.randint(start, end))
        return dt.date.fromordinal(day).isoformat()

    def popularity(self, n: int, s: float) -> tuple[list[int], list[float]]:
        """A per-database shuffled order of n targets and cumulative Zipf weights over it."""
        order = list(range(n))
        self.rng.shuffle(order)
        return order, zipf_weights(n, s)

    def pick_weighted(self, order: list[int], cum: list[float]) -> int:
        return self.rng.choices(order, cum_weights=cum)[0]
