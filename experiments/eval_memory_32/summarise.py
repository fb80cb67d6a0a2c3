"""Summarise experiments/eval_memory_32/ from its raw files (every number read, none typed): python3 summarise.py > run.json"""
import csv, json, statistics
from pathlib import Path
D = Path(__file__).resolve().parent
RUNS = ('before', 'after1', 'mmap', 'room64', 'room64b')  # PLAN.md's steps 1-3 and the repeat, in the order they ran
# metrics.json's git_commit is the workspace's HEAD (7359bd9); the decode module under test was copied over it
CODE = {'before': '7359bd9 as committed', 'after1': 'sqlenv/decode.py of 8b766da', 'mmap': 'as after1, MALLOC_MMAP_THRESHOLD_=1048576',
        'room64': 'sqlenv/decode.py of the DECODE_ROOM commit (8b766da + room 64)', 'room64b': 'as room64'}
LINE_MIB = 8000 * 1e6 / 2**20  # issue 15's 8 GB (SI) in MiB
def j(p): return json.loads(Path(p).read_text())
def time_v(p):  # /usr/bin/time -v of `dvc repro -s -f evaluate@base_3shot_n50`
    lines = dict(l.strip().rsplit(': ', 1) for l in Path(p).read_text().splitlines() if ': ' in l)
    return {'wall': lines['Elapsed (wall clock) time (h:mm:ss or m:ss)'], 'max_rss_kib': int(lines['Maximum resident set size (kbytes)']),
            'minor_page_faults': int(lines['Minor (reclaiming a frame) page faults'])}
runs = {}
for name in RUNS:
    if not (D / f'{name}_metrics.json').is_file():
        continue
    m = j(D / f'{name}_metrics.json')
    peak = m['system']['peak_rss_mb']
    runs[name] = {'code': CODE[name], 'git_commit': m['git_commit'][:7], 'dtype': m['dtype']['dtype'], 'cpu_isa': m['system']['cpu_isa'],
                  'wall_time_s': m['wall_time_s'], 'peak_rss_mib': peak, 'peak_rss_gib': round(peak / 1024, 2),
                  'peak_rss_gb': round(peak * 2**20 / 1e9, 2), 'holds_8gb_line': peak <= LINE_MIB,
                  'heap': m['heap'], 'accuracy': m['metrics']['accuracy'], 'n': m['n'],
                  'load1_start_end': [m['system']['load1_start'], m['system']['load1_end']],
                  'samples_sha256_16': (D / f'{name}_samples.sha256').read_text().strip(),
                  'time_v': time_v(D / f'{name}_time_v.txt')}
probe = [json.loads(l) for l in (D / 'probe.jsonl').read_text().splitlines()]
decodes = [r for r in probe if r['ev'] == 'decode']
buffers = [r for r in probe if r['ev'] == 'pb' and r['room'] > 0]
out = {
    'plan': 'PLAN.md (steps 2 and 3 written before their measurements; step 1 ran before the file)',
    'date': '2026-12-05',
    'machine': {'lscpu': 'AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma: no avx512f, avx512_bf16 or amx (lscpu.txt)',
                'nproc': 2, 'memory': '24 GiB', 'torch': '2.13.0+cpu',
                'note': 'quiet machine, one job at a time, in this order: ' + ', '.join(RUNS[:3]) + ', probe (the after1 code), ' + ', '.join(RUNS[3:])},
    'stage': 'evaluate@base_3shot_n50 (dvc repro -s -f in /work/run30: session 30\'s data/ and models/base)',
    'runs': runs,
    'same_episodes': len({r['samples_sha256_16'] for r in runs.values()}) == 1,
    'probe': {'decode_calls': len(decodes), 'tokens_decoded_per_call': sorted(r['steps'] for r in decodes),
              'median_tokens_per_call': statistics.median(r['steps'] for r in decodes),
              'room_reserved_per_call': [r['room'] for r in buffers],
              'room_share_of_decode_buffer_median': round(statistics.median(r['room'] / (r['cols'] + r['room']) for r in buffers), 3),
              'decode_buffer_gb_max': max(r['buf_gb'] for r in buffers),
              'rss_rise_over_buffer_median': round(statistics.median((r['rss_after'] - r['rss_before']) / r['buf_gb'] for r in buffers), 2),
              'max_rss_gb_in_decode_forwards': max(r['max_rss_in_forwards'] for r in decodes)},
}
if (D / 'grpo_phase2_metrics.json').is_file():  # the addendum's step 5
    m = j(D / 'grpo_phase2_metrics.json')
    peak = m['system']['peak_rss_mb']
    curve = list(csv.DictReader((D / 'grpo_phase2_curve.csv').open()))
    out['grpo_phase2'] = {**{k: m[k] for k in ('wall_time_s', 'seconds_per_step', 'steps', 'distinct_questions', 'reward_mean',
                                                'accuracy_mean', 'activation_checkpointing', 'model_fingerprint')},
                          'dtype': m['dtype']['dtype'], 'peak_rss_mib': peak, 'peak_rss_gib': round(peak / 1024, 2),
                          'peak_rss_gb': round(peak * 2**20 / 1e9, 2), 'holds_8gb_line': peak <= LINE_MIB,
                          'load1_start_end': [m['system']['load1_start'], m['system']['load1_end']],
                          'step_time_s': [round(float(r['step_time']), 1) for r in curve],
                          'reward': [round(float(r['reward']), 3) for r in curve],
                          'time_v': {k: v for k, v in time_v(D / 'grpo_phase2_time_v.txt').items()}}
print(json.dumps(out, indent=1))
