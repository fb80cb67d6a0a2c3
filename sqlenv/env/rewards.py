"""Named reward components for one SQL-agent episode; their weights are params.

Correctness is the gate: it is the only term that can reach 1.0. Every other term is small
shaping that changes *how* an agent gets there, never whether getting there pays. Each
component is a small pure function of what just happened, so the environment can sum them
per name (`COMPONENTS`) and logs can show which term moved.

- `correctness`: weight × 1 when the verifier accepts the submitted answer, else 0.
- `progress`: partial credit paid *with the answer* (right or wrong): weight × Φ, where Φ is
  the similarity of the episode's last successful query result to the gold result
  (`similarity.result_similarity`, 1.0 for the gold rows). It is a terminal bonus, not
  potential-based shaping: Ng et al.'s invariance needs Φ = 0 at termination, which would make
  the term sum to zero in every episode and tell GRPO (which sees only episode totals) nothing.
  An episode that ends without an answer earns no progress.
- `operational`: `step_cost` on every call made while the episode runs, plus `new_query_bonus`
  for a successful query whose result is *new*: its rows (as a multiset, whatever their order
  or column names) are not contained in a result seen earlier in the episode. So cosmetic
  variants of a query (case, whitespace, comments, aliases, an added LIMIT) are not new.
- `repeat_penalty`: an exact repeat (same tool, same normalised arguments) of one of the
  previous `repeat_window` calls. Older repeats are not penalised: re-checking a table much
  later is legitimate.
- `post_episode_penalty`: each call after the episode ended (TRL cannot stop a rollout at
  `answer`, so the model must learn to stop by itself). Such calls cost only this.
- `format`: a bonus for ending the episode with an `answer` call, right or wrong.
- `bound`: keeps the sum of all shaping terms (everything but correctness) inside
  ±`shaping_bound`: it is clip(shaping) − shaping, so the total stays the sum of components.

What the weights guarantee (`RewardConfig` refuses weights that would break it; property tests
over call sequences check it):
- answering never loses: ending any call sequence with a wrong `answer` totals at least as
  much as ending it without one (the model stopping, or the budget used up by more calls),
  because `format_reward` ≥ −`step_cost` and no unanswered call can gain (bonus ≤ −step_cost);
- nothing can be farmed: every episode without a correct answer totals at most
  `shaping_bound`, every correct one at least `correctness_weight − shaping_bound`, and
  `shaping_bound` < `correctness_weight` / 2.

`mode: binary` is the ablation switch: every shaping weight is 0 and the reward is correctness.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlenv.types import strict_kwargs

COMPONENTS: tuple[str, ...] = (
    "correctness",
    "progress",
    "operational",
    "repeat_penalty",
    "post_episode_penalty",
    "format",
    "bound",
)
SHAPING: tuple[str, ...] = tuple(c for c in COMPONENTS if c not in ("correctness", "bound"))
# Sums of a few dozen terms of this size are off by ~1e-16: a reach this far below the bound is below it.
_REACH_MARGIN = 1e-9
MODES: tuple[str, ...] = ("dense", "binary")


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward components (signs included: penalties are negative)."""

    mode: str = "dense"
    correctness_weight: float = 1.0
    progress_weight: float = 0.1
    new_query_bonus: float = 0.005
    step_cost: float = -0.01
    repeat_penalty: float = -0.2
    repeat_window: int = 3
    post_episode_penalty: float = -0.3
    format_reward: float = 0.1
    shaping_bound: float = 0.4

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.repeat_window < 0:
            problems.append(f"repeat_window must be >= 0 (0 disables it), got {self.repeat_window}")
        if self.correctness_weight <= 0:
            problems.append("correctness_weight must be > 0")
        if min(-self.step_cost, -self.repeat_penalty, -self.post_episode_penalty, self.progress_weight) < 0:
            problems.append("step_cost, repeat_penalty and post_episode_penalty must be <= 0, progress_weight >= 0")
        if not 0 <= self.new_query_bonus <= -self.step_cost:
            problems.append("new_query_bonus must be in [0, -step_cost]: a query must never pay for itself")
        if self.format_reward < -self.step_cost:
            problems.append("format_reward must be >= -step_cost: answering must never cost more than it pays")
        if not 0 <= self.shaping_bound < self.correctness_weight / 2:
            problems.append("shaping_bound must be in [0, correctness_weight / 2): shaping must never outweigh correctness")
        if problems:
            raise ValueError("invalid reward weights: " + "; ".join(problems))

    @cached_property
    def applied(self) -> "RewardConfig":
        """The weights in force: these in `dense` mode, correctness alone in `binary` mode."""
        if self.mode == "dense":
            return self
        zero = dict.fromkeys(("progress_weight", "new_query_bonus", "step_cost", "repeat_penalty",
                              "post_episode_penalty", "format_reward", "shaping_bound"), 0.0)  # fmt: skip
        return dataclasses.replace(self, **zero)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RewardConfig":
        """Build from a params section; unknown keys fail loudly (a typo must not silently keep a default)."""
        return cls(**strict_kwargs(cls, d, "reward config"))


def zero_components() -> dict[str, float]:
    """A fresh per-episode accumulator with every component at 0."""
    return dict.fromkeys(COMPONENTS, 0.0)


def correctness(accepted: bool, config: RewardConfig) -> float:
    """The gate: full weight for an answer the verifier accepts, nothing otherwise."""
    return config.correctness_weight if accepted else 0.0


def progress(phi_last: float, config: RewardConfig) -> float:
    """Partial credit with the answer: weight × Φ of the last successful query's result (0 if none)."""
    return config.progress_weight * phi_last


def operational(new_result: bool, config: RewardConfig) -> float:
    """Per-call step cost, plus the bonus for a successful query with a new result."""
    return config.step_cost + (config.new_query_bonus if new_result else 0.0)


def is_new_result(rows: Sequence[tuple], seen: Sequence[Counter]) -> bool:
    """Whether `rows` (as a multiset) is contained in none of the earlier results `seen`."""
    counted = Counter(rows)
    return not any(counted <= earlier for earlier in seen)


class SeenResults:
    """An episode's new results so far, for the `is_new_result` test (`add_if_new`) without
    counting rows it needs not: the step's own cost is a few microseconds, and counting a
    result into a multiset was two of them per query.

    A result cannot be contained in an earlier one that has fewer rows, nor in one that lacks
    its first row (a C-speed list scan); no rows, a single row found there, or the same list
    of rows is contained. Only otherwise are the two counted, each at most once per episode.
    """

    __slots__ = ("_rows", "_counts")

    def __init__(self) -> None:
        self._rows: list[Sequence[tuple]] = []
        self._counts: list[Counter | None] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add_if_new(self, rows: Sequence[tuple]) -> bool:
        """`is_new_result(rows, <the results added so far>)`; a new result is added."""
        if not self._rows:  # the episode's first result: new
            self._rows.append(rows)
            self._counts.append(None)
            return True
        counted = None
        for k, earlier in enumerate(self._rows):
            if len(rows) > len(earlier) or (rows and rows[0] not in earlier):
                continue  # not contained in this one
            if len(rows) <= 1 or rows == earlier:
                return False  # no rows, its one row is there too, or the same rows: contained
            if counted is None:
                counted = Counter(rows)
            known = self._counts[k]
            if known is None:
                known = self._counts[k] = Counter(earlier)
            if counted <= known:
                return False
        self._rows.append(rows)
        self._counts.append(counted)
        return True


def repeat_penalty(call_key: tuple[str, str], recent_keys: Sequence[tuple[str, str]], config: RewardConfig) -> float:
    """Penalty when `call_key` equals one of the last `repeat_window` entries of `recent_keys`."""
    if config.repeat_window == 0:
        return 0.0
    window = recent_keys[-config.repeat_window :]
    return config.repeat_penalty if call_key in window else 0.0


def post_episode_penalty(config: RewardConfig) -> float:
    """The cost of one call made after the episode ended."""
    return config.post_episode_penalty


def format_reward(answered: bool, config: RewardConfig) -> float:
    """Bonus for ending with an `answer` call, independent of its correctness."""
    return config.format_reward if answered else 0.0


def bound(components: Mapping[str, float], config: RewardConfig, reach: float = math.inf) -> float:
    """The change of the `bound` component that keeps the shaping sum within ±shaping_bound.

    `components` are the episode's sums so far, `bound` included; the return value is what to
    add to `bound` so that it equals clip(shaping) − shaping again. `reach`, if given, is the sum
    of |every term the episode has earned| (correctness too), which |shaping| cannot exceed: below
    the bound (by a margin far above float rounding) nothing has been or needs to be clipped, and
    the sum is skipped.
    """
    limit = config.shaping_bound
    if reach < limit - _REACH_MARGIN:  # most steps of most episodes: every step pays this function
        return 0.0
    # map and the two comparisons are min(max(shaping, -limit), limit), the same sum in the same
    # order, without a generator and two builtin calls.
    shaping = sum(map(components.__getitem__, SHAPING))
    low = -limit
    clipped = low if low > shaping else shaping
    if limit < clipped:
        clipped = limit
    return clipped - shaping - components["bound"]


def normalise_argument(tool: str, value: str) -> str:
    """The form in which two calls count as "the same" for repeats.

    SQL: whitespace collapsed and trailing semicolons dropped — case is kept because string
    literals are case-sensitive. Table names: case-folded and unquoted, as SQLite resolves
    them. Anything else: whitespace collapsed.
    """
    if value.isprintable() and "  " not in value and value[:1] != " " and value[-1:] != " ":
        # Already single-spaced (most calls): every whitespace character but " " is unprintable, so
        # split/join would return it unchanged; these C scans cost a third of that.
        text = value
    else:
        text = " ".join(value.split())  # split/join: the same as a \s+ regex, several times faster
    if tool == "query":
        return text.rstrip("; ")
    if tool in ("describe", "sample"):
        return text.strip("\"'`[]").casefold()
    return text


def call_key(tool: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """A hashable identity of a call: the tool and its normalised arguments, in name order."""
    if len(arguments) == 1:  # every tool has one parameter: its name adds nothing to the identity
        (value,) = arguments.values()
        return tool, normalise_argument(tool, str(value))
    parts = [f"{k}={normalise_argument(tool, str(v))}" for k, v in sorted(arguments.items())]
    return tool, "\x1f".join(parts)
