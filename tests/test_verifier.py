"""The verifier accepts every reasonable spelling of the gold result, rejects wrong ones, and round-trips format_answer."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlenv.data.hardness import is_ordered
from sqlenv.env.similarity import result_similarity
from sqlenv.env.verifier import VERIFIER_VERSION, format_answer, verify

PEOPLE = [("Joe", 52), ("Tim", 32), ("Ann", 29)]
NAMES = [("Joe",), ("Tim",), ("Ann",)]

# (answer, gold rows, ordered, expected verdict)
CASES = [
    # --- single values, numbers
    ("42", [(42,)], False, True),
    ("41", [(42,)], False, False),
    ("5", [(5.0,)], False, True),
    ("5.0", [(5,)], False, True),
    ("5.00", [(5,)], False, True),
    ("5.5", [(5,)], False, False),
    ("1000000", [(1000001,)], False, False),  # integers compare exactly, no relative slack
    ("3.14", [(3.14159,)], False, True),  # rounded to the two decimals shown
    ("3.1416", [(3.14159,)], False, True),
    ("3.15", [(3.14159,)], False, False),
    ("3.1", [(3.14159,)], False, False),  # one decimal is not enough
    ("3", [(3.14159,)], False, False),
    ("0.3", [(0.1 + 0.2,)], False, True),  # relative tolerance
    ("1e-10", [(1.2e-10,)], False, True),  # absolute tolerance for tiny values
    ("12345.67", [(12345.6666667,)], False, True),
    ("7", [("7",)], False, True),  # numeric strings compare numerically
    ("7.0", [("7",)], False, True),
    ("1,234", [(1234,)], False, True),  # thousands separator in a single value
    # --- strings: case, whitespace, quotes and wrappings
    ("france", [("France",)], False, True),
    ("  FRANCE  ", [("France",)], False, True),
    ("'France'", [("France",)], False, True),
    ('"France"', [("France",)], False, True),
    ("`France`", [("France",)], False, True),
    ("```\nFrance\n```", [("France",)], False, True),
    ("```text\nFrance\n```", [("France",)], False, True),
    ("Answer: France", [("France",)], False, True),
    ("The answer is France.", [("France",)], False, True),
    ("The answer is: 42", [(42,)], False, True),
    ("Final answer: 42", [(42,)], False, True),
    ("**Answer:** 42", [(42,)], False, True),
    ("\\boxed{42}", [(42,)], False, True),
    ("France.", [("France",)], False, True),
    ("Inc.", [("Inc.",)], False, True),  # a trailing period that belongs to the value
    ("3.", [(3,)], False, True),
    ("Germany", [("France",)], False, False),
    ("Smith, John", [("Smith, John",)], False, True),  # a comma inside one value
    ("O'Brien", [("O'Brien",)], False, True),
    # --- NULL and empty results
    ("None", [(None,)], False, True),
    ("null", [(None,)], False, True),
    ("NULL", [(None,)], False, True),
    ("0", [(None,)], False, False),
    ("[]", [], False, True),
    ("", [], False, True),
    ("none", [], False, True),
    ("None.", [], False, True),
    ("No results", [], False, True),
    ("no rows", [], False, True),
    ("empty", [], False, True),
    ("nothing", [], False, True),
    ("Answer: []", [], False, True),
    ("0", [], False, False),
    ("[]", [(1,)], False, False),
    ("Joe", [], False, False),
    # --- lists in every syntax
    ("Joe, Tim, Ann", NAMES, False, True),
    ("Ann, Joe, Tim", NAMES, False, True),  # unordered gold: any order
    ("Ann, Joe, Tim", NAMES, True, False),  # ordered gold: order matters
    ("Joe, Tim, Ann", NAMES, True, True),
    ("Joe\nTim\nAnn", NAMES, False, True),
    ("- Joe\n- Tim\n- Ann", NAMES, False, False),  # bullets are not stripped
    ("Joe; Tim; Ann", NAMES, False, True),
    ('["Joe", "Tim", "Ann"]', NAMES, False, True),
    ("['Joe', 'Tim', 'Ann']", NAMES, False, True),
    ("('Joe', 'Tim', 'Ann')", NAMES, False, True),
    ("[Joe, Tim, Ann]", NAMES, False, True),
    ("Joe, Tim and Ann", NAMES, False, True),
    ("Joe, Tim", NAMES, False, False),
    ("Joe, Tim, Ann, Bob", NAMES, False, False),
    ("Smith, John\nDoe, Jane", [("Smith, John",), ("Doe, Jane",)], False, True),
    ('["Smith, John", "Doe, Jane"]', [("Smith, John",), ("Doe, Jane",)], False, True),
    # --- duplicates count
    ("a, a, b", [("a",), ("a",), ("b",)], False, True),
    ("a, b, b", [("a",), ("a",), ("b",)], False, False),
    ("a, b", [("a",), ("a",), ("b",)], False, False),
    # --- tables
    ("Joe | 52\nTim | 32\nAnn | 29", PEOPLE, True, True),
    ("Joe, 52\nTim, 32\nAnn, 29", PEOPLE, True, True),
    ("Joe\t52\nTim\t32\nAnn\t29", PEOPLE, True, True),
    ("Joe | 52; Tim | 32; Ann | 29", PEOPLE, True, True),
    ("Joe, 52; Tim, 32; Ann, 29", PEOPLE, True, True),
    ("[['Joe', 52], ['Tim', 32], ['Ann', 29]]", PEOPLE, True, True),
    ('[{"name": "Joe", "age": 52}, {"name": "Tim", "age": 32}, {"name": "Ann", "age": 29}]', PEOPLE, True, True),
    ("| name | age |\n|------|-----|\n| Joe | 52 |\n| Tim | 32 |\n| Ann | 29 |", PEOPLE, True, True),
    ("52 | Joe\n32 | Tim\n29 | Ann", PEOPLE, True, True),  # columns permuted consistently
    ("Ann | 29\nJoe | 52\nTim | 32", PEOPLE, False, True),
    ("Ann | 29\nJoe | 52\nTim | 32", PEOPLE, True, False),
    ("Joe | 32\nTim | 52\nAnn | 29", PEOPLE, False, False),  # values in the wrong rows
    ("Joe | 52\nTim | 32", PEOPLE, False, False),
    ("Joe | 52 | x\nTim | 32 | y\nAnn | 29 | z", PEOPLE, False, False),
    ("Joe, 52", [("Joe", 52)], False, True),  # a single row
    ("Joe\n52", [("Joe", 52)], False, True),
    ("1 | 2\n2 | 3\n3 | 1", [(2, 1), (3, 2), (1, 3)], False, True),  # swap needs the permutation
    ("Joe | None", [("Joe", None)], False, True),
    ("Joe | null", [("Joe", None)], False, True),
    ("Joe | 3.14", [("Joe", 3.14159)], False, True),
]


@pytest.mark.parametrize("answer, gold, ordered, expected", CASES)
def test_verify_table(answer, gold, ordered, expected):
    verdict = verify(answer, gold, ordered)
    assert verdict.correct is expected, verdict.reason
    assert isinstance(verdict.reason, str) and verdict.reason


@pytest.mark.parametrize(
    "answer, gold, ordered, fragment",
    [
        ("41", [(42,)], False, "value mismatch: got '41', expected '42'"),
        ("Joe, Tim", NAMES, False, "expected 3 rows, got 2"),
        ("Joe", [], False, "expected no rows"),
        ("[]", NAMES, False, "got none"),
        ("Joe | 52 | x", [("Joe", 52)], False, "expected 2 columns"),
        ("Ann, Joe, Tim", NAMES, True, "wrong order"),
    ],
)
def test_rejections_say_why(answer, gold, ordered, fragment):
    verdict = verify(answer, gold, ordered)
    assert not verdict.correct and fragment in verdict.reason


def test_version_is_recorded():
    assert VERIFIER_VERSION == "1.1"


# ------------------------------------------------------------------------- format_answer
@pytest.mark.parametrize(
    "rows, text",
    [
        ([], "[]"),
        ([(42,)], "42"),
        ([(2.5,)], "2.5"),
        ([(0.1 + 0.2,)], "0.3"),
        ([(2 / 3,)], "0.6666666667"),
        ([(None,)], "None"),
        ([("Smith, John",)], "Smith, John"),
        ([("a",), ("b",), ("c",)], "a, b, c"),
        ([("a", 1), ("b", None)], "a | 1\nb | None"),
        ([(b"\x00\x01",)], "<blob 2 bytes>"),
        ([(1.7976931348623157e308,)], "1.7976931348623157e+308"),  # 10 digits would round up to inf
        ([(1, "9\n"), (2, "x")], '[[1, "9\\n"], [2, "x"]]'),  # a trailing line break would split the row
        ([("9\n",), ("x",)], '[["9\\n"], ["x"]]'),
    ],
)
def test_format_answer_canonical_text(rows, text):
    assert format_answer(["c"] * (len(rows[0]) if rows else 1), rows) == text


TRICKY_VALUES = [
    None, 0, 1, -1, 42, 10**18, 3.14159, 2.5, 1e-7, 1e20, -0.0, 0.1 + 0.2, 2 / 3, float("inf"),
    "", " ", "a", "A", "Smith, John", "a|b", "x\ny", "none", "null", "[]", "no results", "'q'", '"dq"',
    "Answer: x", "3.", "1,234", "007", "  pad  ", "tab\there", "semi;colon", "```x```", "é ü",
    "a, b", "[1, 2]", "{'a': 1}", "(1, 2)", "True", "nan", "-", "|", ",", ";", "\u2028", "x.", "...", "**b**",
]


@pytest.mark.parametrize("seed", range(6))
def test_format_answer_round_trips(seed):
    """verify(format_answer(cols, R), R, ordered) holds for every shape and awkward value."""
    rng = random.Random(seed)
    for _ in range(400):
        n = rng.choice([0, 1, 1, 2, 3, 5, 8, 30])
        k = rng.choice([1, 1, 2, 3, 5])
        rows = [tuple(rng.choice(TRICKY_VALUES) for _ in range(k)) for _ in range(n)]
        text = format_answer([f"c{i}" for i in range(k)], rows)
        for ordered in (False, True):
            verdict = verify(text, rows, ordered)
            assert verdict.correct, (rows, text, ordered, verdict.reason)


# Pieces of awkward cell text: row and cell separators of the reader, line breaks of every kind (a trailing
# one included), quotes, brackets, null spellings, unicode.
_PIECES = ["a", "Z", " ", ",", ", ", "|", " | ", ";", "\n", "\r", "\t", "\u2028", '"', "'", "`", "[", "]", "{",
           "}", ":", "é", "中", "-", ".", "0", "9", "null", "None", "[]"]  # fmt: skip
_CELL = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**18), 10**18),
    st.floats(allow_nan=False, allow_infinity=False),  # the float limits included
    st.lists(st.sampled_from(_PIECES), max_size=6).map("".join),
)


@st.composite
def _result_sets(draw):
    width = draw(st.integers(1, 3))
    return draw(st.lists(st.tuples(*[_CELL] * width), max_size=5)), width


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(_result_sets(), st.booleans())
def test_every_canonical_answer_reads_back(result, ordered):
    """Property: whatever the gold rows hold, the canonical text of them is judged correct against them."""
    rows, width = result
    text = format_answer([f"c{i}" for i in range(width)], rows)
    verdict = verify(text, rows, ordered)
    assert verdict.correct, (rows, text, verdict.reason)


def test_round_trip_of_a_large_result_is_fast_enough():
    rows = [(i, f"name {i}", i / 7) for i in range(10_000)]
    assert verify(format_answer(["a", "b", "c"], rows), rows, True).correct


def test_format_answer_changes_are_rejected():
    rows = [("Joe", 52), ("Tim", 32), ("Ann", 29)]
    assert not verify(format_answer(["n", "a"], rows[:2]), rows, False).correct
    assert not verify(format_answer(["n", "a"], rows + [rows[0]]), rows, False).correct
    assert not verify(format_answer(["n", "a"], [("Joe", 52), ("Tim", 33), ("Ann", 29)]), rows, False).correct


# ---------------------------------------------------------------------------- is_ordered
@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT name FROM singer ORDER BY age", True),
        ("SELECT name FROM singer ORDER BY age DESC LIMIT 3", True),
        ("SELECT name FROM singer", False),
        ("SELECT count(*) FROM singer", False),
        ("SELECT * FROM (SELECT name FROM singer ORDER BY age)", False),
        ("SELECT name FROM singer WHERE age > (SELECT age FROM singer ORDER BY age LIMIT 1)", False),
        ("WITH s AS (SELECT name FROM singer ORDER BY age) SELECT * FROM s", False),
        ("WITH s AS (SELECT name, age FROM singer) SELECT name FROM s ORDER BY age", True),
        ("SELECT name FROM a UNION SELECT name FROM b ORDER BY name", True),
        ("SELECT name FROM a UNION SELECT name FROM b", False),
        ("SELECT name FROM a EXCEPT SELECT name FROM b ORDER BY 1", True),
        ("(SELECT name FROM singer ORDER BY age)", True),
        ("this is not sql ((", False),
        ("", False),
    ],
)
def test_is_ordered(sql, expected):
    assert is_ordered(sql) is expected


# --------------------------------------------------------------------- result_similarity
GOLD = [("Joe", 52), ("Tim", 32), ("Ann", 29), ("Ann", 29)]


@pytest.mark.parametrize(
    "pred",
    [
        GOLD,
        list(reversed(GOLD)),
        [(age, name) for name, age in GOLD],  # columns permuted
        [("joe ", 52.0), ("Tim", "32"), ("ANN", 29), ("Ann", 29)],  # normalised cells
    ],
)
def test_similarity_is_one_for_matching_results(pred):
    assert result_similarity(pred, GOLD) == 1.0


@pytest.mark.parametrize(
    "pred",
    [
        [],
        GOLD[:3],  # a duplicate missing
        GOLD + [("Bob", 40)],
        [(name,) for name, _ in GOLD],
        [(name, age, "x") for name, age in GOLD],
        [("Zed", 1)],
        [(1,)],
    ],
)
def test_similarity_is_below_one_otherwise(pred):
    score = result_similarity(pred, GOLD)
    assert 0.0 <= score < 1.0


def test_similarity_bounds_and_empties():
    assert result_similarity([], []) == 1.0
    assert result_similarity([], GOLD) == 0.0
    assert result_similarity(GOLD, []) == 0.0
    assert result_similarity([("nothing", "alike")], GOLD) == 0.0


def test_similarity_grows_as_rows_are_found_and_shrinks_with_noise():
    found = [result_similarity(GOLD[:k], GOLD) for k in range(0, len(GOLD) + 1)]
    assert found == sorted(found) and found[-1] == 1.0 and len(set(found)) == len(found)
    noisy = [result_similarity(GOLD + [("x", i) for i in range(k)], GOLD) for k in range(0, 4)]
    assert noisy == sorted(noisy, reverse=True) and len(set(noisy)) == len(noisy)


def test_similarity_rewards_the_right_column_among_extras():
    names_only = [(name,) for name, _ in GOLD]
    star = [(name, age, "extra") for name, age in GOLD]
    wrong = [("nope",) for _ in GOLD]
    assert result_similarity(names_only, GOLD) > result_similarity(wrong, GOLD)
    assert result_similarity(star, GOLD) > result_similarity(wrong, GOLD)


def test_similarity_on_ten_thousand_rows():
    gold = [(i, f"name {i}", i * 0.5) for i in range(10_000)]
    assert result_similarity(gold, gold) == 1.0
    assert 0.9 < result_similarity(gold[:9_000], gold) < 1.0


# Cells of larger results: the null spellings as text beside real NULLs, empty and blank text, line breaks inside
# text, numbers written as text, and ordinary names that sort on both sides of "null"/"none".
_LARGE_PIECES = ["", " ", "Null", "None", "null", "NULL", "none", "Ocana", "Aachen", "Zurich", "nora", "o", "a\nb",
                 "x\n", "007", "1.50", "0", "-3", "1,234", "a, b", "a|b", "[]", "n/a", "é"]  # fmt: skip


@st.composite
def _large_results(draw):
    """1 to 3 columns, 1 to 250 rows (the bipartite fallback stops at 60), duplicates likely."""
    width = draw(st.integers(1, 3))
    n = draw(st.integers(1, 250))
    rng = draw(st.randoms(use_true_random=False))
    pool = [None, *_LARGE_PIECES, *(rng.randint(-5, 300) for _ in range(5)), 2.5, 1 / 3,
            *(f"City {rng.randint(0, 999):03d}" for _ in range(n))]  # fmt: skip
    distinct = [tuple(rng.choice(pool) for _ in range(width)) for _ in range(max(1, n // rng.choice([1, 1, 2, 5])))]
    return [rng.choice(distinct) for _ in range(n)], width


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_large_results(), st.booleans())
def test_canonical_answer_of_a_large_result_reads_back(result, ordered):
    """Property: the canonical answer text of a result of any size is judged correct against the same rows, the
    text 'Null' / 'None' beside real NULLs included (a GROUP BY of 102 cities with 'Null' among them once failed)."""
    rows, width = result
    text = format_answer([f"c{i}" for i in range(width)], rows)
    verdict = verify(text, rows, ordered)
    assert verdict.correct, (len(rows), text[:300], verdict.reason)


def test_null_as_text_in_a_large_group_by():
    """The shape from the field: 102 cities, two rows each, grouped; one city is called 'Null'."""
    rows = [(c, 2) for c in ["Null", "Ocana", *(f"City{i:03d}" for i in range(100))]]
    assert verify(format_answer(["city", "count(*)"], rows), rows, False).correct
    assert verify(format_answer(["city", "count(*)"], rows), rows[::-1], False).correct


def test_a_null_spelled_null_beside_the_text_null_in_a_large_result():
    """'null' answers both a NULL and the city 'Null'; 'Nora' sorts between the two keys, so only the matching
    of the rows left after pairing equal ones decides (beyond the 60 rows of the full one-to-one matching)."""
    gold = [(c,) for c in [None, "Nora", "Null", *(f"City{i:03d}" for i in range(100))]]
    answer = "\n".join(["null", "Nora", "null", *(f"City{i:03d}" for i in range(100))])
    assert verify(answer, gold, False).correct
    assert not verify(answer.replace("Nora", "Nova"), gold, False).correct
