"""sqlenv: a sandboxed SQLite environment, verifier and training builders for small SQL agents.

The domain library of the pipeline (see docs/contracts.md). It never imports mlflow, dvc
or `pipeline`; those layers build on it.
"""

__version__ = "0.1.0"
