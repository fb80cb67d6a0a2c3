"""Evaluation: episodes played and ended as a TRL rollout, the policies, metrics with intervals, the harness.

Builds on `sqlenv.env` and `sqlenv.data`; never imports `sqlenv.train`.
"""
