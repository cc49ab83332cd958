"""Regenerates data/math_offline.jsonl: 500 GSM-style word problems with integer answers, made by
reasoning-gym's `gsm_symbolic` generators (Apache-2.0) with a fixed seed. A dev tool, not a
requirement of the project:

    pip install reasoning-gym==0.1.25 && python data/make_math_offline.py

data.load_math(split, "offline") splits the file by line: 0-349 train, 350-399 val, 400-499 test.
"""
import json
import os

import reasoning_gym

SEED, N = 1234, 500
SUFFIX = " Give the result as your final answer. Do not include units."  # the env asks in its own words

out, seen = [], set()
for x in reasoning_gym.create_dataset("gsm_symbolic", size=2 * N, seed=SEED):
    q = x["question"].removesuffix(SUFFIX).strip()
    if q not in seen:  # the split is by line, so a duplicate text would leak across splits
        seen.add(q)
        out.append({"problem": q, "answer": str(x["answer"]).strip()})
    if len(out) == N:
        break
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "math_offline.jsonl")
with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in out)
print(f"wrote {len(out)} problems to {path}")
