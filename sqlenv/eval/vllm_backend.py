"""The next turn of many episodes from vLLM's offline engine: a `TurnGenerator` for `evaluate.backend: vllm`.

`sqlenv.episode_loop.play_rollouts` asks a `TurnGenerator` for the next completion ids of the running
episodes, each with its whole context and token budget. `VLLMGenerator` answers each turn with ONE
`vllm.LLM.generate` over those contexts as token ids (`{"prompt_token_ids": ...}`, never re-tokenised
text), so the episode loop, the tool-call parsing and the token bookkeeping stay the ones the HF backend
(`sqlenv.decode.ModelGenerator`) uses; only the decoding moves. vLLM's automatic prefix caching takes
the place of the HF backend's per-episode KV caches: the shared system prompt and each episode's growing
history are found in its paged cache by their token ids, so `start`/`finish` keep no cache of their own.

The mapping (`sampling_kwargs`) of `GenerationSettings` onto `vllm.SamplingParams`, per episode and turn:
- greedy -> `temperature=0` (vLLM then takes the argmax and ignores top-p/top-k), as the HF loop's argmax;
- sampling -> `temperature`, `top_p`, `top_k` (0 = off in both), and a `seed` per (settings seed,
  episode, turn), so an episode's samples do not depend on which other episodes share its batch. The HF
  backend draws from torch's one seeded stream instead: sampled episodes are reproducible per backend,
  never equal across them (greedy ones are meant to be; a GPU test checks);
- `max_tokens` = the episode's budget; `stop_token_ids` = the runner's stop ids (the tokenizer's eos and
  the model's generation eos, as `GRPOTrainer` collects them); `repetition_penalty` and `min_p` (sampling) are
  the settings' (1 and 0 by default: given SamplingParams, vLLM applies no generation_config defaults, and
  the HF loop applies only what the settings say);
- `detokenize=False`: the runner decodes the ids itself (TRL's `parse_response`), text would be wasted.

Stop tokens: vLLM appends each sampled token to the request's output before it checks for a stop
(`vllm/v1/core/sched/utils.py::check_stop`), so `CompletionOutput.token_ids` holds the stop token id (only
stop *strings* are cut from the text, unless `include_stop_str_in_output`). `completion_ids` still
normalises what comes back to the contract (stop token included, nothing after it): it cuts after the
first stop id, and it puts the stop id back when the output says it stopped on one that is not there,
so an engine version that trims it cannot silently shift every later context by one token.

vLLM is an optional extra (`pip install -e ".[vllm]"`, a CUDA machine), imported only when this backend
is used; without it `require_vllm` raises an ImportError that says how to install it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from sqlenv.sampling import GenerationSettings

BACKENDS = ("hf", "vllm")  # evaluate.backend; plain words that survive YAML 1.1 and DVC's -S rewriting
INSTALL_HINT = 'pip install -e ".[vllm]" (TRL 1.16\'s vllm extra: vllm 0.22-0.31, a CUDA build)'


def require_vllm() -> Any:
    """The `vllm` module, or an ImportError naming the install command."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"backend 'vllm' needs vLLM, which is not installed: {INSTALL_HINT}") from exc
    return vllm


def check_backend(backend: str) -> str:
    """`backend` if it is one of BACKENDS, else ValueError naming them."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def turn_seed(seed: int, key: int, turn: int) -> int:
    """A sampling seed per (run seed, episode, turn): distinct streams, independent of the batch."""
    return (seed * 1_000_003 + key * 10_007 + turn) % (2**31 - 1)


def sampling_kwargs(
    gen: GenerationSettings, budget: int, stop_ids: Sequence[int], seed: int | None = None
) -> dict[str, Any]:
    """`vllm.SamplingParams` arguments for one completion (see the module docstring for the mapping)."""
    if budget < 1:
        raise ValueError(f"a completion budget must be >= 1, got {budget}")
    kwargs: dict[str, Any] = {
        "n": 1,
        "max_tokens": budget,
        "stop_token_ids": list(stop_ids),
        "repetition_penalty": gen.repetition_penalty,
        "min_p": 0.0,
        "detokenize": False,
    }
    if not gen.do_sample:
        return {**kwargs, "temperature": 0.0}
    return {**kwargs, "temperature": gen.temperature, "top_p": gen.top_p, "top_k": gen.top_k,
            "min_p": gen.min_p or 0.0, "seed": gen.seed if seed is None else seed}  # fmt: skip


def completion_ids(output: Any, stop_ids: Sequence[int]) -> list[int]:
    """A vLLM `CompletionOutput` as the runner's completion: its token ids up to and including the first
    stop id; a stop id the output reports (`finish_reason == "stop"`) but lacks is appended: `stop_reason`
    when it is a token id, else the engine's own eos (None), which is `stop_ids[0]`, the tokenizer's eos."""
    ids = [int(t) for t in output.token_ids]
    for n, token in enumerate(ids):
        if token in stop_ids:
            return ids[: n + 1]
    if getattr(output, "finish_reason", None) == "stop":
        reason = getattr(output, "stop_reason", None)
        if isinstance(reason, int) and not isinstance(reason, bool):
            ids.append(reason)
        elif reason is None:
            ids.append(stop_ids[0])
        else:  # a stop string: never set here, so the engine was configured elsewhere
            raise ValueError(f"vLLM stopped on {reason!r}, not on one of the stop ids {list(stop_ids)}")
    return ids


class VLLMGenerator:
    """One `llm.generate` per turn over the running episodes' contexts (a `TurnGenerator`).

    `llm` is a `vllm.LLM` (or anything with its `generate(prompts, sampling_params=..., use_tqdm=...)`);
    `from_folder` builds one for a model folder. `max_model_len`, when given, caps each budget at what the
    engine's context has left (vLLM would stop there anyway; `play_rollouts` ends such an episode next).
    """

    def __init__(self, llm: Any, gen: GenerationSettings, eos_ids: Sequence[int], max_model_len: int | None = None):
        self.llm, self.gen, self.eos_ids, self.max_model_len = llm, gen, list(eos_ids), max_model_len
        self._sampling_params = require_vllm().SamplingParams
        self._turns: dict[int, int] = {}

    @classmethod
    def from_folder(
        cls,
        model_dir: str | os.PathLike[str],
        gen: GenerationSettings,
        eos_ids: Sequence[int],
        *,
        max_model_len: int | None = None,
        llm_kwargs: Mapping[str, Any] | None = None,
    ) -> VLLMGenerator:
        """A generator over `vllm.LLM(model=model_dir)` with prefix caching, seeded by `gen.seed`;
        `llm_kwargs` (dtype, gpu_memory_utilization, ...) go to `vllm.LLM` as they are."""
        vllm = require_vllm()
        kwargs: dict[str, Any] = {"seed": gen.seed, "enable_prefix_caching": True}
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        llm = vllm.LLM(model=str(model_dir), **{**kwargs, **(llm_kwargs or {})})
        return cls(llm, gen, eos_ids, max_model_len=max_model_len)

    def start(self, key: int, context: list[int]) -> None:
        self._turns[key] = 0

    def finish(self, key: int) -> None:
        self._turns.pop(key, None)

    def generate(self, keys: Sequence[int], contexts: Sequence[list[int]], budgets: Sequence[int]) -> list[list[int]]:
        completions: list[list[int]] = [[] for _ in keys]
        rows, prompts, params = [], [], []
        for row, (key, context, budget) in enumerate(zip(keys, contexts, budgets)):
            if self.max_model_len is not None:
                budget = min(budget, self.max_model_len - len(context))
            if budget < 1:  # as the HF loop: no budget, no token
                continue
            turn = self._turns.get(key, 0)
            rows.append(row)
            prompts.append({"prompt_token_ids": list(context)})
            params.append(self._sampling_params(**sampling_kwargs(self.gen, budget, self.eos_ids,
                                                                  turn_seed(self.gen.seed, key, turn))))  # fmt: skip
        if prompts:
            results = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
            if len(results) != len(prompts):
                raise RuntimeError(f"vLLM returned {len(results)} results for {len(prompts)} prompts")
            for row, prompt, result in zip(rows, prompts, results):
                returned = getattr(result, "prompt_token_ids", None)
                if returned is not None and list(returned) != prompt["prompt_token_ids"]:
                    raise RuntimeError("vLLM returned its results out of prompt order")
                completions[row] = completion_ids(result.outputs[0], self.eos_ids)
        for key in keys:
            self._turns[key] = self._turns.get(key, 0) + 1
        return completions
