#!/usr/bin/env python3
"""What a model writes for the seed's ten prompts, and two numbers that tell text from the
length-ratio reward's known exploits (docs/grpo_variants.md, "Keeping the text readable").

    scripts/seed_text_stats.py --comlrl target/release/comlrl --model BASE [--adapter DIR \
        --base-dtype bf16] --out samples.jsonl [-n 2] [--seed 1]
    scripts/seed_text_stats.py --stats samples.jsonl [more.jsonl ...]

Samples as the seed's training does (T 0.6, top-p 0.6, top-k 50, 128 new tokens), with
`comlrl generate --json`, one call per prompt. Per completion:
- distinct words: unique words / words (lower-cased, split on white space). A word loop
  ("a is a is a is ...") scores near 0; the base model's own repetitive prose about 0.3-0.5.
- letters: letters / non-space characters. A column of punctuation scores near 0.
Python's standard library only.
"""
import argparse
import json
import re
import subprocess
import sys

# The seed scenario's prompts (scenarios/story_len_ratio.yaml).
PROMPTS = [
    "Describe a city in the clouds:",
    "Invent a new holiday and explain it:",
    "Write a bedtime story for a dragon:",
    "Explain how teleportation might work:",
    "Tell a joke about dinosaurs:",
    "Describe a world without electricity:",
    "Create a superhero with a unique power:",
    "Write a scene where the moon talks:",
    "Invent a new type of fruit:",
    "Design a playground on Mars:",
]


def stats(text):
    words = text.lower().split()
    chars = [c for c in text if not c.isspace()]
    return {
        "chars": len(text),
        "distinct_words": len(set(words)) / len(words) if words else 0.0,
        "letters": sum(c.isalpha() for c in chars) / len(chars) if chars else 0.0,
    }


def sample(args):
    with open(args.out, "w") as out:
        for prompt in PROMPTS:
            cmd = [args.comlrl, "generate", "--model", args.model, "--prompt", prompt,
                   "-n", str(args.n), "--max-new-tokens", "128", "--seed", str(args.seed), "--json"]
            if args.adapter:
                cmd += ["--adapter", args.adapter, "--base-dtype", args.base_dtype]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"{' '.join(cmd)}: {res.stderr.strip()}")
            for s in json.loads(res.stdout)["samples"]:
                row = {"prompt": prompt, "tokens": len(s["ids"]), "text": s["text"]}
                out.write(json.dumps(row) + "\n")


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    st = [stats(r["text"]) for r in rows]
    mean = lambda k: sum(s[k] for s in st) / len(st)
    low = sum(s["distinct_words"] < 0.1 or s["letters"] < 0.5 for s in st)
    print(f"{path}: {len(st)} completions, mean {mean('chars'):.0f} characters, "
          f"distinct words {mean('distinct_words'):.2f} (min {min(s['distinct_words'] for s in st):.2f}), "
          f"letters {mean('letters'):.2f} (min {min(s['letters'] for s in st):.2f}), "
          f"degenerate (distinct words < 0.1 or letters < 0.5): {low}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--comlrl")
    ap.add_argument("--model")
    ap.add_argument("--adapter")
    ap.add_argument("--base-dtype", default="f32", help="the base's dtype under --adapter (f32 | bf16)")
    ap.add_argument("--out")
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stats", nargs="*")
    args = ap.parse_args()
    if args.stats:
        for p in args.stats:
            summary(p)
        return
    if not (args.comlrl and args.model and args.out):
        ap.error("sampling needs --comlrl, --model and --out (or --stats FILES)")
    sample(args)
    summary(args.out)


if __name__ == "__main__":
    main()
