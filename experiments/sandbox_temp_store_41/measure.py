"""The sandbox's temporary storage in memory (`temp_store=MEMORY`, before 6bad4de) against files (`FILE`, after):
time and heap growth of statements that sort or group, each measured in a fresh process.

Per (statement, mode): a child process opens a `Sandbox` (the code of this checkout), sets `temp_store` to the
mode (the authorizer is lifted for that one pragma and put back), resets its peak RSS (Linux VmHWM), runs the
statement once and reports the wall time, whether it timed out, the result's first row and how far the peak RSS
rose above the RSS before. Then the same child times `--repeats` executions (best of 5 batches) for the
ordinary queries. Writes JSON.

    .venv/bin/python experiments/sandbox_temp_store_41/measure.py --spider-dir ../shared/spider \
        --out experiments/sandbox_temp_store_41/run.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from sqlenv.env.sandbox import Sandbox, SandboxLimits
db, mode, sql, timeout, repeats = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6])

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

box = Sandbox(db, SandboxLimits(timeout_s=timeout))
box._conn.set_authorizer(None)
box._conn.execute(f"PRAGMA temp_store = {mode}")
box._conn.set_authorizer(box._make_authorizer())
box.execute("SELECT 1")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = kib("VmRSS")
start = time.perf_counter()
res = box.execute(sql)
took = time.perf_counter() - start
out = {"wall_s": round(took, 4), "ok": res.ok, "timed_out": res.timed_out, "first_row": [str(v) for v in res.rows[0]] if res.ok and res.rows else None,
       "heap_growth_mb": round((kib("VmHWM") - before) / 1024, 1)}
if repeats:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            box.execute(sql)
        best = min(best, (time.perf_counter() - start) / repeats)
    out["best_us"] = round(best * 1e6, 1)
print(json.dumps(out))
"""


def numbers_db(path: Path) -> Path:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE numbers (n INTEGER PRIMARY KEY, label TEXT)")
    con.executemany("INSERT INTO numbers VALUES (?, ?)", [(i, f"label {i}") for i in range(1, 1001)])
    con.commit()
    con.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spider-dir", type=Path, default=REPO.parent / "shared" / "spider")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    world = args.spider_dir / "database" / "world_1" / "world_1.sqlite"
    with tempfile.TemporaryDirectory() as tmp:
        numbers = numbers_db(Path(tmp) / "numbers.sqlite")
        cases = [  # (name, database, sql, timeout s, repeats for the timing)
            ("spider_group_order_limit", world, "SELECT T1.Continent FROM country AS T1 JOIN countrylanguage AS T2 ON "
             "T1.Code = T2.CountryCode GROUP BY T1.Continent ORDER BY COUNT(*) DESC LIMIT 1", 2.0, 300),
            ("spider_range_1860_rows", world, "SELECT name FROM city WHERE Population BETWEEN 160000 AND 900000", 2.0, 300),
            ("distinct_45mb", numbers, "SELECT count(DISTINCT printf('%.200c', 'x') || a.n || '-' || b.n) "
             "FROM numbers a, numbers b WHERE b.n <= 200", 10.0, 0),
            ("runaway_group_by_1e9_rows", numbers, "SELECT a.n % 7, count(*) FROM numbers a, numbers b, numbers c "
             "GROUP BY a.n || b.n || c.n LIMIT 1", 2.0, 0),
            ("runaway_recursive_order_by", numbers, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
             "SELECT x FROM c ORDER BY x DESC", 0.5, 0),
        ]
        results = {}
        for name, db, sql, timeout, repeats in cases:
            results[name] = {"sql": sql, "timeout_s": timeout}
            for mode in ("MEMORY", "FILE"):
                child = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(db), mode, sql, str(timeout), str(repeats)],
                                       capture_output=True, text=True, check=True, env={**os.environ, "SQLITE_TMPDIR": tmp})  # fmt: skip
                results[name][mode] = json.loads(child.stdout)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    out = {"commit": commit, "cpu_model": cpu, "nproc": os.cpu_count(), "loadavg_after": os.getloadavg(), "cases": results}
    text = json.dumps(out, indent=1)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
