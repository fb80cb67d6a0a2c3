"""Training: TRL's SFTTrainer and GRPOTrainer on the environment, their outputs, and a tiny test model.

Builds on `sqlenv.env` and `sqlenv.data`; never imports `sqlenv.eval` (evaluation is its own stage).
"""
