"""Summarise experiments/fp32_checkpointing_31/ from its raw files (every number read, none typed): python3 summarise.py > run.json"""
import csv, json, statistics
from pathlib import Path
D = Path(__file__).resolve().parent
BEFORE = D.parent / 'avx2_fp32_30'  # session 30: the same CPU kind, the same inputs, checkpointing off
def j(p): return json.loads(Path(p).read_text())
def rows(p): return list(csv.DictReader(Path(p).open()))
def gb(mib): return round(mib * 2**20 / 1e9, 2)  # MiB -> GB (SI), the unit of issue 15's 8 GB line
def time_v(p):  # /usr/bin/time -v of `dvc repro -s <stage>`: wall and the peak of the process tree's largest
    lines = dict(l.strip().rsplit(': ', 1) for l in Path(p).read_text().splitlines() if ': ' in l)
    return {'wall': lines['Elapsed (wall clock) time (h:mm:ss or m:ss)'], 'max_rss_kib': int(lines['Maximum resident set size (kbytes)'])}

stage, before = {}, {}
for name in ('sft', 'grpo_phase1'):
    m, b = j(D / f'{name}_metrics.json'), j(BEFORE / f'{name}_metrics.json')
    keys = ('wall_time_s', 'seconds_per_step', 'steps', 'train_loss', 'distinct_questions', 'reward_mean', 'accuracy_mean')
    fp = 'fingerprint' if name == 'sft' else 'model_fingerprint'
    stage[name] = {**{k: m[k] for k in keys if k in m}, 'model_fingerprint': m[fp], 'dtype': m['dtype']['dtype'],
                   'activation_checkpointing': m['activation_checkpointing'], 'cpu_isa': m['system']['cpu_isa'],
                   'peak_rss_mib': m['system']['peak_rss_mb'], 'peak_rss_gb': gb(m['system']['peak_rss_mb']),
                   'load1_start_end': [m['system']['load1_start'], m['system']['load1_end']],
                   'time_v': time_v(D / f'{name}_time_v.txt')}
    before[name] = {**{k: b[k] for k in keys if k in b}, 'model_fingerprint': b[fp],
                    'peak_rss_mib': b['system']['peak_rss_mb'], 'peak_rss_gb': gb(b['system']['peak_rss_mb'])}
loss_now, loss_before = rows(D / 'sft_loss.csv'), rows(BEFORE / 'sft_loss.csv')
curve_now, curve_before = rows(D / 'grpo_phase1_curve.csv'), rows(D / 'grpo_phase1_curve_session30.csv')  # the latter: session 30's workspace
benches = {}
for name in ('bench_sft_checkpointing', 'bench_sft_checkpointing_6steps', 'bench_sft_checkpointing_alternating'):
    f = D / f'{name}.json'
    if f.is_file():
        b = j(f)
        benches[name] = {'steps': b['steps'], 'repeats': b['repeats'], 'git_commit': b['git_commit'][:7], 'git_dirty': b['git_dirty'],
                         'oneDNN_cache': b['machine'].get('system/ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'not set (oneDNN default)'),
                         'order': [r['activation_checkpointing'] for r in b['runs']],
                         'seconds_per_step_median': b['seconds_per_step_median'],
                         'ratio_checkpointing_over_plain': b['ratio_checkpointing_over_plain'],
                         'peak_rss_mib': [[r['activation_checkpointing'], r['peak_rss_mb']] for r in b['runs']],
                         'train_loss': sorted({r['train_loss'] for r in b['runs']})}
out = {
    'purpose': (D / 'PLAN.md').read_text().split('\n\n')[3].replace('\n', ' '),
    'plan': 'PLAN.md (written before the measurements)',
    'date': '2026-12-04',
    'commit': 'b7591c9 (the stages ran at it in /work/run30, session 30\'s workspace: its data/ and models/base). The benches ran in /work/main at b7591c9; '
              'the 6- and 4-step ones with the then uncommitted call of machine.set_runtime (bench_machine.stage_runtime then; git_dirty; committed as 62e5aa5), the 3-step one before it, without the oneDNN bound',
    'machine': {'lscpu': 'AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma: no avx512f, avx512_bf16 or amx (lscpu.txt)',
                'nproc': 2, 'memory': '24 GiB', 'torch': '2.13.0+cpu',
                'note': 'quiet machine, one job at a time, in this order: bench_sft (3 steps), sft, grpo_phase1, bench_sft (6 steps), bench_sft (4 steps x 2, alternating), evaluate@base_3shot_n50'},
    'stages_with_checkpointing': stage,
    'session_30_without': before,
    'same_computation': {
        'sft_model_fingerprint_equal': stage['sft']['model_fingerprint'] == before['sft']['model_fingerprint'],
        'grpo_phase1_model_fingerprint_equal': stage['grpo_phase1']['model_fingerprint'] == before['grpo_phase1']['model_fingerprint'],
        'sft_loss_curve_equal': [(r['step'], r['loss']) for r in loss_now] == [(r['step'], r['loss']) for r in loss_before],
    },
    'time_ratio_against_session_30': {k: round(stage[k]['seconds_per_step'] / before[k]['seconds_per_step'], 3) for k in stage},
    'peak_ratio_against_session_30': {k: round(stage[k]['peak_rss_mib'] / before[k]['peak_rss_mib'], 3) for k in stage},
    'grpo_phase1_step_time_s': {'with': [round(float(r['step_time']), 1) for r in curve_now],
                                'session_30_without': [round(float(r['step_time']), 1) for r in curve_before]},
    'grpo_phase1_rewards_equal': [r['reward'] for r in curve_now] == [r['reward'] for r in curve_before],
    'grpo_phase1_questions_equal': [r['questions'] for r in curve_now] == [r['questions'] for r in curve_before],
    'benches': benches,
    'rule_8GB': {k: stage[k]['peak_rss_gb'] <= 8.0 for k in stage},
}
ev, ref = j(D / 'evaluate_base_3shot_n50_metrics.json'), j(D.parents[1] / 'reports/eval/base_3shot_n50/metrics.json')
out['evaluate@base_3shot_n50'] = {  # the addendum's step 4: no checkpointing here (no backward), float32 as `auto` chose
    'float32_here': {'wall_time_s': ev['wall_time_s'], 'peak_rss_mib': ev['system']['peak_rss_mb'],
                     'peak_rss_gb': gb(ev['system']['peak_rss_mb']), 'heap': ev['heap'], 'correct': ev['metrics']['correct'],
                     'n': ev['n'], 'dtype': ev['dtype'], 'time_v': time_v(D / 'evaluate_base_3shot_n50_time_v.txt')},
    'reference_run_xeon_bf16': {'wall_time_s': ref['wall_time_s'], 'peak_rss_mib': ref['system']['peak_rss_mb'],
                                'heap': ref['heap'], 'correct': ref['metrics']['correct'], 'dtype': ref['dtype']['dtype']},
}
out['rule_8GB']['evaluate@base_3shot_n50'] = out['evaluate@base_3shot_n50']['float32_here']['peak_rss_gb'] <= 8.0
print(json.dumps(out, indent=1))
