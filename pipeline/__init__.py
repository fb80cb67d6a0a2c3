"""Glue between the domain library (`sqlenv/`) and the DVC stages (`stages/`).

`params` loads and validates params.yaml, `tracking` opens one MLflow run per stage
execution, `io` writes outputs atomically, and `paths` names every file the DAG shares.
This layer may import mlflow and read DVC's environment; `sqlenv/` never does.
"""
