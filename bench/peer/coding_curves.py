"""Issue 45's side by side on the HumanEval coding collaboration: CoMLRL 1.4.3 (bench_coding.py, the
environment repository's reward and formatters) against comlrl (scenarios/humaneval_coop_tiny.yaml,
the code_exec plugin), both with two agents from the same model, single-turn MAGRPO, K = 4.

For each seed it runs the peer and then comlrl with the same model, the first --train-n training
prompts, the first --eval-n held-out problems and the same new tokens, and evaluates both at the
same two points: before the first step and after the last. The peer: CoMLRL's step-0 evaluation
(eval_interval = train-n, so no other) plus bench_coding.py's evaluation after train(). comlrl:
`trainer.eval_at_start` (step 0) plus `trainer.eval_interval` = train-n (after the last step).
Sampling as the environment repository's config: T 0.6, top-p 0.6, top-k off (comlrl's top_k
default is CoMLRL's 50, so it is set to null here).

Compared: the final evaluation's mean level reward (0 ... 4; the peer's eval/turn_1/reward_mean + 4,
comlrl's eval/reward/level). The sides agree when the difference of their means over the seeds is
at most the pooled standard deviation sqrt((s_peer^2 + s_ours^2) / 2) (learning_curves.py's rule).
Also reported: mean seconds per training step of each side and their ratio (peer / ours). Note
that CoMLRL evaluates one joint sample per problem, comlrl K per problem: same expectation, the
peer's evaluation is the noisier one.

Usage (from the repository root, after `cargo build --release --workspace`):
  python bench/peer/coding_curves.py MODEL --env-repo /tmp/envrepo --peer-python /work/venv/bin/python \
      --seeds 0 1 2 --train-n 40 --eval-n 32 --max-new-tokens 256 --out /tmp/f45-peer-full/summary.json
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHIFT = -4.0  # the scenario's and train_magrpo.py's reward shift


def head(src, n, dst):
    with open(src, encoding="utf-8") as f:
        rows = [l for l in f if l.strip()][:n]
    if len(rows) < n:
        sys.exit(f"{src} has {len(rows)} rows, fewer than the {n} asked for")
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(rows)


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def run_logged(cmd, log, env=None):
    t0 = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT, env=env)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="HF directory or .gguf file, for both agents on both sides")
    ap.add_argument("--env-repo", required=True)
    ap.add_argument("--peer-python", required=True)
    ap.add_argument("--comlrl", default=os.path.join(ROOT, "target", "release", "comlrl"))
    ap.add_argument("--scenario", default=os.path.join(ROOT, "scenarios", "humaneval_coop_tiny.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--train-n", type=int, default=40)
    ap.add_argument("--eval-n", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sides", choices=["both", "peer", "ours"], default="both")
    ap.add_argument("--work", default="/tmp/f45-peer-curves")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep-models", action="store_true", help="keep comlrl's models/ and checkpoints/")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.abspath(a.model)
    train = os.path.join(a.work, f"train{a.train_n}.jsonl")
    evalp = os.path.join(a.work, f"eval{a.eval_n}.jsonl")
    head(os.path.join(ROOT, "data", "humaneval", "train.jsonl"), a.train_n, train)
    head(os.path.join(ROOT, "data", "humaneval", "eval.jsonl"), a.eval_n, evalp)
    threads = str(a.threads)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=threads, RAYON_NUM_THREADS=threads)
    rows = []
    for seed in a.seeds:
        row = {"seed": seed}
        if a.sides in ("both", "peer"):
            pj = os.path.join(a.work, f"peer-{seed}.json")
            cmd = [a.peer_python, os.path.join(HERE, "bench_coding.py"), model, "--env-repo", a.env_repo,
                   "--train", train, "--eval", evalp, "--train-n", str(a.train_n), "--eval-n", str(a.eval_n),
                   "--max-new-tokens", str(a.max_new_tokens), "--threads", threads, "--seed", str(seed),
                   "--quiet", "--json", pj]
            l0 = loadavg()
            wall = run_logged(cmd, os.path.join(a.work, f"peer-{seed}.log"), env)
            peer = json.load(open(pj))
            row.update({
                "peer_wall_s": wall, "peer_load_start": l0, "peer_load_end": loadavg(),
                "peer_step_s": peer["step_s_mean"], "peer_steps": peer["train_steps"],
                "peer_evals": [(e["step"], e["level_mean"]) for e in peer["evals"]],
                "peer_first": peer["evals"][0]["level_mean"], "peer_last": peer["final_eval_level_mean"],
            })
        if a.sides in ("both", "ours"):
            out = os.path.join(a.work, f"ours-{seed}")
            cmd = [a.comlrl, "run", a.scenario, "--quiet", "--overwrite",
                   "--set", f"output_dir={out}", "--set", f"seed={seed}",
                   "--set", f"dataset.path={train}", "--set", f"dataset.eval.path={evalp}",
                   "--set", f"trainer.eval_num_samples={a.eval_n}", "--set", f"trainer.eval_interval={a.train_n}",
                   "--set", "trainer.eval_at_start=true", "--set", "logging.steps=1"]
            for i in (0, 1):
                cmd += ["--set", f"agents[{i}].model={model}",
                        "--set", f"agents[{i}].max_new_tokens={a.max_new_tokens}",
                        "--set", f"agents[{i}].temperature=0.6", "--set", f"agents[{i}].top_p=0.6",
                        "--set", f"agents[{i}].top_k=null"]
            l0 = loadavg()
            wall = run_logged(cmd, os.path.join(a.work, f"ours-{seed}.log"), env)
            with open(os.path.join(out, "metrics.jsonl")) as f:
                metrics = [json.loads(l) for l in f if l.strip()]
            if not a.keep_models:
                # comlrl always writes the final models and an end-of-run checkpoint (~3 GB a seed here).
                for d in ("models", "checkpoints"):
                    shutil.rmtree(os.path.join(out, d), ignore_errors=True)
            evals = [(m["step"], m["eval/reward/level"]) for m in metrics
                     if m.get("eval/reward/level") is not None]
            steps = [m["step_seconds"] for m in metrics
                     if m.get("reward_mean") is not None and m.get("step_seconds") is not None]
            row.update({
                "ours_wall_s": wall, "ours_load_start": l0, "ours_load_end": loadavg(),
                "ours_step_s": statistics.fmean(steps) if steps else None, "ours_steps": len(steps),
                "ours_evals": evals, "ours_first": evals[0][1] if evals else None,
                "ours_last": evals[-1][1] if evals else None,
            })
        if row.get("peer_step_s") and row.get("ours_step_s"):
            row["speedup"] = row["peer_step_s"] / row["ours_step_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)

    summary = {"model": a.model, "seeds": a.seeds, "train_n": a.train_n, "eval_n": a.eval_n,
               "max_new_tokens": a.max_new_tokens, "threads": a.threads, "rows": rows}
    if a.sides == "both":
        pl = [r["peer_last"] for r in rows]
        ol = [r["ours_last"] for r in rows]
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else float("nan")  # noqa: E731
        pooled = math.sqrt((sd(pl) ** 2 + sd(ol) ** 2) / 2)
        diff = statistics.fmean(ol) - statistics.fmean(pl)
        speed = [r["speedup"] for r in rows if "speedup" in r]
        summary.update({
            "peer_last_mean": statistics.fmean(pl), "peer_last_sd": sd(pl),
            "ours_last_mean": statistics.fmean(ol), "ours_last_sd": sd(ol),
            "pooled_sd": pooled, "difference": diff,
            # With one seed the pooled SD is undefined (nan): no verdict, not a pass.
            "agree": bool(abs(diff) <= pooled) if not math.isnan(pooled) else None,
            "speedup_mean": statistics.fmean(speed) if speed else None,
            "speedup_at_least_5": (min(speed) >= 5.0) if speed else None,
        })
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
