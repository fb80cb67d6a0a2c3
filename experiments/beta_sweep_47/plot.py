"""docs/sweep-beta0.png: each GRPO phase's reward per step and phase 1's KL, the two experiments (from curves.csv).

    python experiments/beta_sweep_47/plot.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "docs" / "sweep-beta0.png"
LABELS = {"run-20261207-120522": "default (grpo.beta 0.04)", "beta0": "-S grpo.beta=0.0"}

frame = pd.read_csv(HERE / "curves.csv")
fig = Figure(figsize=(13, 3.6), layout="constrained")
axes = fig.subplots(1, 3, squeeze=False)[0]
panels = (("grpo_phase1", "reward", "grpo_phase1: reward (mean of 8 rollouts)"),
          ("grpo_phase2", "reward", "grpo_phase2: reward (phase 2's own beta is 0 in both)"),
          ("grpo_phase1", "kl", "grpo_phase1: KL to the reference\n(TRL logs it only where beta > 0)"))  # fmt: skip
for ax, (stage, metric, title) in zip(axes, panels):
    for name, label in LABELS.items():
        sub = frame[(frame["experiment"] == name) & (frame["stage"] == stage)].dropna(subset=[metric])
        if not sub.empty:
            ax.plot(sub["step"], sub[metric], marker="o", label=label)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
fig.savefig(OUT, dpi=100, metadata={"Software": None})
print(OUT)
