"""Instrumented evaluate@base_3shot_n50: per batch call, the batch cache's shape and bytes, RSS at points."""
import json, sys, time
sys.argv = ["stages.evaluate", "--policy", "base_3shot", "--set", "n50", "--source", "models/base"]
from sqlenv import decode
from sqlenv.train.heap import resident_bytes
log = open("/tmp/s32/probe.jsonl", "w")
orig_pb, orig_decode, orig_keep = decode.ModelGenerator._padded_batch, decode.ModelGenerator._decode, decode.ModelGenerator._keep
state = {"max_rss": 0}
def pb(self, keys, contexts, room):
    before = resident_bytes()
    ids, mask, cache = orig_pb(self, keys, contexts, room)
    k = cache.layers[0]
    nbytes = 0 if getattr(k, "_k", None) is None else 2 * k._k.numel() * k._k.element_size() * len(cache.layers)
    log.write(json.dumps({"ev": "pb", "rows": len(keys), "cols": int(mask.shape[1]), "t_new": int(ids.shape[1]), "room": room,
                          "buf_gb": round(nbytes / 1e9, 3), "rss_before": round(before / 1e9, 3), "rss_after": round(resident_bytes() / 1e9, 3)}) + "\n")
    return ids, mask, cache
def dec(self, keys, step_ids, mask, cache, budgets, min_stopped):
    steps = [0]
    fwd = self.model.forward
    def counting(*a, **kw):
        steps[0] += 1
        out = fwd(*a, **kw)
        r = resident_bytes(); state["max_rss"] = max(state["max_rss"], r)
        return out
    self.model.forward = counting
    try:
        res = orig_decode(self, keys, step_ids, mask, cache, budgets, min_stopped)
    finally:
        del self.model.forward
    log.write(json.dumps({"ev": "decode", "rows": len(keys), "steps": steps[0], "max_budget": max(budgets), "rss_end": round(resident_bytes() / 1e9, 3),
                          "max_rss_in_forwards": round(state["max_rss"] / 1e9, 3)}) + "\n"); log.flush()
    return res
decode.ModelGenerator._padded_batch, decode.ModelGenerator._decode = pb, dec
from stages import evaluate
from pipeline.stage import run_stage
run_stage(evaluate.STAGE, evaluate.main)
