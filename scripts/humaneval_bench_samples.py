"""Writes joint samples for `comlrl bench rewards --samples-file`: HumanEval's 164 canonical solutions
as an (aux, main) pair each, the main written under its prompt and calling a helper `aux` (so every
level of the code_exec reward runs, tests included), with the row's fields the reward reads.
The same samples as plugins/code_exec/examples/bench_code_exec.rs scores.

    python3 scripts/humaneval_bench_samples.py > bench-results/humaneval_samples.jsonl
    comlrl bench rewards scenarios/humaneval_coop_tiny.yaml \\
        --samples-file bench-results/humaneval_samples.jsonl --parallelism 1,2 --bare
"""

import gzip
import json
import os
import sys

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "humaneval", "HumanEval.jsonl.gz")


def main():
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        rows = [json.loads(l) for l in f if l.strip()]
    for r in rows:
        main_code = f"{r['prompt']}    helper_value = aux(0)\n{r['canonical_solution']}"
        sample = {
            "prompt": r["prompt"],
            "fields": {"task_id": r["task_id"], "test": r["test"], "entry_point": r["entry_point"]},
            "completions": ["def aux(x):\n    return x", main_code],
        }
        sys.stdout.write(json.dumps(sample) + "\n")


if __name__ == "__main__":
    main()
