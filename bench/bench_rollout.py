"""Episode throughput of the runner: batched (rolling pool, KV caches) against one episode at a time.

Both sides are the same `sqlenv.eval.rollout.play_model` on the same model, questions and settings, with
greedy decoding; only `batch_size` differs (1 for the baseline). `--turns` also times the batch that waits
for its longest turn (the runner before continuous batching: `ModelGenerator.generate_some` off, the same
batch size): `continuous_ratio` is what handing the batch back early buys. `--drafting K` also times the
batched side without prompt-lookup drafting (`draft_tokens` 0 against `--draft-tokens`, default 8 as
`evaluate.draft_tokens`), K pairs alternated in the same process (without, then with): `draft_ratio` is the
generated tokens per second with over without (with `--temperature`, sampled episodes: other draws, so
tokens per second, not episodes, compare). `--skip-sequential` leaves out
the one-at-a-time side (6-8x the batched time at N=50 on the 2-core CPUs measured). The ratio of
episodes/s is the number to watch (issue 15's target: >= 6x at N=50 with the 0.5B model on the 2-core
CPU); absolute figures depend on the machine's load, which is recorded. Verdict agreement between the
two runs is reported too (bf16 numerics may differ a little between batch shapes; fp32 tests demand
identical tokens).

Defaults: the model is models/base if present, else the tiny random test model; the questions are
data/questions/n50.jsonl (databases in data/databases) if present, else the Spider dev questions the
loader keeps (/work/shared/spider, overridable with SQLENV_SPIDER_DIR), else the test fixture database.

    .venv/bin/python bench/bench_rollout.py --n 8 --max-new-tokens 48 --max-turns 4 --out bench/results/rollout.json
    # an evaluation stage's own shape (evaluate@sft_n200): its model, questions, batch and token budget
    .venv/bin/python bench/bench_rollout.py --model models/sft --questions data/questions/n200.jsonl --n 200 \
        --batch-size 50 --max-new-tokens 768 --max-total-tokens 768 --turns --skip-sequential
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

from pipeline import machine  # noqa: E402
from pipeline.io import print_json  # noqa: E402
from sqlenv.dtype import DTYPES  # noqa: E402
from sqlenv.env.environment import EnvConfig  # noqa: E402
from sqlenv.types import Question  # noqa: E402

DEFAULT_SPIDER = Path(os.environ.get("SQLENV_SPIDER_DIR", REPO.parent / "shared" / "spider"))


def load_questions(n: int, path: Path | None = None, db_dir: Path | None = None) -> tuple[list[Question], Path, str]:
    """The first n questions of `path` (a questions JSONL; databases in `db_dir`, default data/databases)
    or of the default source (see the module docstring), their db_dir and a label."""
    n50 = path or REPO / "data" / "questions" / "n50.jsonl"
    if path is not None and not path.is_file():
        sys.exit(f"bench_rollout: no questions file {path}")
    if n50.is_file():
        lines = [line for line in n50.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [Question.from_dict(json.loads(line)) for line in lines][:n], db_dir or REPO / "data" / "databases", str(n50)
    if (DEFAULT_SPIDER / "dev.json").is_file():
        from sqlenv.data.spider import load_spider

        loaded = load_spider(DEFAULT_SPIDER)
        return loaded.questions[:n], DEFAULT_SPIDER / "database", f"spider:{DEFAULT_SPIDER}"
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_env import QUESTIONS, make_concert_db

    db_dir = Path(tempfile.mkdtemp(prefix="bench-rollout-db-"))
    make_concert_db(db_dir)
    return (list(QUESTIONS) * n)[:n], db_dir, "fixture:concert"


def load_model(spec: str | None, dtype: str):
    """(model, tokenizer, its folder, the `DtypeChoice` it computes in): `dtype` resolved as the stages resolve
    `model.dtype` (`auto` times both at the model's shapes: bf16 ran 66-69x slower than fp32 on an AVX2-only CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sqlenv.dtype import choose_dtype

    if spec is None:
        base = REPO / "models" / "base"
        if (base / "config.json").is_file():
            spec = str(base)
        else:
            from sqlenv.train.tiny_model import build_tiny_model

            spec = str(build_tiny_model(Path(tempfile.gettempdir()) / "sqlenv-bench-tiny"))
    choice = choose_dtype(dtype, spec)
    model = AutoModelForCausalLM.from_pretrained(spec, dtype=getattr(torch, choice.dtype))
    return model, AutoTokenizer.from_pretrained(spec), spec, choice


def timed_run(model, tokenizer, questions, batch_size: int, **kwargs) -> tuple[list, float]:
    from sqlenv.eval.rollout import play_model

    start = time.perf_counter()
    records = play_model(model, tokenizer, questions, batch_size=batch_size, progress=False, **kwargs)
    return records, time.perf_counter() - start


def summary(records, seconds: float) -> dict:
    tokens = sum(r.tokens for r in records)
    return {
        "seconds": round(seconds, 2),
        "episodes_per_s": len(records) / seconds,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / seconds,
        "accuracy": sum(r.correct for r in records) / len(records),
        "parse_failures_mean": sum(r.parse_failures for r in records) / len(records),
        "steps_mean": sum(r.steps for r in records) / len(records),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="HF model folder (default: models/base, else the tiny model)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="compute dtype; auto: the faster at the model's shapes on this CPU, as the stages choose")
    parser.add_argument("--n", type=int, default=50, help="episodes per side")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96, help="per turn")
    parser.add_argument("--max-turns", type=int, default=None, help="default: the env step budget")
    parser.add_argument("--max-total-tokens", type=int, default=4096)
    parser.add_argument("--parser", default="strict", choices=["strict", "lenient"],
                        help="how calls are read (the base policies' evaluations: lenient)")
    parser.add_argument("--uncached", action="store_true", help="also time batched without KV-cache reuse")
    parser.add_argument("--turns", action="store_true", help="also time the batch that waits for its longest turn")
    parser.add_argument("--skip-sequential", action="store_true", help="leave out one episode at a time")
    parser.add_argument("--questions", type=Path, default=None, help="a questions JSONL (default: see above)")
    parser.add_argument("--db-dir", type=Path, default=None, help="its databases (default: data/databases)")
    parser.add_argument("--draft-tokens", type=int, default=8, help="the batched side's prompt-lookup guesses per step")
    parser.add_argument("--drafting", type=int, default=0, metavar="K",
                        help="also K alternated pairs of batched runs without and with drafting")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sample at this temperature (seeded; GRPO's rollouts: 0.9) instead of greedy")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import bench_machine
    import torch

    machine.set_runtime()  # the stages' threads and oneDNN cache bound, before anything computes (oneDNN reads it once)

    from sqlenv.decode import ModelGenerator
    from sqlenv.sampling import GenerationSettings

    questions, db_dir, source = load_questions(args.n, args.questions, args.db_dir)
    model, tokenizer, spec, dtype = load_model(args.model, args.dtype)
    common = dict(
        db_dir=db_dir,
        env_config=EnvConfig(),
        max_turns=args.max_turns,
        max_new_tokens_per_turn=args.max_new_tokens,
        max_total_tokens=args.max_total_tokens,
        parser=args.parser,
        draft_tokens=args.draft_tokens,
    )
    if args.temperature is not None:
        common["gen"] = GenerationSettings(do_sample=True, temperature=args.temperature, seed=0)
    machine_record = bench_machine.record()
    timed_run(model, tokenizer, questions[:1], 1, **{**common, "max_turns": 1})  # warm-up: first-call costs
    batched, t_bat = timed_run(model, tokenizer, questions, args.batch_size, **common)
    result = {
        "model": spec,
        **machine_record,
        "dtype": dtype.as_dict(),
        "questions": source,
        "n": len(questions),
        "batch_size": args.batch_size,
        "max_new_tokens_per_turn": args.max_new_tokens,
        "max_turns": args.max_turns,
        "parser": args.parser,
        "draft_tokens": args.draft_tokens,
        "temperature": args.temperature,
        "torch_threads": torch.get_num_threads(),
        "batched": summary(batched, t_bat),
    }

    def shares(records, others) -> dict:
        """Shares of questions whose verdict / transcript `records` give as `others` do."""
        return {"verdict_agreement": sum(a.correct == b.correct for a, b in zip(records, others)) / len(questions),
                "transcript_agreement": sum(a.messages == b.messages for a, b in zip(records, others)) / len(questions)}  # fmt: skip

    def agreement(records, prefix: str = "") -> None:
        """`shares` against the batched side, into the result under `prefix`."""
        result.update({prefix + k: v for k, v in shares(records, batched).items()})

    if not args.skip_sequential:
        sequential, t_seq = timed_run(model, tokenizer, questions, 1, **common)
        result["sequential"] = summary(sequential, t_seq)
        agreement(sequential)
        result["ratio"] = result["batched"]["episodes_per_s"] / result["sequential"]["episodes_per_s"]
    if args.turns:
        generate_some = ModelGenerator.generate_some
        ModelGenerator.generate_some = None  # play_rollouts then asks for whole turns (`generate`)
        try:
            turns, t_turns = timed_run(model, tokenizer, questions, args.batch_size, **common)
        finally:
            ModelGenerator.generate_some = generate_some
        result["batched_turns"] = summary(turns, t_turns)
        agreement(turns, "turns_")
        result["continuous_ratio"] = result["batched"]["episodes_per_s"] / result["batched_turns"]["episodes_per_s"]
    if args.uncached:
        uncached, t_unc = timed_run(model, tokenizer, questions, args.batch_size, reuse_cache=False, **common)
        result["batched_uncached"] = summary(uncached, t_unc)
        result["cache_ratio"] = result["batched"]["episodes_per_s"] / result["batched_uncached"]["episodes_per_s"]
    if args.drafting:
        pairs = []
        for _ in range(args.drafting):
            plain, t_plain = timed_run(model, tokenizer, questions, args.batch_size, **{**common, "draft_tokens": 0})
            drafted, t_drafted = timed_run(model, tokenizer, questions, args.batch_size, **common)
            pairs.append({"without": summary(plain, t_plain), "with": summary(drafted, t_drafted), **shares(plain, drafted)})
        result["drafting_pairs"] = pairs
        rate = {side: sum(p[side]["generated_tokens"] for p in pairs) / sum(p[side]["seconds"] for p in pairs)
                for side in ("without", "with")}  # fmt: skip
        result["draft_ratio"] = rate["with"] / rate["without"]
    result["loadavg_after"] = os.getloadavg()
    print_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
