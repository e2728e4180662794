"""Learning curves of a CoMLRL 1.4.3 trainer and comlrl's port of it over several seeds, on the
story length-ratio task: does the port learn like the original? (issue 44's "learning curves
over 3 seeds agree within one pooled standard deviation at the last window").

For each seed it runs the peer (`bench_trainer.py TRAINER MODEL --seed S`, CoMLRL's own class)
and comlrl (`comlrl run SCENARIO --set seed=S`, one metrics row per step) with the same model,
prompts, epochs, new tokens and the trainer fields given, then compares the last window: the
mean task reward of the last tenth of the training steps (the peer's last decile of reward
calls, comlrl's last tenth of steps). The two sides agree when the difference of their means
over the seeds is at most the pooled standard deviation sqrt((s_peer² + s_ours²) / 2).

Usage (from the repository root, after `cargo build --release`):
  python bench/peer/learning_curves.py iac scenarios/story_len_ratio_iac.yaml models/tiny-story \
      --peer-python /path/to/venv/bin/python --seeds 0 1 2 --epochs 10 --max-new-tokens 64 \
      --peer-set agent_learning_rate=1e-4 critic_learning_rate=1e-4 rollout_buffer_size=4 \
      --out bench-results/curves-iac.json
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def prompts():
    """The seed scenario's ten prompts, as bench_story.py and bench_trainer.py use them."""
    out = []
    with open(os.path.join(ROOT, "scenarios", "story_len_ratio.yaml")) as f:
        for line in f:
            if line.startswith('    - "'):
                out.append(line.strip()[2:])
    return out


def last_tenth(values):
    n = max(1, len(values) // 10)
    return statistics.fmean(values[-n:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainer")
    ap.add_argument("scenario")
    ap.add_argument("model")
    ap.add_argument("--peer-python", required=True)
    ap.add_argument("--comlrl", default=os.path.join(ROOT, "target", "release", "comlrl"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--peer-set", nargs="*", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--ours-set", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--work", default=os.path.join(ROOT, "bench-results", "curves"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.abspath(a.model)
    plist = "[" + ", ".join(prompts()) + "]"
    rows = []
    for seed in a.seeds:
        pj = os.path.join(a.work, f"peer-{a.trainer}-{seed}.json")
        cmd = [a.peer_python, os.path.join(HERE, "bench_trainer.py"), a.trainer, model,
               "--set", f"num_train_epochs={a.epochs}", "--set", f"max_new_tokens={a.max_new_tokens}",
               "--set", "num_turns=1", "--threads", "2", "--seed", str(seed), "--json", pj]
        for kv in a.peer_set:
            cmd += ["--set", kv]
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        with open(os.path.join(a.work, f"peer-{a.trainer}-{seed}.stderr"), "w") as err:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=err, env=env)
        peer = json.load(open(pj))
        out = os.path.join(a.work, f"ours-{a.trainer}-{seed}")
        cmd = [a.comlrl, "run", a.scenario, "--quiet", "--overwrite",
               "--set", f"output_dir={out}", "--set", f"seed={seed}",
               "--set", f"agents.model={model}", "--set", f"agents.max_new_tokens={a.max_new_tokens}",
               "--set", f"trainer.num_train_epochs={a.epochs}", "--set", "logging.steps=1",
               "--set", f"dataset.prompts={plist}"]
        for kv in a.ours_set:
            cmd += ["--set", kv]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "metrics.jsonl")) as f:
            ours = [json.loads(l)["reward_mean"] for l in f if '"reward_mean"' in l]
        rows.append({
            "seed": seed,
            "peer_last": peer["reward_scaled_by_decile"][-1],
            "peer_first": peer["reward_scaled_by_decile"][0],
            "ours_last": last_tenth(ours),
            "ours_first": statistics.fmean(ours[: max(1, len(ours) // 10)]),
            "ours_steps": len(ours),
            "peer_steps": peer["train_steps"],
        })
        print(json.dumps(rows[-1]))
    pl = [r["peer_last"] for r in rows]
    ol = [r["ours_last"] for r in rows]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else float("nan")
    pooled = math.sqrt((sd(pl) ** 2 + sd(ol) ** 2) / 2)
    diff = statistics.fmean(ol) - statistics.fmean(pl)
    summary = {
        "trainer": a.trainer, "model": a.model, "epochs": a.epochs, "max_new_tokens": a.max_new_tokens,
        "seeds": a.seeds, "peer_set": a.peer_set, "ours_set": a.ours_set, "rows": rows,
        "peer_last_mean": statistics.fmean(pl), "peer_last_sd": sd(pl),
        "ours_last_mean": statistics.fmean(ol), "ours_last_sd": sd(ol),
        "pooled_sd": pooled, "difference": diff, "agree": abs(diff) <= pooled,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
