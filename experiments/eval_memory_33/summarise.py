"""Summarise experiments/eval_memory_33/ from its raw files (every number read, none typed):
.venv/bin/python experiments/eval_memory_33/summarise.py > experiments/eval_memory_33/run.json"""
import json
import sys
from collections import Counter
from pathlib import Path
D = Path(__file__).resolve().parent
sys.path.insert(0, str(D.parents[1]))
from sqlenv.eval.stats import mcnemar_exact  # noqa: E402  (the report's own test)
STAGES = ('sft_n200', 'grpo_phase2_n200', 'base_1shot_n50', 'base_n50', 'grpo_phase1_n50')  # PLAN.md's order, as they ran
LINE_MIB = 8000 * 1e6 / 2**20  # issue 15's 8 GB (SI) in MiB
EARLIER = D.parent / 'eval_memory_32' / 'run.json'  # evaluate@base_3shot_n50 at the same code, session 32
def j(p): return json.loads(Path(p).read_text())
def time_v(p):  # /usr/bin/time -v of `dvc repro -s -f evaluate@<stage>`
    lines = dict(l.strip().rsplit(': ', 1) for l in Path(p).read_text().splitlines() if ': ' in l)
    return {'wall': lines['Elapsed (wall clock) time (h:mm:ss or m:ss)'], 'max_rss_kib': int(lines['Maximum resident set size (kbytes)']),
            'exit_status': int(lines['Exit status'])}
runs = {}
for name in STAGES:
    if not (D / f'{name}_metrics.json').is_file():
        continue
    m = j(D / f'{name}_metrics.json')
    peak = m['system']['peak_rss_mb']
    runs[name] = {'git_commit': m['git_commit'][:7], 'dtype': m['dtype']['dtype'], 'cpu_isa': m['system']['cpu_isa'],
                  'wall_time_s': m['wall_time_s'], 'peak_rss_mib': peak, 'peak_rss_gib': round(peak / 1024, 2),
                  'peak_rss_gb': round(peak * 2**20 / 1e9, 2), 'holds_8gb_line': peak <= LINE_MIB, 'heap': m['heap'],
                  'n': m['n'], 'accuracy': m['metrics']['accuracy'],
                  'load1_start_end': [round(m['system']['load1_start'], 2), round(m['system']['load1_end'], 2)],
                  'samples_sha256_16': (D / f'{name}_samples.sha256').read_text().strip(),
                  'time_v': time_v(D / f'{name}_time_v.txt')}
base3 = j(EARLIER)['runs']['room64b']
out = {
    'plan': 'PLAN.md (written before the runs)',
    'date': '2026-12-05',
    'machine': {'lscpu': 'AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma: no avx512f, avx512_bf16 or amx (lscpu.txt)',
                'nproc': 2, 'memory': '24 GiB', 'torch': '2.13.0+cpu',
                'note': 'one job at a time in the order of STAGES; a 15-s pytest of two thread tests overlapped the first minute of sft_n200'},
    'where': 'dvc repro -s -f evaluate@<stage> in /work/run30 at 9950594 (float32 models trained on this CPU: sft and grpo_phase1 in session 31, grpo_phase2 in session 32)',
    'runs': runs,
    'base_3shot_n50_session_32': {k: base3[k] for k in ('peak_rss_gib', 'peak_rss_gb', 'holds_8gb_line', 'wall_time_s')},
    'all_hold_8gb_line': all(r['holds_8gb_line'] for r in runs.values()) and base3['holds_8gb_line'],
    'highest': max([(r['peak_rss_gb'], s) for s, r in runs.items()] + [(base3['peak_rss_gb'], 'base_3shot_n50')]),
}


def episodes(stage):  # question id -> correct, end_reason, steps, hardness (extracted from run30's samples.jsonl)
    return j(D / f'{stage}_episodes.json')


if all((D / f'{s}_episodes.json').is_file() for s in ('sft_n200', 'grpo_phase2_n200')):
    sft, grpo = episodes('sft_n200'), episodes('grpo_phase2_n200')
    ids = sorted(sft)
    assert ids == sorted(grpo)
    only_grpo, only_sft, p = mcnemar_exact([sft[i]['correct'] for i in ids], [grpo[i]['correct'] for i in ids])
    out['n200_float32_chain'] = {
        'what': 'grpo_phase2 against sft on n200 in this float32 chain (models trained on this CPU), episode by episode; not the reference run',
        'n': len(ids),
        'correct': {s: sum(e['correct'] for e in eps.values()) for s, eps in (('sft', sft), ('grpo_phase2', grpo))},
        'only_sft_correct': only_sft, 'only_grpo_phase2_correct': only_grpo, 'mcnemar_exact_p': round(p, 4),
        'end_reasons': {s: dict(Counter(e['end_reason'] for e in eps.values())) for s, eps in (('sft', sft), ('grpo_phase2', grpo))},
        'mean_steps': {s: round(sum(e['steps'] for e in eps.values()) / len(eps), 2) for s, eps in (('sft', sft), ('grpo_phase2', grpo))},
        'correct_by_hardness': {s: {h: sum(e['correct'] for e in eps.values() if e['hardness'] == h) for h in ('easy', 'medium', 'hard', 'extra')}
                                for s, eps in (('sft', sft), ('grpo_phase2', grpo))},
    }
print(json.dumps(out, indent=1))
