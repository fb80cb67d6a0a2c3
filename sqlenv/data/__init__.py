"""Questions and trajectories: the procedural world, the Spider loader, hardness, splits, the oracle, SFT data.

Builds on `sqlenv.env` (every question is played by the oracle through the real environment).
"""
