"""sqlenv: a sandboxed SQLite environment, verifier and training builders for small SQL agents.

The domain library of the pipeline, in layers that import only downwards (tests/test_layering.py):
`env` (sandbox, verifier, rewards, prompts, the environment and its TRL adapter) ← `data` (questions,
splits, the oracle, SFT data) ← `train` (TRL's SFT and GRPO trainers) and `eval` (rollouts as TRL plays
them, policies, metrics), which never import each other ← `report`. Beneath them all: `types`, `files`,
`provenance`, `chat_templates`; `models` prepares the base model. It never imports mlflow, dvc or
`pipeline`; those layers build on it (see docs/contracts.md).
"""

__version__ = "0.1.0"
