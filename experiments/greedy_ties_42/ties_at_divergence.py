import json, lzma, subprocess, sys, os, torch
sys.path.insert(0, os.getcwd())
from pipeline import paths
from pipeline.params import load_params, section_dict
from sqlenv.env.environment import EnvConfig
from sqlenv.env import prompts
from sqlenv.eval.harness import load_questions_file
from sqlenv.eval.rollout import Episode, rollout_chat_template, ensure_response_parser
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(2)
params = load_params()
config = EnvConfig.from_dict({**section_dict(params, "env")["env"], "rewards": {"mode": "binary"}})
ref = {r["question_id"]: r for r in map(json.loads, subprocess.run(["git","-C","/work/main","show","fdd3cde:reports/eval/sft_n200/samples.jsonl"],capture_output=True,text=True).stdout.splitlines())}
new = {r["question_id"]: r for r in map(json.loads, lzma.open("/work/main/experiments/make_run_41/forced/outputs/reports/eval/sft_n200/samples.jsonl.xz","rt"))}
qs = {q.id: q for q in load_questions_file(paths.questions_file("n200"))}
tok = AutoTokenizer.from_pretrained("models/sft"); ensure_response_parser(tok); tmpl = rollout_chat_template(tok)
m = AutoModelForCausalLM.from_pretrained("models/sft", dtype=torch.bfloat16).eval()
n = 0
for q in ref:
    a, b = ref[q]["messages"], new[q]["messages"]
    if a == b: continue
    i = next(i for i,(x,y) in enumerate(zip(a,b)) if x != y)
    tools = Episode(qs[q], db_dir=paths.DATABASES, env_config=config).tools
    ids = [tok.apply_chat_template(prompts.messages_for_template(msgs[:i+1]), tools=tools, chat_template=tmpl, tokenize=True, return_dict=False) for msgs in (a, b)]
    p = next(k for k,(x,y) in enumerate(zip(*ids)) if x != y)
    with torch.no_grad():
        out = m(torch.tensor([ids[0][:p]]), output_hidden_states=True)
        lb = out.logits[0, -1]
        h = out.hidden_states[-1][0, -1].float()
        lf = h @ m.lm_head.weight.float().T
    ta, tb = ids[0][p], ids[1][p]
    top = lb.float().topk(3)
    print(q, "msg", i, "pos", p, "ref", repr(tok.decode([ta])), "new", repr(tok.decode([tb])),
          "bf16 ref/new %.4f %.4f" % (lb[ta].item(), lb[tb].item()), "fp32 ref/new %.4f %.4f" % (lf[ta].item(), lf[tb].item()),
          "top3", [round(v,3) for v in top.values.tolist()], "argmax here", repr(tok.decode([int(lb.max(-1).indices)])), flush=True)
    n += 1
    if n >= 12: break
