"""What prompt-lookup drafting could buy per decode forward, from accept.json and costs.json (every number read):
.venv/bin/python experiments/spec_decode_34/summarise.py > experiments/spec_decode_34/estimate.json

For R running rows and a draft of k tokens, a verifying forward costs forward(R, k + 1) and yields
tokens_per_forward(k) tokens a row, where plain decoding's forward(R, 1) yields one: the speed-up of the
decode forwards is tokens_per_forward(k) x forward(R, 1) / forward(R, k + 1), an upper bound (drafting itself,
the bookkeeping of rejected tokens and the cache's holes cost nothing here)."""
import json
from pathlib import Path

D = Path(__file__).resolve().parent
accept, costs = json.loads((D / "accept.json").read_text()), json.loads((D / "costs.json").read_text())
out = {"what": __doc__.split("\n", 2)[2].strip().replace("\n", " ")}
for attention in ("forward_ms_sdpa", "forward_ms_packed_gqa"):
    forward = costs[attention]
    table = {}
    for name, row in accept["sets"].items():
        per_rows = {}
        for rows in sorted({int(key.split("x")[0]) for key in forward}):
            base = forward[f"{rows}x1"]
            options = {k: round(rate * base / forward[f"{rows}x{int(k) + 1}"], 2)
                       for k, rate in row["tokens_per_forward"].items() if f"{rows}x{int(k) + 1}" in forward}
            best = max(options, key=options.get)
            per_rows[str(rows)] = {"speedup_by_draft": options, "best_draft": int(best), "best_speedup": options[best]}
        table[name] = per_rows
    out[attention] = table
print(json.dumps(out, indent=1))
