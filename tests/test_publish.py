"""Guards `sqlenv publish`: a folder whose card carries the committed metrics files' numbers and parses as a Hub card,
that loads with transformers and plays an episode, written whole or not at all, and clear errors for bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures_env import QUESTIONS, concert_db_dir  # noqa: F401  (fixture)

from pipeline.cli import main
from pipeline.params import load_params
from sqlenv.provenance import PROVENANCE_FILE, model_fingerprint
from sqlenv.train.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
# Numbers no committed file holds, so a card that shows them read them from the fixture's files.
NUMBERS = {"n50": (0.3712, 0.2433, 0.5111), "n200": (0.6185, 0.5497, 0.6832)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny random model in a folder named like the policy it stands for, with a grpo_phase2-like lineage
    in provenance.json (not part of the fingerprint): upstream Qwen, SFT, two GRPO phases, the phase-2 entry
    hashed from today's params.yaml as the grpo stage hashes it."""
    from pipeline.params import params_hash
    from sqlenv.train.grpo import phase_sections

    folder = build_tiny_model(tmp_path_factory.mktemp("publish") / "models" / "grpo_phase2")
    prov = json.loads((folder / PROVENANCE_FILE).read_text())
    prov.pop("licence")
    params = dataclasses.asdict(load_params(PARAMS))
    prov.update(spec="sft:offline:qwen2.5-coder-0.5b-instruct", source="sft", upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
                sft={"examples": 96, "steps": 48, "lora": True}, base_fingerprint="a4817ea891a3",
                training=[{"stage": "grpo_phase1", "steps": 6, "lora": True, "params_hash": "000000000000",
                           "parent_fingerprint": "beca04c24396", "fingerprint": "364df96af85e"},
                          {"stage": "grpo_phase2", "steps": 4, "lora": True, "parent_fingerprint": "364df96af85e",
                           "params_hash": params_hash(phase_sections(params, 2)), "fingerprint": prov["fingerprint"]}])  # fmt: skip
    (folder / PROVENANCE_FILE).write_text(json.dumps(prov))
    return folder


def write_reports(root: Path, fingerprint: str, numbers=NUMBERS) -> Path:
    """A reports folder like the committed one: the committed metrics files of grpo_phase2 (and sft) with the
    fixture's numbers and fingerprint, the committed prepare metrics, a report.md. Returns report.md's path."""
    for set_name, (acc, low, high) in numbers.items():
        doc = json.loads((ROOT / "reports/eval" / f"grpo_phase2_{set_name}" / "metrics.json").read_text())
        doc["metrics"].update(accuracy=acc, accuracy_low=low, accuracy_high=high)
        doc["model"]["fingerprint"] = fingerprint
        (root / "eval" / f"grpo_phase2_{set_name}").mkdir(parents=True, exist_ok=True)
        (root / "eval" / f"grpo_phase2_{set_name}" / "metrics.json").write_text(json.dumps(doc))
    (root / "eval" / "sft_n50").mkdir(parents=True, exist_ok=True)  # another model's result: not in the card
    (root / "eval" / "sft_n50" / "metrics.json").write_text((ROOT / "reports/eval/sft_n50/metrics.json").read_text())
    (root / "prepare").mkdir(exist_ok=True)
    (root / "prepare" / "metrics.json").write_text((ROOT / "reports/prepare/metrics.json").read_text())
    (root / "report.md").write_text("# sqlenv report\n\n## Headline\n\n**grpo_phase2 vs sft on n200**: a fixture line.\n\n"
                                    "## What this report covers\n")
    return root / "report.md"


@pytest.fixture
def inputs(tiny, concert_db_dir, tmp_path) -> dict[str, Path]:  # noqa: F811
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in QUESTIONS))
    report = write_reports(tmp_path / "reports", model_fingerprint(tiny))
    return {"model": tiny, "report": report, "questions": questions, "db_dir": concert_db_dir, "out": tmp_path / "pub" / "m"}


def argv(i: dict[str, Path], *extra: str, dry_run: bool = True) -> list[str]:
    return ["publish", "--model", str(i["model"]), "--repo-id", "someone/sqlenv-grpo", "--report", str(i["report"]),
            "--params", str(PARAMS), "--questions", str(i["questions"]), "--db-dir", str(i["db_dir"]),
            "--out", str(i["out"]), "--max-total-tokens", "24", *(["--dry-run"] if dry_run else []), *extra]  # fmt: skip


def publish(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_writes_a_card_from_the_metrics_files_and_a_loadable_folder(inputs, capsys):
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM

    code, out, err = publish(argv(inputs), capsys)
    assert code == 0, err
    summary = json.loads(out)
    folder = inputs["out"]
    assert summary["folder"] == str(folder) and summary["dry_run"] is True and summary["uploaded"] is None
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
            PROVENANCE_FILE} <= set(summary["files"]) == {f.name for f in folder.iterdir()}  # fmt: skip
    assert [p.name for p in folder.parent.iterdir()] == ["m"]  # no temporary sibling left
    assert model_fingerprint(folder) == model_fingerprint(inputs["model"]) == summary["fingerprint"]
    episode = summary["episode"]
    assert episode["question_id"] == QUESTIONS[0].id and episode["verdict"] and episode["correct"] is False

    # The numbers in the card are the metrics files' (read back, not restated here).
    card = ModelCard.load(folder / "README.md")
    files = {s: json.loads((inputs["report"].parent / "eval" / f"grpo_phase2_{s}" / "metrics.json").read_text())["metrics"]
             for s in ("n50", "n200")}  # fmt: skip
    assert {r.dataset_split: r.metric_value for r in card.data.eval_results} == {s: m["accuracy"] for s, m in files.items()}
    assert summary["card"]["results"] == [[s, files[s]["accuracy"]] for s in ("n50", "n200")]
    for s, m in files.items():
        row = f"| {s} | grpo_phase2 | {m['n']} | {100 * m['accuracy']:.1f} % [{100 * m['accuracy_low']:.1f} %, " \
              f"{100 * m['accuracy_high']:.1f} %] | 768 tokens, 15 calls | strict | 0 | `{summary['fingerprint']}` ✓ |"
        assert row in card.text
    meta = card.data.to_dict()
    assert [(r["set"], r["accuracy_low"], r["accuracy_high"]) for r in meta["sqlenv"]["results"]] == \
        [(s, files[s]["accuracy_low"], files[s]["accuracy_high"]) for s in ("n50", "n200")]
    assert {r["policy"] for r in meta["sqlenv"]["results"]} == {"grpo_phase2"}  # sft_n50 is another model's
    assert card.data.license == "apache-2.0" and card.data.base_model == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert card.data.library_name == "transformers" and "grpo_phase2" in card.data.tags
    assert "Every result below was made with exactly these weights" in card.text
    assert "car_rental, hospital, hr, library, school" in card.text and "greedy" in card.text  # held-out domains
    assert "`grpo_phase2` recorded params hash" in card.text and "**the same params**" in card.text
    assert "`grpo_phase1` recorded params hash `000000000000`" in card.text and "**they differ**" in card.text
    assert "**grpo_phase2 vs sft on n200**: a fixture line." in card.text  # the report's headline, verbatim
    block = card.text.split("```yaml\n", 1)[1].split("```", 1)[0]  # the training sections, as params.yaml holds them
    params = dataclasses.asdict(load_params(PARAMS))
    assert yaml.safe_load(block) == {k: params[k] for k in ("model", "env", "sft", "rewards", "grpo", "grpo_phase1",
                                                            "grpo_phase2")}  # fmt: skip
    AutoModelForCausalLM.from_pretrained(folder)


def test_card_follows_the_metrics_files(tiny, tmp_path):
    """Other numbers in the files, other numbers in the card: nothing is a constant."""
    from huggingface_hub import ModelCard

    from pipeline.publish import card_text, committed_results

    fp = model_fingerprint(tiny)
    report = write_reports(tmp_path / "r", fp, numbers={"n50": (0.125, 0.05, 0.25)})
    committed = committed_results(report.parent / "eval", tiny.name, fp)
    text = card_text("x/y", tiny, fp, committed, report=report, params=dataclasses.asdict(load_params(PARAMS)), licence=None)
    (tmp_path / "README.md").write_text(text)
    card = ModelCard.load(tmp_path / "README.md")
    assert [(r.dataset_split, r.metric_value) for r in card.data.eval_results] == [("n50", 0.125)]
    assert "12.5 % [5.0 %, 25.0 %]" in card.text


def test_subprocess_exit_codes(inputs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "pipeline.cli", *argv(inputs)], check=False, capture_output=True, text=True,
                        env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.splitlines()[-1])["episode"]["verdict"]
    bad = [*argv(inputs), "--force"]
    bad[bad.index("--repo-id") + 1] = "not/a/repo"
    failed = subprocess.run([sys.executable, "-m", "pipeline.cli", *bad], check=False, capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    assert failed.returncode == 2 and "bad --repo-id" in failed.stderr and failed.stdout == ""


@pytest.mark.parametrize("case, needle", [
    ("no model folder", "no model folder at"),
    ("no config.json", "is not a model folder (no config.json)"),
    ("no report", "no report at"),
    ("no metrics", "no committed results for"),
    ("bad repo id", "bad --repo-id"),
    ("unknown question", "no question 'nope'"),
])  # fmt: skip
def test_bad_input_is_one_clear_line_and_leaves_no_folder(inputs, tmp_path, capsys, case, needle):
    i, extra = dict(inputs), []
    if case == "no model folder":
        i["model"] = tmp_path / "nothing"
    elif case == "no config.json":
        i["model"] = tmp_path / "grpo_phase2"
        i["model"].mkdir()
    elif case == "no report":
        i["report"] = tmp_path / "nowhere" / "report.md"
    elif case == "no metrics":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "report.md").write_text("# report\n")
        i["report"] = tmp_path / "empty" / "report.md"
    elif case == "unknown question":
        extra = ["--question", "nope"]
    args = argv(i, *extra)
    if case == "bad repo id":
        args[args.index("--repo-id") + 1] = "bad--id"
    code, out, err = publish(args, capsys)
    assert code == 2 and needle in err and out == "" and len(err.strip().splitlines()) == 1
    assert not inputs["out"].parent.exists()  # nothing written, not even the parent


def test_an_existing_folder_is_replaced_only_with_force(inputs, capsys):
    inputs["out"].mkdir(parents=True)
    (inputs["out"] / "keep.txt").write_text("mine")
    code, out, err = publish(argv(inputs), capsys)
    assert code == 2 and "exists and is not empty" in err and out == ""
    assert [f.name for f in inputs["out"].iterdir()] == ["keep.txt"]
    code, out, err = publish(argv(inputs, "--force"), capsys)
    assert code == 0, err
    assert not (inputs["out"] / "keep.txt").exists() and (inputs["out"] / "README.md").is_file()
    assert [p.name for p in inputs["out"].parent.iterdir()] == ["m"]


def test_results_of_other_weights_are_warned_about_and_marked(inputs, capsys):
    write_reports(inputs["report"].parent, "0123456789ab")
    code, out, err = publish(argv(inputs), capsys)
    assert code == 0, err
    assert "WARNING" in err and "0123456789ab" in err and json.loads(out)["fingerprint_match"] is False
    card = (inputs["out"] / "README.md").read_text()
    assert "were made with other weights (fingerprint 0123456789ab)" in card and "✗ other weights" in card


def test_weights_that_do_not_load_leave_no_folder(inputs, tmp_path, capsys):
    broken = tmp_path / "models" / "grpo_phase2"
    broken.mkdir(parents=True)
    for f in inputs["model"].iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    inputs["model"] = broken
    code, out, err = publish(argv(inputs), capsys)
    assert code == 1 and "failed validation, nothing written" in err and out == ""
    assert not inputs["out"].parent.exists() or list(inputs["out"].parent.iterdir()) == []


def test_upload_after_validation(inputs, capsys, monkeypatch):
    """Offline: the Hub client is replaced; the calls it gets, and a network error's message and exit code."""
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo",
                        lambda self, repo_id, **kw: calls.append(("create_repo", repo_id, kw)) or f"https://hf.co/{repo_id}")
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", lambda self, **kw: calls.append(("upload_folder", kw)))
    code, out, err = publish(argv(inputs, "--private", dry_run=False), capsys)
    assert code == 0, err
    assert calls[0] == ("create_repo", "someone/sqlenv-grpo", {"exist_ok": True, "private": True})
    assert calls[1][0] == "upload_folder" and Path(calls[1][1]["folder_path"]) == inputs["out"]
    assert json.loads(out)["uploaded"] == "https://hf.co/someone/sqlenv-grpo"

    def offline(self, repo_id, **kw):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", offline)
    code, out, err = publish(argv(inputs, "--force", dry_run=False), capsys)
    assert code == 1 and "upload to someone/sqlenv-grpo failed (ConnectionError: no route to host)" in err and out == ""
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    code, out, err = publish(argv(inputs, "--force", dry_run=False), capsys)
    assert code == 2 and "no Hugging Face token" in err
