"""Guards how the cached decoder picks tokens (`sqlenv.sampling`): transformers' own logits processors, in
`generate`'s order, on the same logits; and which of TRL's generation settings it takes or refuses."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from sqlenv.sampling import GenerationSettings


def _logits_and_histories():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 500, generator=gen)
    histories = [[int(t) for t in torch.randint(500, (n,), generator=gen)] for n in (1, 7, 30, 12)]
    histories[2] += [int(logits[2].argmax())] * 3  # a row whose best token it has already written
    return logits, histories


def test_the_chooser_applies_transformers_processors_in_generates_order():
    """Penalty, temperature, top-k, top-p, min-p: the scores equal transformers' processors run on the same
    logits and histories (padded as `generate` pads, each row its own ids); min-p masks tokens top-p keeps."""
    logits, histories = _logits_and_histories()
    settings = GenerationSettings(do_sample=True, temperature=0.7, top_k=200, top_p=0.999, min_p=0.05, repetition_penalty=1.3)
    chooser = settings.token_chooser()
    ours = chooser.scores(logits, histories)
    reference = []
    for row, history in enumerate(histories):  # one unpadded row at a time, as generate sees it
        processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7),
                                          TopKLogitsWarper(200), TopPLogitsWarper(0.999), MinPLogitsWarper(0.05)])  # fmt: skip
        reference.append(processors(torch.tensor([history]), logits[row : row + 1].float().clone())[0])
    assert torch.equal(ours, torch.stack(reference))
    without_min_p = GenerationSettings(do_sample=True, temperature=0.7, top_k=200, top_p=0.999, repetition_penalty=1.3)
    masked = torch.isinf(ours).sum(dim=-1)
    assert (masked > torch.isinf(without_min_p.token_chooser().scores(logits, histories)).sum(dim=-1)).all()
    probabilities = chooser.probabilities(logits, histories)
    assert torch.allclose(probabilities.sum(dim=-1), torch.ones(4))
    torch.manual_seed(1)
    picked = chooser(logits, histories)
    assert all(probabilities[row, token] > 0 for row, token in enumerate(picked.tolist()))


def test_a_greedy_penalty_moves_the_argmax_off_a_repeated_token():
    logits, histories = _logits_and_histories()
    plain = GenerationSettings().token_chooser()
    penalised = GenerationSettings(repetition_penalty=5.0).token_chooser()
    assert not plain.needs_history and penalised.needs_history
    assert torch.equal(plain(logits), logits.argmax(dim=-1))
    reference = torch.stack([RepetitionPenaltyLogitsProcessor(5.0)(torch.tensor([h]), logits[r : r + 1].float().clone())[0]
                             for r, h in enumerate(histories)]).argmax(dim=-1)  # fmt: skip
    assert torch.equal(penalised(logits, histories), reference)
    assert penalised(logits, histories)[2] != logits[2].argmax()  # row 2 wrote its best token already
    with pytest.raises(ValueError, match="history"):
        penalised(logits)


def test_settings_from_trls_fields_and_generation_kwargs():
    """TRL's fields, `generation_kwargs` over them (None = unset, as in `generate`); keys that change no token are
    taken; a key the chooser cannot apply is refused by name."""
    base = {"temperature": 0.9, "top_p": 1.0, "top_k": None, "min_p": None, "repetition_penalty": 1.0}
    assert GenerationSettings.from_generation_kwargs(base, None) == GenerationSettings(do_sample=True, temperature=0.9)
    got = GenerationSettings.from_generation_kwargs(
        base, {"min_p": 0.1, "repetition_penalty": 1.2, "top_k": 20, "cache_implementation": None, "pad_token_id": 0})
    assert got == GenerationSettings(do_sample=True, temperature=0.9, top_k=20, min_p=0.1, repetition_penalty=1.2)
    for key in ("no_repeat_ngram_size", "typical_p", "suppress_tokens"):
        with pytest.raises(ValueError, match=key):
            GenerationSettings.from_generation_kwargs(base, {key: 1})
    with pytest.raises(ValueError, match="repetition_penalty"):
        GenerationSettings(repetition_penalty=0)
    with pytest.raises(ValueError, match="min_p"):
        GenerationSettings(min_p=1.5)
