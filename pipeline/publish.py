"""`sqlenv publish`: a model folder → a Hugging Face folder whose model card is generated from the committed results.

    sqlenv publish --model models/grpo_phase2 --repo-id NAME --dry-run     build and validate publish/grpo_phase2/
    sqlenv publish --model models/grpo_phase2 --repo-id org/NAME           the same, then create_repo + upload_folder

The folder holds the model's own files (weights, config, tokenizer, generation config, chat template,
provenance.json) and a `README.md` model card. No number in the card is written by hand: accuracies and
their Wilson intervals come from `reports/eval/<policy>_<set>/metrics.json` (read through the report's
own loader, `sqlenv.report.results.load_result`), the protocol from those files' `settings`/`env` blocks
and `reports/prepare/metrics.json` (which domains were held out), the training knobs from `params.yaml`,
the lineage and licence from the folder's `provenance.json`.

What it guards:
  * which results describe this model. A result enters if its policy plays this folder (`Policy.model`
    equal to the folder's name: `models/base` is played by base, base_1shot and base_3shot) or if its
    model fingerprint is this folder's. A result of the right policy made with other weights is kept,
    marked in the card and warned about on stderr: the committed numbers then describe another model.
  * whether params.yaml still describes the training: a GRPO phase recorded the hash of the params it
    read (`provenance.json` → `training[].params_hash`); the card says whether today's params.yaml gives
    the same hash.
  * the folder. It is built in a temporary sibling and renamed into place (`sqlenv.files.atomic_dir`)
    only after validation passed: the card parses with `huggingface_hub.ModelCard`, the copied files
    have the source's fingerprint, and the folder loads with transformers and plays one episode through
    the real environment (`sqlenv.eval.harness.play`, ended as in evaluation). Any failure leaves no
    folder behind; an existing non-empty folder is replaced only with `--force`.

What it does not do: it does not evaluate the model (the card reports the committed evaluation; the one
episode is a smoke check, not a measurement), and it cannot check the card against the Hub's validator
offline. It lives in `pipeline/` because it reads the committed reports and params and talks to the Hub.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from sqlenv import cli as domain_cli
from sqlenv.cli import Command, UsageError

CARD_FILE = "README.md"
# Top-level files of a model folder not published: our card replaces any README, a trainer's pickled args
# are neither needed nor safe to load.
NOT_PUBLISHED = {CARD_FILE, "training_args.bin"}
# params.yaml sections behind each model folder, in training order (dvc.yaml lists the same per stage).
LINEAGE = {
    "base": ("model",),
    "sft": ("model", "env", "sft"),
    "grpo_phase1": ("model", "env", "sft", "rewards", "grpo", "grpo_phase1"),
    "grpo_phase2": ("model", "env", "sft", "rewards", "grpo", "grpo_phase1", "grpo_phase2"),
}
_LICENSES = ("Apache-2.0", "MIT", "BSD-3-Clause", "CC-BY-4.0", "CC-BY-SA-4.0")  # SPDX names the Hub takes lower-cased


@dataclass(frozen=True)
class Committed:
    """One committed evaluation result of this model: the report's record and whether its weights are these."""

    result: Any  # sqlenv.report.results.EvalResult
    fingerprint_match: bool

    @property
    def played(self) -> str | None:
        model = self.result.info.get("model")
        return model.get("fingerprint") if isinstance(model, dict) else None


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder to publish (Hugging Face layout)")
    p.add_argument("--repo-id", required=True, help="Hub repository, NAME or ORG/NAME")
    p.add_argument("--dry-run", action="store_true", help="write and validate the folder; upload nothing")
    p.add_argument("--out", help="folder to write (default publish/<model folder name>)")
    p.add_argument("--force", action="store_true", help="replace an existing non-empty --out folder")
    p.add_argument("--report", default="reports/report.md",
                   help="the committed report; its folder holds eval/<policy>_<set>/metrics.json (default reports/report.md)")
    p.add_argument("--params", default="params.yaml", help="params file the training read (default params.yaml)")
    p.add_argument("--license", help="Hub licence id (default: read from the model's provenance)")
    p.add_argument("--private", action="store_true", help="create the Hub repository private")
    p.add_argument("--questions", default="data/questions/n50.jsonl", help="questions of the validation episode")
    p.add_argument("--db-dir", default="data/databases", help="their databases, Spider layout")
    p.add_argument("--question", default="0", help="question id, or its index in --questions (default 0)")
    p.add_argument("--max-total-tokens", type=int, help="validation episode budget (default: the evaluation's)")


# ------------------------------------------------------------------------------------------------ inputs
def _repo_id(repo_id: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UsageError(f"bad --repo-id {repo_id!r}: {exc}") from exc
    return repo_id


def _model_dir(model: str) -> Path:
    path = Path(model)
    if not path.is_dir():
        raise UsageError(f"no model folder at {model}")
    if not (path / "config.json").is_file():
        raise UsageError(f"{model} is not a model folder (no config.json)")
    return path


def committed_results(eval_dir: Path, folder_name: str, fingerprint: str) -> list[Committed]:
    """The results under `eval_dir` that describe this model (see the module docstring), in report order."""
    from sqlenv.eval.policies import POLICIES
    from sqlenv.report.results import SETS, load_result

    players = {p.name for p in POLICIES.values() if p.model == folder_name}
    found = []
    for folder in sorted(eval_dir.iterdir()) if eval_dir.is_dir() else []:
        policy, _, set_name = folder.name.rpartition("_")
        if folder.name.startswith(".") or policy not in POLICIES or set_name not in SETS:
            continue
        if not (folder / "metrics.json").is_file():
            continue
        try:
            result = load_result(folder, policy, set_name)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        played = (result.info.get("model") or {}).get("fingerprint")
        if policy in players or played == fingerprint:
            found.append(Committed(result, played == fingerprint))
    order = {(p, s): i for i, (s, p) in enumerate((s, p) for s in SETS for p in POLICIES)}
    return sorted(found, key=lambda c: order[c.result.policy, c.result.set])


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _licence(provenance: dict[str, Any]) -> tuple[str, str]:
    """(Hub licence id, the licence text recorded) of a model folder; `other` when no known licence is named."""
    from sqlenv.models import OFFLINE_MODELS

    text = provenance.get("licence") or next(
        (m.licence for m in OFFLINE_MODELS.values() if m.upstream == provenance.get("upstream")), "")
    found = next((name for name in _LICENSES if re.search(rf"\b{re.escape(name)}\b", text, flags=re.IGNORECASE)), None)
    return (found.lower() if found else "other"), text or "not recorded"


def _params_check(params: dict[str, Any], provenance: dict[str, Any]) -> list[str]:
    """A line per GRPO phase that recorded its params hash: does today's params file give the same hash?"""
    # phase_sections: the params a phase reads, exactly as the grpo stage hashed them.
    from pipeline.params import params_hash
    from sqlenv.train.grpo import phase_sections

    lines = []
    for entry in provenance.get("training", []):
        stage, recorded = entry.get("stage"), entry.get("params_hash")
        if stage not in ("grpo_phase1", "grpo_phase2") or not recorded:
            continue
        now = params_hash(phase_sections(params, int(stage[-1])))
        lines.append(f"- `{stage}` recorded params hash `{recorded}`; the params file gives `{now}`: "
                     + ("**the same params**." if now == recorded else "**they differ** (the file changed since)."))
    return lines


# -------------------------------------------------------------------------------------------------- card
def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def card_text(repo_id: str, model_dir: Path, fingerprint: str, committed: list[Committed], *, report: Path,
              params: dict[str, Any], licence: str | None) -> str:
    """The model card (YAML metadata + markdown), every number read from `committed`, `params`, provenance."""
    from sqlenv.provenance import read_provenance

    prov = read_provenance(model_dir)
    licence_id, licence_text = _licence(prov)
    licence_id = licence or licence_id
    prepare = _read_json(report.parent / "prepare" / "metrics.json") or {}
    name = model_dir.resolve().name
    trained = [e.get("stage") for e in prov.get("training", [])]
    if prov.get("sft") or str(prov.get("spec", "")).startswith("sft:"):
        trained.insert(0, "sft")
    results = [_result_row(c) for c in committed]
    first = committed[0].result.info if committed else {}
    sections = [
        f"# {repo_id}",
        _intro(name, first.get("env") or {}),
        "## Results",
        _results_section(report, fingerprint, committed, first),
        _headline(report, name),
        "## Evaluation protocol",
        _protocol_section(prepare, first),
        "## Training",
        _training_section(name, trained, params, prov),
        "## Base model and provenance",
        _provenance_section(prov),
        "## Licence",
        f"`{licence_id}`. Recorded with the base model: {licence_text}",
    ]
    meta = _metadata(repo_id, name, fingerprint, results, prov, prepare, licence_id, trained)
    return f"---\n{meta.to_yaml()}\n---\n\n" + "\n\n".join(x for x in sections if x) + "\n"


def _result_row(c: Committed) -> dict[str, Any]:
    m = c.result.metrics
    return {"policy": c.result.policy, "set": c.result.set, "n": m["n"], "correct": m["correct"], "accuracy": m["accuracy"],
            "accuracy_low": m["accuracy_low"], "accuracy_high": m["accuracy_high"], "fingerprint": c.played,
            "fingerprint_match": c.fingerprint_match, "mode": c.result.mode}  # fmt: skip


def _metadata(repo_id, name, fingerprint, results, prov, prepare, licence_id, trained):
    """The card's YAML block: Hub fields, a `model-index` with one accuracy per policy and set, and the
    intervals (which model-index has no field for) under `sqlenv`."""
    from huggingface_hub import EvalResult, ModelCardData

    upstream = prov.get("upstream")
    evals = [EvalResult(
        task_type="text-generation", task_name=f"SQL agent with tools ({x['mode']})",
        dataset_type=f"sqlenv-{prepare.get('source', 'unknown')}", dataset_split=x["set"],
        dataset_name=f"sqlenv {x['set']} (held-out, split {prepare.get('split', 'not recorded')})",
        metric_type="accuracy", metric_value=x["accuracy"],
        metric_name=(f"{x['policy']} accuracy (Wilson 95 % [{x['accuracy_low']:.3f}, {x['accuracy_high']:.3f}], "
                     f"n={x['n']})"),
    ) for x in results]  # fmt: skip
    extra = {"base_model_relation": "finetune" if trained else "quantized"} if upstream else {}
    return ModelCardData(license=licence_id, base_model=upstream, library_name="transformers", pipeline_tag="text-generation",
                         tags=["sqlenv", "text-to-sql", "sql", "agent", "tool-use", "trl", *trained],
                         model_name=repo_id, eval_results=evals or None,
                         sqlenv={"model": name, "fingerprint": fingerprint, "results": results}, **extra)  # fmt: skip


def _mode_words(env: dict[str, Any]) -> str:
    """The environment mode a result was played in, in words (results before the modes were hidden/value)."""
    schema = ("the full schema is shown as CREATE TABLE statements" if env.get("schema") == "full"
              else "the schema is hidden (table names only)")  # fmt: skip
    answer = ("`answer(sql)` submits the final SQL, scored by execution accuracy (EX)" if env.get("answer") == "sql"
              else "`answer(value)` submits the answer text, judged by the value verifier")  # fmt: skip
    return f"{schema}; {answer}"


def _intro(name: str, env: dict[str, Any]) -> str:
    from sqlenv.types import TOOL_NAMES

    return (f"`{name}` of the sqlenv pipeline: a small model trained with TRL to answer questions over a SQLite "
            f"database by calling the environment's tools ({', '.join(f'`{t}`' for t in TOOL_NAMES)}) and ending "
            f"with `answer` ({_mode_words(env)}). Generated by `sqlenv publish` from the committed results; do not "
            "edit its numbers by hand.")  # fmt: skip


def _results_section(report: Path, fingerprint: str, committed: list[Committed], first: dict[str, Any]) -> str:
    rows = []
    for c in committed:
        r, m = c.result, c.result.metrics
        s, env = r.info.get("settings") or {}, r.info.get("env") or {}
        mark = "✓" if c.fingerprint_match else "✗ other weights"
        rows.append(f"| {r.set} | {r.policy} | {m['n']} | {_pct(m['accuracy'])} [{_pct(m['accuracy_low'])}, "
                    f"{_pct(m['accuracy_high'])}] | {s.get('max_total_tokens')} tokens, {env.get('step_budget')} calls | "
                    f"{s.get('parser')} | {s.get('shots', 0)} | `{c.played}` {mark} |")  # fmt: skip
    mismatched = [c for c in committed if not c.fingerprint_match]
    if mismatched:
        which = ", ".join(f"{c.result.policy}_{c.result.set}" for c in mismatched)
        other = ", ".join(sorted({str(c.played) for c in mismatched}))
        check = (f"**Warning: {which} were made with other weights (fingerprint {other}), not the ones published "
                 "here: those numbers do not describe this model.**")
    else:
        check = "Every result below was made with exactly these weights (same fingerprint)."
    return "\n\n".join([
        (f"Committed evaluation results of this model (`{report.parent / 'eval'}`): accuracy of the answer verifier "
         f"(version {first.get('verifier_version')}) with Wilson 95 % intervals. Published weights: fingerprint "
         f"`{fingerprint}`."),
        check,
        "| set | policy | n | accuracy [Wilson 95 %] | budget | parser | shots | model fingerprint |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows),
    ])  # fmt: skip


def _headline(report: Path, name: str) -> str:
    """The report's headline comparison, verbatim, when it is about this model's policy ('' otherwise)."""
    from pipeline.readme import report_section  # the card quotes the report as the README does

    try:
        headline = report_section(report.read_text(encoding="utf-8"), "Headline")
    except ValueError:
        return ""
    return f"From the report (`{report}`):\n\n{headline}" if re.search(rf"\b{re.escape(name)}\b", headline) else ""


def _protocol_section(prepare: dict[str, Any], first: dict[str, Any]) -> str:
    from sqlenv.types import TOOL_NAMES

    s, env = first.get("settings") or {}, first.get("env") or {}
    gen = s.get("gen") or {}
    decoding = ("greedy" if gen.get("do_sample") is False
                else f"sampling (temperature {gen.get('temperature')}, top-p {gen.get('top_p')})")  # fmt: skip
    domains = prepare.get("domains") or {}
    data = first.get("data") or {}  # `sqlenv eval` results name their question file; the evaluate stage's are n50/n200
    source = (f"- Question file `{data.get('questions_file') or data.get('data')}` ({data.get('pool')} questions, "
              f"databases `{data.get('db_dir')}`).") if data else ""  # fmt: skip
    return "\n".join(x for x in [
        source,
        (f"- Questions: {prepare.get('source', 'not recorded')} data, split `{prepare.get('split', 'not recorded')}`; "
         f"evaluation domains {', '.join(domains.get('eval', [])) or 'not recorded'}, none of them seen in training "
         f"({', '.join(domains.get('train', [])) or 'not recorded'}). n50 is a subset of n200."),
        (f"- Episode: {_mode_words(env)}; the model calls {', '.join(TOOL_NAMES)} (flat string arguments), at most "
         f"{env.get('step_budget')} calls, {env.get('sql_timeout_s')} s per SQL statement, {env.get('max_rows_shown')} "
         f"rows and {env.get('max_chars_shown')} characters shown per result. A turn without a tool call ends the "
         "episode, as in a TRL rollout."),
        (f"- Decoding: {decoding}, {s.get('max_total_tokens')} completion tokens per episode (generated + tool "
         f"results), {s.get('dtype')}, tool calls read by the {s.get('parser')} parser; scored "
         f"{first.get('reward_mode')} (correct or not) at commit `{first.get('git_commit')}`."),
    ] if x)  # fmt: skip


def _training_section(name: str, trained: list[str], params: dict[str, Any], prov: dict[str, Any]) -> str:
    stages = f"Stages behind this folder: {' → '.join(['base', *trained])}. " if trained else ""
    if name in LINEAGE:
        what = "The sections of `params.yaml` they read:"
    else:
        what = f"Which stages made a folder named `{name}` is not known here; every training section of `params.yaml`:"
    sections = {k: params[k] for k in LINEAGE.get(name, LINEAGE["grpo_phase2"])}
    check = "\n".join(_params_check(params, prov)) or "(No params hash in provenance.json to check the file against.)"
    return f"{stages}{what}\n\n```yaml\n{yaml.safe_dump(sections, sort_keys=False)}```\n\n{check}"


def _provenance_section(prov: dict[str, Any]) -> str:
    upstream, gguf = prov.get("upstream"), prov.get("gguf")
    lines = [(f"- Base: {f'[{upstream}](https://huggingface.co/{upstream})' if upstream else 'not recorded'}; spec "
              f"`{prov.get('spec', 'not recorded')}`, source `{prov.get('source', 'not recorded')}`.")]  # fmt: skip
    if isinstance(gguf, dict):
        lines.append(f"- Carried as a GGUF ({gguf.get('name')}, sha256 `{gguf.get('sha256')}`), dequantised to "
                     f"{prov.get('dtype')}: the weights carry the quantisation's rounding, so numbers are not those "
                     "of the Hub checkpoint.")  # fmt: skip
    if prov.get("base_fingerprint"):
        lines.append(f"- Base folder fingerprint `{prov['base_fingerprint']}`.")
    if isinstance(prov.get("sft"), dict):
        sft = prov["sft"]
        lines.append(f"- `sft`: {sft.get('examples')} trajectories, {sft.get('steps')} steps, LoRA {sft.get('lora')}.")
    lines += [f"- `{e.get('stage')}`: {e.get('steps')} steps, LoRA {e.get('lora')}, from `{e.get('parent_fingerprint')}` "
              f"to `{e.get('fingerprint')}`." for e in prov.get("training", [])]  # fmt: skip
    template = (prov.get("chat_template") or {}).get("name", "not recorded")
    lines.append(f"- Chat template: `{template}` (TRL's); render prompts with the tokenizer's own template and the "
                 "tool schemas of `sqlenv.env.trl_adapter`.")  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- validate
def _question(args: argparse.Namespace) -> tuple[Any, Path]:
    from sqlenv.eval.harness import check_databases, load_questions_file

    try:
        questions = load_questions_file(args.questions)
        wanted = args.question
        picked = [q for q in questions if q.id == wanted] or (
            [questions[int(wanted)]] if wanted.isdigit() and int(wanted) < len(questions) else [])
        if not picked:
            raise ValueError(f"no question {wanted!r} in {args.questions}")
        check_databases(picked, args.db_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(f"validation episode: {exc}") from exc
    return picked[0], Path(args.db_dir)


def _validate(folder: Path, source_fp: str, question: Any, db_dir: Path, first: dict[str, Any],
              max_total_tokens: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Card metadata summary and the episode's verdict; RuntimeError when the folder is not publishable."""
    from huggingface_hub import ModelCard

    from sqlenv.sampling import GenerationSettings
    from sqlenv.env.environment import EnvConfig
    from sqlenv.env.rewards import RewardConfig
    from sqlenv.eval.harness import EvalSettings, play
    from sqlenv.provenance import chat_template_kwargs, model_fingerprint

    card = ModelCard.load(folder / CARD_FILE)  # raises on metadata the Hub's parser rejects
    data = card.data
    if model_fingerprint(folder) != source_fp:
        raise RuntimeError(f"the copied files' fingerprint {model_fingerprint(folder)} is not the source's {source_fp}")
    env_block = {k: v for k, v in (first.get("env") or {}).items() if k in {f.name for f in dataclasses.fields(EnvConfig)}}
    s = first.get("settings") or {}
    env = EnvConfig(**env_block, rewards=RewardConfig(mode="binary"))
    settings = EvalSettings(max_total_tokens=max_total_tokens or s.get("max_total_tokens", 768), batch_size=1,
                            gen=GenerationSettings(seed=(s.get("gen") or {}).get("seed", 0)),
                            parser=s.get("parser", "strict"), dtype=s.get("dtype", "bfloat16"))  # fmt: skip
    (record,), _ = play(folder, [question], db_dir=db_dir, env_config=env, settings=settings,
                        template_kwargs=chat_template_kwargs(folder), progress=False)  # fmt: skip
    summary = {"license": data.license, "base_model": data.base_model, "library_name": data.library_name,
               "tags": data.tags, "results": [(r.dataset_split, r.metric_value) for r in data.eval_results or []]}  # fmt: skip
    episode = {"question_id": record.question_id, "correct": record.correct, "verdict": record.verdict_reason,
               "end_reason": record.end_reason, "steps": record.steps, "answer": record.answer}  # fmt: skip
    return summary, episode


def _upload(folder: Path, repo_id: str, private: bool) -> str:
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, exist_ok=True, private=private)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="sqlenv publish")
    return str(url)


# --------------------------------------------------------------------------------------------------- run
def run_publish(args: argparse.Namespace, out: TextIO) -> int:
    from pipeline.io import atomic_dir
    from pipeline.params import ParamsError, load_params
    from sqlenv.provenance import model_fingerprint

    repo_id, model_dir = _repo_id(args.repo_id), _model_dir(args.model)
    report = Path(args.report)
    if not report.is_file():
        raise UsageError(f"no report at {report} (run the pipeline, or give --report)")
    try:
        params = dataclasses.asdict(load_params(args.params))
        fingerprint = model_fingerprint(model_dir)
    except (ParamsError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
    committed = committed_results(report.parent / "eval", model_dir.resolve().name, fingerprint)
    if not committed:
        raise UsageError(f"no committed results for {model_dir} under {report.parent / 'eval'} "
                         f"(no <policy>_<set>/metrics.json of its policy or fingerprint {fingerprint})")  # fmt: skip
    question, db_dir = _question(args)
    if args.max_total_tokens is not None and args.max_total_tokens < 1:
        raise UsageError("--max-total-tokens must be >= 1")
    target = Path(args.out) if args.out else Path("publish") / model_dir.resolve().name
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not args.force:
        raise UsageError(f"{target} exists and is not empty (give --force to replace it)")
    if not args.dry_run:
        from huggingface_hub import get_token

        if not get_token():
            raise UsageError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (or use --dry-run)")
    for c in committed:
        if not c.fingerprint_match:
            print(f"sqlenv publish: WARNING: the committed result {c.result.policy}_{c.result.set} was made with model "
                  f"{c.played}, not the {fingerprint} being published; the card says so", file=sys.stderr)  # fmt: skip

    card = card_text(repo_id, model_dir, fingerprint, committed, report=report, params=params, licence=args.license)
    try:
        with atomic_dir(target) as tmp:
            for f in sorted(model_dir.iterdir()):
                if f.is_file() and f.name not in NOT_PUBLISHED and not f.name.startswith("."):
                    shutil.copy2(f, tmp / f.name)
            (tmp / CARD_FILE).write_text(card, encoding="utf-8")
            summary, episode = _validate(tmp, fingerprint, question, db_dir, committed[0].result.info, args.max_total_tokens)
    except Exception as exc:  # noqa: BLE001 - a card that does not parse, weights that do not load: not publishable
        print(f"sqlenv publish: error: the folder failed validation, nothing written ({type(exc).__name__}: {exc})",
              file=sys.stderr)  # fmt: skip
        return domain_cli.EXIT_FAILURES
    line = {"folder": str(target), "files": sorted(f.name for f in target.iterdir()), "card": summary,
            "fingerprint": fingerprint, "fingerprint_match": all(c.fingerprint_match for c in committed),
            "episode": episode, "dry_run": args.dry_run, "repo_id": repo_id, "uploaded": None}  # fmt: skip
    if not args.dry_run:
        try:
            line["uploaded"] = _upload(target, repo_id, args.private)
        except Exception as exc:  # noqa: BLE001 - offline, refused token, quota: all mean "not uploaded"
            print(f"sqlenv publish: error: upload to {repo_id} failed ({type(exc).__name__}: {exc}); the validated folder "
                  f"stays at {target} (rerun with --force, or `hf upload {repo_id} {target}`)", file=sys.stderr)  # fmt: skip
            return domain_cli.EXIT_FAILURES
    out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    return domain_cli.EXIT_OK


PUBLISH = Command(help="write a model folder with a card generated from the committed results; validate; upload",
                  add_arguments=_add_arguments, run=run_publish)  # fmt: skip
