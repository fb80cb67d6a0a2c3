"""Named reward components for one SQL-agent episode; their weights are params.

Correctness is the gate: it is the only term that can reach 1.0. Every other term is
small shaping that should change *how* an agent gets there, not whether getting there
pays. Each component is a small pure function of what just happened, so the environment
can sum them per name (`COMPONENTS`) and logs can show which term moved.

- `correctness`: weight × 1 when the verifier accepts the submitted answer, else 0.
- `progress`: potential-based shaping (Ng et al., 1999) with Φ = similarity between the
  latest successful query's rows and the gold rows (`verifier.result_similarity`). A query
  step earns weight × (Φ_new − Φ_prev). With γ = 1 the sum telescopes to weight × Φ_final,
  so oscillating between a good and a bad query earns nothing, and the optimal policy is
  unchanged.
- `operational`: `step_cost` on every call made while the episode runs (it prices
  exploration so the budget is not burned for free), plus `new_query_bonus` for a
  successful query whose SQL was not run before in the episode.
- `repeat_penalty`: an exact repeat (same tool, same normalised arguments) of one of the
  previous `repeat_window` calls. Older repeats are not penalised: re-checking a table
  much later is legitimate.
- `post_episode_penalty`: each call after the episode ended (TRL cannot stop a rollout
  at `answer`, so the model must learn to stop by itself). Such calls cost only this.
- `format`: an optional bonus for ending the episode with an `answer` call, right or
  wrong, so that a wrong answer never scores below not answering at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COMPONENTS: tuple[str, ...] = (
    "correctness",
    "progress",
    "operational",
    "repeat_penalty",
    "post_episode_penalty",
    "format",
)


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward components (signs included: penalties are negative)."""

    correctness_weight: float = 1.0
    progress_weight: float = 0.1
    new_query_bonus: float = 0.02
    step_cost: float = -0.01
    repeat_penalty: float = -0.2
    repeat_window: int = 3
    post_episode_penalty: float = -0.3
    format_reward: float = 0.0

    def __post_init__(self) -> None:
        if self.repeat_window < 0:
            raise ValueError(f"repeat_window must be >= 0 (0 disables it), got {self.repeat_window}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RewardConfig":
        """Build from a params section; unknown keys fail loudly (a typo must not silently keep a default)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown reward config key(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**dict(d))


def zero_components() -> dict[str, float]:
    """A fresh per-episode accumulator with every component at 0."""
    return dict.fromkeys(COMPONENTS, 0.0)


def correctness(accepted: bool, config: RewardConfig) -> float:
    """The gate: full weight for an answer the verifier accepts, nothing otherwise."""
    return config.correctness_weight if accepted else 0.0


def progress(phi_new: float, phi_prev: float, config: RewardConfig) -> float:
    """Potential difference weight × (Φ_new − Φ_prev); telescopes to weight × Φ_final."""
    return config.progress_weight * (phi_new - phi_prev)


def operational(new_successful_query: bool, config: RewardConfig) -> float:
    """Per-call step cost, plus the bonus for a successful query not run before this episode."""
    return config.step_cost + (config.new_query_bonus if new_successful_query else 0.0)


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
    """Optional bonus for ending with an `answer` call, independent of its correctness."""
    return config.format_reward if answered else 0.0


def normalise_argument(tool: str, value: str) -> str:
    """The form in which two calls count as "the same" for repeats and new-query bonuses.

    SQL: whitespace collapsed and trailing semicolons dropped — case is kept because string
    literals are case-sensitive. Table names: case-folded and unquoted, as SQLite resolves
    them. Anything else: whitespace collapsed.
    """
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
