"""Shared pytest fixtures: small SQLite databases built fresh in each test's temporary folder, and tiny
random models per chat-template variant, built once per session."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

# ----------------------------------------------------------------------------- shop database
# A small shop in Spider layout (<dir>/shop/shop.sqlite) with the schema shapes the sandbox
# must describe: a composite primary key, foreign keys with and without explicit columns, a
# composite foreign key, a table name that needs quoting, an AUTOINCREMENT table (so the
# internal sqlite_sequence table exists), an index, a BLOB column, NULLs and non-ASCII text.

SHOP_CUSTOMERS = [
    (1, "Ada Lovelace", "London"),
    (2, "Grace Hopper", "New York"),
    (3, "Alan Turing", "London"),
    (4, "Émile Zola", None),
]
SHOP_PRODUCTS = [
    (1, "Notebook", 2.5, b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0d"),
    (2, "Pen", 1.25, None),
    (3, "Lamp", 19.99, None),
]
SHOP_ORDERS = [(1, 1, "2024-01-03"), (2, 1, "2024-02-11"), (3, 2, "2024-02-12"), (4, 3, "2024-03-01")]
SHOP_ORDER_ITEMS = [(1, 1, 2), (1, 2, 10), (2, 3, 1), (3, 1, 1), (3, 2, 3), (4, 3, 2)]


def build_shop_db(path: Path) -> Path:
    """Write the shop database at `path` (parents created); returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE customers (
            customer_id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            city TEXT
        );
        CREATE TABLE products (product_id INTEGER PRIMARY KEY, title TEXT, price REAL, photo BLOB);
        CREATE TABLE orders (
            order_id INTEGER PRIMARY KEY,
            customer_id INTEGER REFERENCES customers(customer_id),
            placed_on TEXT
        );
        CREATE TABLE "Order Items" (
            order_id INTEGER REFERENCES orders,
            product_id INTEGER REFERENCES products(product_id),
            quantity INTEGER,
            PRIMARY KEY (order_id, product_id)
        );
        CREATE TABLE shipments (
            shipment_id INTEGER PRIMARY KEY,
            order_id INTEGER,
            product_id INTEGER,
            FOREIGN KEY (order_id, product_id) REFERENCES "Order Items"(order_id, product_id)
        );
        CREATE INDEX orders_by_customer ON orders(customer_id);
        """
    )
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", SHOP_CUSTOMERS)
    con.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", SHOP_PRODUCTS)
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", SHOP_ORDERS)
    con.executemany('INSERT INTO "Order Items" VALUES (?, ?, ?)', SHOP_ORDER_ITEMS)
    con.execute("INSERT INTO shipments VALUES (1, 1, 2)")
    con.commit()
    con.close()
    return path


@pytest.fixture
def shop_db(tmp_path: Path) -> Path:
    """A fresh shop database file, alone in its own folder (tmp/shop/shop.sqlite)."""
    return build_shop_db(tmp_path / "shop" / "shop.sqlite")


# -------------------------------------------------------------------------- numbers database
def build_numbers_db(path: Path, n: int = 1000) -> Path:
    """A one-table database `numbers(n INTEGER PRIMARY KEY, label TEXT)` with rows 1..n, for
    cross-join and large-result tests; also a `bad_text` table holding invalid UTF-8."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE numbers (n INTEGER PRIMARY KEY, label TEXT)")
    con.executemany("INSERT INTO numbers VALUES (?, ?)", [(i, f"label {i}") for i in range(1, n + 1)])
    con.execute("CREATE TABLE bad_text (t TEXT)")
    con.execute("INSERT INTO bad_text VALUES (CAST(x'41ff42' AS TEXT))")
    con.commit()
    con.close()
    return path


@pytest.fixture
def numbers_db(tmp_path: Path) -> Path:
    """A fresh numbers database (1000 rows), alone in its own folder."""
    return build_numbers_db(tmp_path / "numbers" / "numbers.sqlite")


# ------------------------------------------------------------------------ tiny models by chat template
# The render-parity tests hold for every chat template the pipeline prepares: Qwen2.5's, and Qwen3's with
# `model.enable_thinking` off and on. Variant -> (tiny model family, enable_thinking at preparation).
TEMPLATE_VARIANTS: dict[str, tuple[str, bool]] = {
    "qwen2_5": ("qwen2", False),
    "qwen3_nothink": ("qwen3", False),
    "qwen3_think": ("qwen3", True),
}


class TinyModels:
    """Tiny random model folders by template variant, each built and then prepared as the `prepare_model`
    stage prepares a local folder (`sqlenv.models.prepare_base_model`, so provenance records the
    chat-template kwargs), once per session; tokenizers loaded once too."""

    def __init__(self, root: Path):
        self.root = root
        self._tokenizers: dict[tuple[str, str | None], Any] = {}

    def path(self, variant: str, chat_template: str | None = None) -> Path:
        from sqlenv.models import prepare_base_model
        from sqlenv.train.tiny_model import build_tiny_model

        family, thinking = TEMPLATE_VARIANTS[variant]
        out = self.root / (variant if chat_template is None else f"{variant}-{chat_template}")
        if not (out / "config.json").is_file():
            raw = build_tiny_model(self.root / f"raw-{family}", family=family)
            prepare_base_model(str(raw), out, chat_template=chat_template, enable_thinking=thinking)
        return out

    def tokenizer(self, variant: str, chat_template: str | None = None):
        from transformers import AutoTokenizer

        key = (variant, chat_template)
        if key not in self._tokenizers:
            self._tokenizers[key] = AutoTokenizer.from_pretrained(self.path(variant, chat_template))
        return self._tokenizers[key]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(params=list(TEMPLATE_VARIANTS))
def template_variant(request) -> str:
    """Parametrizes a test over the chat-template variants (`TEMPLATE_VARIANTS`)."""
    return request.param


def worker_threads(environ: Mapping[str, str], cores: int) -> int | None:
    """Torch threads for one pytest-xdist worker: its share of the `cores` when `make test` runs several
    workers (one per CPU), None when there is one worker or the user set OMP_NUM_THREADS."""
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in environ:
        return None
    return max(1, cores // workers)


def pytest_configure(config):
    """Each xdist worker's torch, and the stage processes it starts, get the worker's share of the cores
    (OMP_NUM_THREADS, as `pipeline.machine.set_threads` reads it): torch at the whole machine's threads in
    every worker oversubscribed the cores, and torch on 2 cores collapses when anything else runs (a clean
    CI run took 22 min 55 s before, 15 min 50 s after, on the 2-CPU AMD EPYC)."""
    from pipeline.machine import thread_count

    n = worker_threads(os.environ, thread_count())
    if n is not None:
        os.environ["OMP_NUM_THREADS"] = str(n)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(n)


def pytest_collection_modifyitems(session, config, items):
    """The smoke DAG (minutes, one test) first: under `make test`'s parallel workers it then runs beside
    all the rest instead of after them."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_smoke_dag.py"))
