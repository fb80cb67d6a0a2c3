import hashlib, json, os, sys, time, ctypes
import torch
sys.path.insert(0, os.getcwd())
from pipeline import paths
from pipeline.params import load_params
from sqlenv.decode import GenerationSettings
from sqlenv.env.environment import EnvConfig
from sqlenv.eval.harness import EvalSettings, load_questions_file, play
from sqlenv.provenance import chat_template_kwargs
mode, k = sys.argv[1], int(sys.argv[2])
params = load_params(); ev = params.evaluate
torch.set_num_threads(2)
qs = load_questions_file(paths.questions_file("n200"))[:k]
from pipeline.params import section_dict
read = section_dict(params, "seed", "env", "evaluate")
config = EnvConfig.from_dict({**read["env"], "rewards": {"mode": "binary"}})
gen = GenerationSettings(do_sample=False, temperature=ev.temperature, top_p=ev.top_p, seed=params.seed)
s = EvalSettings(max_total_tokens=ev.max_total_tokens, batch_size=ev.batch_size, gen=gen, parser="strict", shots=0,
                 few_shot_seed=0, dtype="bfloat16", backend="hf", draft_tokens=ev.draft_tokens)
libc = ctypes.CDLL("libc.so.6")
hold = []
def after():
    if mode == "trim": libc.malloc_trim(0)
    if mode == "junk": hold.append(torch.empty(int(hashlib.md5(str(len(hold)).encode()).hexdigest()[:5], 16) * 97, dtype=torch.uint8))
t = time.time()
recs, _ = play("models/sft", qs, db_dir=paths.DATABASES, env_config=config, settings=s,
               template_kwargs=chat_template_kwargs(paths.MODELS / "base"), progress=False, after_batch=after)
hs = [hashlib.sha256(json.dumps(r.messages, sort_keys=True).encode()).hexdigest()[:6] for r in recs]
print(mode, round(time.time()-t), sum(r.correct for r in recs), hashlib.sha256("".join(hs).encode()).hexdigest()[:10], " ".join(hs), flush=True)
