"""Writes data/humaneval/train.jsonl and eval.jsonl, the splits of the MAGRPO HumanEval configuration
(OpenMLRL/LLM_Collab_Code_Generation, configs/magrpo_he_config.yaml: train `test[33:163]`, eval
`test[:32]`), from the vendored data/humaneval/HumanEval.jsonl.gz, every row as it is plus `params`:
the parameters of the prompt's first `def name(...)`, as the environment repository's formatters
extract them (`extract_function_params_from_prompt`), joined by ", ". The agents' templates in
scenarios/humaneval_coop*.yaml use it; plugins/code_exec's `prompts` test checks these files against
its own derivation and the rendered prompts against the recorded Python formatters.

Run from the repository root: python3 scripts/humaneval_splits.py (no packages needed).
"""

import gzip
import json
import os
import re

DIR = os.path.join("data", "humaneval")
TRAIN = (33, 163)
EVAL = (0, 32)


def params(prompt):
    m = re.search(r"def\s+\w+\s*\(([^)]+)\)", prompt)
    return [p.strip() for p in m.group(1).split(",") if p.strip()] if m else []


def main():
    rows = [json.loads(l) for l in gzip.open(os.path.join(DIR, "HumanEval.jsonl.gz"), "rt", encoding="utf-8") if l.strip()]
    assert len(rows) == 164
    for r in rows:
        p = params(r["prompt"])
        assert p and r["entry_point"], r["task_id"]
        r["params"] = ", ".join(p)
    for name, (a, b) in (("train", TRAIN), ("eval", EVAL)):
        with open(os.path.join(DIR, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows[a:b]:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{name}: {b - a} rows")


if __name__ == "__main__":
    main()
