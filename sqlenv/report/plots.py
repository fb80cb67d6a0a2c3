"""The report's plots (seaborn, PNG) and the CSV data behind each, for `dvc plots show`.

Every CSV is always written (a header alone when there is nothing to plot), so the paths dvc.yaml
declares exist in every revision and `dvc plots diff` can line revisions up; a PNG is drawn only
when it has data, and the report embeds only the PNGs that exist. DVC draws one series per file and
column, so each file is one series per row label (`label` = "policy @ set") or one GRPO phase.

Figures are built with `matplotlib.figure.Figure` and saved through the Agg canvas directly: no
pyplot, so no global backend or figure registry is touched (safe inside a test process or a notebook).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from sqlenv.report.results import (
    CURVES,
    POLICIES,
    SETS,
    ReportInputs,
    hardness_table,
    results_table,
)
from sqlenv.types import HARDNESS_LEVELS

CURVE_COLUMNS = {"sft": ("step", "loss", "learning_rate", "mean_token_accuracy"),
                 "grpo": ("step", "reward", "kl", "loss", "episode/accuracy")}  # fmt: skip
# One colour per policy in every plot, whichever policies a panel shows.
PALETTE = dict(zip(POLICIES, sns.color_palette("tab10", len(POLICIES))))
CSV_FILES = ("accuracy.csv", "accuracy_by_hardness.csv", "steps.csv", "sft_loss.csv",
             "grpo_phase1_curve.csv", "grpo_phase2_curve.csv")  # fmt: skip


def accuracy_data(inputs: ReportInputs) -> pd.DataFrame:
    frame = results_table(inputs.results)
    frame.insert(2, "label", frame["policy"] + " @ " + frame["set"])
    return frame


def hardness_data(inputs: ReportInputs) -> pd.DataFrame:
    frame = hardness_table(inputs.results)
    frame.insert(3, "label", frame["policy"] + " @ " + frame["set"] + " / " + frame["hardness"])
    return frame


def episode_steps(inputs: ReportInputs) -> pd.DataFrame:
    """One row per saved episode: set, policy, steps, correct."""
    rows = [{"set": r.set, "policy": r.policy, "steps": e.steps, "correct": e.correct}
            for r in inputs.results if r.records for e in r.records]  # fmt: skip
    return pd.DataFrame(rows, columns=["set", "policy", "steps", "correct"])


def steps_data(inputs: ReportInputs) -> pd.DataFrame:
    """Histogram counts: episodes per (set, policy, steps)."""
    per_episode = episode_steps(inputs)
    counts = per_episode.groupby(["set", "policy", "steps"], sort=False).size().reset_index(name="episodes")
    return counts.sort_values(["set", "policy", "steps"], key=_order, kind="stable").reset_index(drop=True)


def curve_data(inputs: ReportInputs, name: str) -> pd.DataFrame:
    """The curve's step column, its main series and the reward components present (GRPO)."""
    wanted = list(CURVE_COLUMNS["sft" if name == "sft" else "grpo"])
    frame = inputs.curves.get(name)
    if frame is None:
        return pd.DataFrame(columns=wanted[:2])
    components = [c for c in frame.columns if c.startswith("rewards/") and c.endswith("/mean")]
    return frame[[c for c in (*wanted, *components) if c in frame.columns]]


def _order(column: pd.Series) -> pd.Series:
    # Sort sets and policies in their canonical order, numbers as numbers.
    for known in (SETS, POLICIES):
        if column.isin(known).all():
            return column.map(known.index)
    return column


def _figure(panels: int, width: float = 5.5, height: float = 3.8) -> tuple[Figure, list]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(width * max(panels, 1), height), layout="constrained")
        return fig, list(fig.subplots(1, max(panels, 1), squeeze=False)[0])


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: same data, same bytes


def plot_accuracy(data: pd.DataFrame, path: Path) -> None:
    sets = [s for s in SETS if s in set(data["set"])]
    fig, axes = _figure(len(sets), height=0.45 * data["policy"].nunique() + 1.6)
    for ax, set_name in zip(axes, sets):
        sub = data[data["set"] == set_name].reset_index(drop=True)
        sns.barplot(data=sub, x="accuracy", y="policy", order=list(sub["policy"]), hue="policy", palette=PALETTE,
                    errorbar=None, legend=False, ax=ax)  # fmt: skip
        # Wilson intervals from the evaluate stage, not seaborn's bootstrap over one number per bar.
        error = [sub["accuracy"] - sub["accuracy_low"], sub["accuracy_high"] - sub["accuracy"]]
        ax.errorbar(sub["accuracy"], range(len(sub)), xerr=error, fmt="none", ecolor="black", capsize=3)
        ax.set(xlim=(0, 1), title=f"{set_name}: accuracy with Wilson 95 % interval", ylabel="")
    _save(fig, path)


def plot_hardness(data: pd.DataFrame, path: Path) -> None:
    sets = [s for s in SETS if s in set(data["set"])]
    levels = [h for h in HARDNESS_LEVELS if h in set(data["hardness"])] + sorted(
        set(data["hardness"]) - set(HARDNESS_LEVELS))
    fig, axes = _figure(len(sets))
    for ax, set_name in zip(axes, sets):
        sub = data[data["set"] == set_name]
        hue_order = [p for p in POLICIES if p in set(sub["policy"])]
        sns.barplot(data=sub, x="hardness", y="accuracy", hue="policy", order=levels, hue_order=hue_order,
                    palette=PALETTE, errorbar=None, ax=ax)  # fmt: skip
        ax.set(ylim=(0, 1), title=f"{set_name}: accuracy by hardness")
        ax.legend(fontsize="small", title=None)
    _save(fig, path)


def plot_steps(per_episode: pd.DataFrame, path: Path) -> None:
    sets = [s for s in SETS if s in set(per_episode["set"])]
    fig, axes = _figure(len(sets))
    for ax, set_name in zip(axes, sets):
        sub = per_episode[per_episode["set"] == set_name]
        hue_order = [p for p in POLICIES if p in set(sub["policy"])]
        sns.histplot(data=sub, x="steps", hue="policy", hue_order=hue_order, palette=PALETTE, multiple="dodge",
                     discrete=True, shrink=0.8, ax=ax)  # fmt: skip
        ax.set(title=f"{set_name}: steps per episode", ylabel="episodes")
    _save(fig, path)


def plot_curves(frames: Sequence[tuple[str, pd.DataFrame]], y: str, path: Path) -> None:
    """One panel per curve: `y` and every reward component mean present, against step."""
    fig, axes = _figure(len(frames))
    for ax, (name, frame) in zip(axes, frames):
        series = [c for c in frame.columns if c != "step" and (c == y or c.startswith("rewards/"))]
        long = frame.melt(id_vars="step", value_vars=series, var_name="series").dropna(subset=["value"])
        sns.lineplot(data=long, x="step", y="value", hue="series", hue_order=series, marker="o", ax=ax)
        ax.set(title=f"{name}: {y} per step", ylabel=y)
        ax.legend(fontsize="x-small", title=None)
    _save(fig, path)


def write_plots(inputs: ReportInputs, out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Write every CSV in CSV_FILES and the PNGs that have data into `out_dir`; returns {plot: file name}
    for the PNGs drawn (keys as `report.render_report` expects them)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    accuracy, hardness, steps = accuracy_data(inputs), hardness_data(inputs), steps_data(inputs)
    curves = {name: curve_data(inputs, name) for name in CURVES}
    for name, frame in (("accuracy", accuracy), ("accuracy_by_hardness", hardness), ("steps", steps),
                        ("sft_loss", curves["sft"]), *((f"{n}_curve", curves[n]) for n in CURVES[1:])):  # fmt: skip
        frame.to_csv(out / f"{name}.csv", index=False)
    drawn: dict[str, str] = {}
    per_episode = episode_steps(inputs)
    grpo = [(n, curves[n]) for n in CURVES[1:] if not curves[n].dropna(subset=["reward"]).empty]
    for key, has_data, draw in (
        ("accuracy", not accuracy.empty, lambda p: plot_accuracy(accuracy, p)),
        ("hardness", not hardness.empty, lambda p: plot_hardness(hardness, p)),
        ("steps", not per_episode.empty, lambda p: plot_steps(per_episode, p)),
        ("sft_loss", not curves["sft"].dropna(subset=["loss"]).empty,
         lambda p: plot_curves([("sft", curves["sft"])], "loss", p)),
        ("grpo_reward", bool(grpo), lambda p: plot_curves(grpo, "reward", p)),
    ):  # fmt: skip
        if has_data:
            draw(out / f"{key}.png")
            drawn[key] = f"{key}.png"
    return drawn
