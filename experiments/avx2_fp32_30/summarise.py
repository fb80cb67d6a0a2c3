"""Summarise experiments/avx2_fp32_30/ from its raw files (every number read, none typed): python3 summarise.py > run.json"""
import json, statistics
from pathlib import Path
D = Path(__file__).resolve().parent
MAIN = D.parents[1]
def j(p): return json.loads(Path(p).read_text())
env = [j(D / f'bench_env_{i}.json') for i in (1, 2, 3)]
sft_b, grpo_b = j(D / 'bench_sft.json'), j(D / 'bench_grpo.json')
ev = j(D / 'evaluate_base_n50_metrics.json')
ref = {s: j(MAIN / 'experiments/make_run_29/run.json')['stages'].get(s) for s in ('sft', 'grpo_phase1', 'evaluate@base_n50', 'prepare_model')}
stages = {}
for name in ('prepare_model', 'sft', 'grpo_phase1'):
    f = D / f'{name}_metrics.json'
    if f.is_file():
        stages[name] = j(f)
out = {
    'purpose': (D / 'PLAN.md').read_text().split('\n\n')[1].replace('\n', ' '),
    'plan': 'PLAN.md (written before the measurements)',
    'date': '2026-12-04',
    'commit': '7bcf55c (the clone the stages ran in; no stage dependency changed since 72a154c, the reference run). '
              'The benches ran in the same clone; its git_dirty is DVC\'s rewritten dvc.lock and metrics files, not code.',
    'machine': {'lscpu': 'AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma: no avx512f, avx512_bf16 or amx (lscpu.txt). The AMD EPYC of earlier sessions reported the same name, family and model (README, Benchmarks) with avx512_bf16',
                'nproc': 2, 'memory': '24 GiB', 'torch': '2.13.0+cpu',
                'note': 'quiet machine, one job at a time, in this order: dtype probe, bench_env x3, bench_sft, bench_grpo, evaluate@base_n50, sft, grpo_phase1'},
    'dtype_probe_ms': {'runs': 'bench_sft, bench_grpo, evaluate@base_n50, sft, grpo_phase1',
                       'bf16': [x['dtype']['bf16_ms'] for x in (sft_b, grpo_b, ev, *[stages[k] for k in ('sft', 'grpo_phase1')])],
                       'fp32': [x['dtype']['fp32_ms'] for x in (sft_b, grpo_b, ev, *[stages[k] for k in ('sft', 'grpo_phase1')])],
                       'chosen': sorted({x['dtype']['dtype'] for x in (sft_b, grpo_b, ev, *[stages[k] for k in ('sft', 'grpo_phase1')])})},
    'bench_env': {'files': 'bench_env_1..3.json (at 40610c8, the recording of bench_machine; the environment is 7bcf55c\'s); three runs after grpo_phase1', 'query_ratio_gold': [e['query_ratio'] for e in env], 'query_ratio_mixed': [e['mixed']['query_ratio'] for e in env],
                  'env_overhead_us_per_step_mixed': [e['mixed']['env_overhead_us_per_step'] for e in env],
                  'raw_query_us_median_mixed': [e['mixed']['raw_query_us_median'] for e in env], 'target': 1.25},
    'bench_sft': {side: {'seconds_per_step': r['seconds_per_step'], 'peak_rss_mib': r['peak_rss_mb'], 'train_loss': r['train_loss']}
                  for r in sft_b['runs'] for side in ['shared_prefix' if r['shared_prefix'] else 'plain']},
    'bench_grpo_base_model': {k: grpo_b['configs']['default'][k] for k in ('seconds_per_step', 'generation_s_per_step', 'training_s_per_step', 'peak_rss_mb', 'distinct_questions')},
    'evaluate@base_n50': {'wall_s': ev['wall_time_s'], 'peak_rss_mib': ev['system']['peak_rss_mb'], 'heap': ev['heap'],
                          'correct': ev['metrics']['correct'], 'answered_rate': ev['metrics']['answered_rate'],
                          'against_the_reference_run': 'compare_base_n50.json: 0/50 on both, McNemar 0:0; 24 of 50 transcripts identical, 45 of 50 answered alike'},
    'stages': {},
    'reference_run_make_run_29_xeon_bf16': ref,
}
for name, m in stages.items():
    rec = {'peak_rss_mib': m.get('system', {}).get('peak_rss_mb'), 'dtype': m.get('dtype', {}).get('dtype')}
    if name == 'prepare_model':
        rec['wall_time_s'] = m['conversion']['wall_s']
    for k in ('wall_time_s', 'seconds_per_step', 'train_loss', 'steps', 'distinct_questions', 'accuracy_mean', 'reward_mean'):
        if k in m: rec[k] = m[k]
    out['stages'][name] = rec
out['stages']['evaluate@base_n50'] = {'wall_time_s': ev['wall_time_s'], 'peak_rss_mib': ev['system']['peak_rss_mb'], 'dtype': ev['dtype']['dtype']}
# Projection: each reference stage x the ratio of the measured stage of its kind (evaluations: evaluate@base_n50;
# grpo_phase2: grpo_phase1), measured stages as measured.
full = j(MAIN / 'experiments/make_run_29/run.json')['stages']
meas = {k: v['wall_time_s'] for k, v in out['stages'].items()}
ratio = {k: meas[k] / full[k]['wall_s'] for k in meas}
proj, how = {}, {}
for k, v in full.items():
    if k in meas:
        proj[k], how[k] = meas[k], 'measured'
    elif k.startswith('evaluate@'):
        proj[k], how[k] = v['wall_s'] * ratio['evaluate@base_n50'], 'x evaluate@base_n50 ratio %.2f' % ratio['evaluate@base_n50']
    elif k == 'grpo_phase2' and 'grpo_phase1' in ratio:
        proj[k], how[k] = v['wall_s'] * ratio['grpo_phase1'], 'x grpo_phase1 ratio %.2f' % ratio['grpo_phase1']
    else:
        proj[k], how[k] = v['wall_s'], 'as on the Xeon (not measured here)'
out['ratios_to_reference'] = {k: round(r, 2) for k, r in ratio.items()}
out['projected_make_run'] = {
    'rule': 'each stage of make_run_29 (Intel Xeon, bf16) at the measured time here, else scaled by the measured stage of its kind; installs and DVC overhead not included (about 5 min there)',
    'stages_s': {k: round(v, 1) for k, v in proj.items()}, 'how': how,
    'total_s': round(sum(proj.values()), 1), 'total_min': round(sum(proj.values()) / 60, 1),
    'reference_total_min': round(sum(v['wall_s'] for v in full.values()) / 60, 1),
}
print(json.dumps(out, indent=1))
