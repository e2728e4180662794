"""The peer of scenarios/humaneval_coop*.yaml: CoMLRL 1.4.3's own MAGRPOTrainer on the HumanEval coding
collaboration (agent 0 writes `aux`, agent 1 the entry point), configured as the environment
repository's train_magrpo.py does for single-turn HumanEval at commit
0b914ca2444875d48967b9b8137d87905b0d24ef (OpenMLRL/LLM_Collab_Code_Generation), on CPU.

From that repository (a checkout, or the reconstruction of bench/peer/README.md, passed as --env-repo):
the two formatters of train_magrpo.py (taken out with `ast` by the fixture script's own loader, as
the code_exec fixtures were recorded) and the reward `make_code_reward_function("humaneval", 2, None)`
of rewards/code_rewards.py with VERBOSE off. The reward processor is composed as train_magrpo.py
composes it: scale 1.0, then shift -4 (so a reward r is the level r + 4, 0 ... 4).

Trainer fields (configs/magrpo_he_config.yaml, single turn): K = 4, 256 new tokens, T 0.6, top-p 0.6,
top-k None, lr 2e-5, discount 1.0, joint_mode aligned, early_termination_threshold -0.2,
rollout_buffer_size 2, train_batch_size 2, advantage_normalization true, eval_batch_size 1; one
epoch; agent_devices left to CoMLRL (the config's cuda:0 does not exist on CPU). No chat template:
the prompts go in as the formatters write them, as the environment repository feeds them.

Evaluation: CoMLRL evaluates at the START of a step whose index is a multiple of eval_interval
(so step 0, before any update, and never after the last step); this script adds one evaluation
after train() returns, so the curve has the untrained and the trained pair. Each CoMLRL evaluation
scores ONE joint sample per held-out problem (comlrl's evaluation scores K per problem).

Usage:
  python bench_coding.py MODEL --env-repo /tmp/envrepo [--train-n 40] [--eval-n 32]
                         [--eval-interval 40] [--max-new-tokens 256] [--seed 0] [--threads 2]
                         [--json OUT.json]
MODEL is an HF model directory or a .gguf file (loaded with transformers' gguf_file=, f32).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

from peer_setup import offline, run_args, seed_all

offline()

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import comlrl
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from comlrl.utils.reward_processor import RewardProcessors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PINNED_COMMIT = "0b914ca2444875d48967b9b8137d87905b0d24ef"
# train_magrpo.py: scale_factor 1.0 then shift -4 (reward_processor section of the config).
SCALE, SHIFT = 1.0, -4.0


def fixture_loader():
    """The formatter loader of scripts/fixtures/record_code_reward_cases.py (one loader for both)."""
    path = os.path.join(ROOT, "scripts", "fixtures", "record_code_reward_cases.py")
    spec = importlib.util.spec_from_file_location("record_code_reward_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load_formatters


def load_rows(path, n):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    if len(rows) < n:
        sys.exit(f"{path} has {len(rows)} rows, fewer than the {n} asked for")
    return rows


def load_model(model, dtype):
    """An HF directory, or a .gguf file (dequantized by transformers)."""
    if model.endswith(".gguf"):
        d, f = os.path.dirname(os.path.abspath(model)), os.path.basename(model)
        tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
        return tok, lambda: AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(model)
    return tok, lambda: AutoModelForCausalLM.from_pretrained(model, dtype=dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--env-repo", required=True, help=f"OpenMLRL/LLM_Collab_Code_Generation at {PINNED_COMMIT}")
    ap.add_argument("--train", default=os.path.join(ROOT, "data", "humaneval", "train.jsonl"))
    ap.add_argument("--eval", default=os.path.join(ROOT, "data", "humaneval", "eval.jsonl"))
    ap.add_argument("--train-n", type=int, default=40, help="first N rows of --train (the config's test[33:163])")
    ap.add_argument("--eval-n", type=int, default=32, help="first N rows of --eval (test[:32])")
    ap.add_argument("--eval-interval", type=int, default=None,
                    help="CoMLRL's eval_interval (default: --train-n, i.e. step 0 only, plus the final one)")
    run_args(ap, epochs=1, max_new_tokens=256, num_generations=4)
    a = ap.parse_args()

    seed_all(a.seed, a.threads)

    aux_fmt, main_fmt = fixture_loader()(a.env_repo)
    sys.path.insert(0, os.path.abspath(a.env_repo))
    from rewards import code_rewards

    code_rewards.VERBOSE = False
    reward_func = code_rewards.make_code_reward_function("humaneval", 2, None)
    scale = RewardProcessors.scale(factor=SCALE)
    shift = RewardProcessors.shift(value=SHIFT)
    reward_processor = lambda x: shift(scale(x))  # noqa: E731  (train_magrpo.py's order)

    train_rows = load_rows(a.train, a.train_n)
    eval_rows = load_rows(a.eval, a.eval_n)
    cols = ("task_id", "prompt", "entry_point", "test")
    to_ds = lambda rows: Dataset.from_dict({k: [r[k] for r in rows] for k in cols})  # noqa: E731

    t_load0 = time.perf_counter()
    tokenizer, make = load_model(a.model, torch.float32)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    agents = [make() for _ in range(2)]
    n_params = sum(p.numel() for p in agents[0].parameters())
    eval_interval = a.train_n if a.eval_interval is None else a.eval_interval
    config = MAGRPOConfig(
        num_turns=1,
        num_train_epochs=a.epochs,
        agent_learning_rate=2e-5,
        logging_steps=50,
        num_generations=a.num_generations,
        max_new_tokens=a.max_new_tokens,
        temperature=0.6,
        top_p=0.6,
        top_k=None,
        num_agents=2,
        parallel_training="none",
        discount=1.0,
        joint_mode="aligned",
        early_termination_threshold=-0.2,
        rollout_buffer_size=2,
        train_batch_size=2,
        advantage_normalization=True,
        eval_interval=eval_interval,
        eval_num_samples=a.eval_n,
        eval_batch_size=1,
    )
    trainer = MAGRPOTrainer(
        agents=agents,
        num_agents=2,
        tokenizer=tokenizer,
        train_dataset=to_ds(train_rows),
        eval_dataset=to_ds(eval_rows),
        reward_func=reward_func,
        reward_processor=reward_processor,
        formatters=[aux_fmt, main_fmt],
        wandb_config=None,
        args=config,
    )
    trainer.verbose = False
    t_load = time.perf_counter() - t_load0

    # ---- instrumentation (instance attributes, no library edits) ------------------------------
    rec = {"step_s": [], "step_cpu_s": [], "loadavg1": [], "train_rewards": [], "evals": []}
    state = {"step": 0, "in_eval": False}
    orig_step = trainer._train_step_returns
    orig_rew = trainer._compute_rewards
    orig_eval = trainer.evaluate

    def timed_step(batch_item, **kw):
        t0, c0 = time.perf_counter(), time.process_time()
        r = orig_step(batch_item, **kw)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        rec["step_s"].append(dt)
        rec["step_cpu_s"].append(dc)
        rec["loadavg1"].append(float(open("/proc/loadavg").read().split()[0]))
        i = state["step"]
        state["step"] += 1
        if not a.quiet:
            rs = rec["train_rewards"][-1]["rewards"] if rec["train_rewards"] else [float("nan")]
            print(f"[step {i:3d}] wall {dt:7.2f}s cpu {dc:7.2f}s level {statistics.mean(rs) - SHIFT:5.3f}", flush=True)
        return r

    def rec_rew(prompts, completions_list, batch_items=None):
        r = orig_rew(prompts, completions_list, batch_items=batch_items)
        if not state["in_eval"]:
            rec["train_rewards"].append({"step": state["step"], "rewards": list(r)})
        return r

    def rec_eval(num_eval_samples=None):
        state["in_eval"] = True
        t0 = time.perf_counter()
        try:
            m = orig_eval(num_eval_samples=num_eval_samples)
        finally:
            state["in_eval"] = False
        mean = m.get("eval/turn_1/reward_mean")
        row = {"step": state["step"], "wall_s": time.perf_counter() - t0, "reward_mean": mean,
               "level_mean": None if mean is None else mean - SHIFT}
        rec["evals"].append(row)
        if not a.quiet:
            print(f"[eval at step {row['step']}] level {row['level_mean']} ({row['wall_s']:.1f}s)", flush=True)
        return m

    trainer._train_step_returns = timed_step
    trainer._compute_rewards = rec_rew
    trainer.evaluate = rec_eval

    print(f"comlrl {comlrl.__version__} torch {torch.__version__} threads {torch.get_num_threads()} "
          f"model {a.model} ({n_params:,} params) train {a.train_n} eval {a.eval_n} "
          f"max_new_tokens {a.max_new_tokens} K {a.num_generations} seed {a.seed}", flush=True)
    t0 = time.perf_counter()
    trainer.train()
    train_wall = time.perf_counter() - t0
    # CoMLRL has no evaluation after the last step: the trained pair's row.
    trainer.evaluate(num_eval_samples=a.eval_n)

    step_s = rec["step_s"]
    levels = [statistics.mean(x["rewards"]) - SHIFT for x in rec["train_rewards"]]
    summary = {
        "model": a.model, "n_params": n_params, "env_repo_commit": PINNED_COMMIT,
        "train_n": a.train_n, "eval_n": a.eval_n, "eval_interval": eval_interval, "epochs": a.epochs,
        "max_new_tokens": a.max_new_tokens, "num_generations": a.num_generations, "seed": a.seed,
        "threads": torch.get_num_threads(),
        "versions": {"comlrl": comlrl.__version__, "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "python": sys.version.split()[0]},
        "load_s": t_load, "train_wall_s": train_wall, "train_steps": len(step_s),
        "step_s_mean": statistics.mean(step_s) if step_s else None,
        "step_s_median": statistics.median(step_s) if step_s else None,
        "step_s": step_s, "step_cpu_s": rec["step_cpu_s"], "loadavg1_per_step": rec["loadavg1"],
        "train_level_per_step": levels,
        "train_rewards": rec["train_rewards"],
        "evals": rec["evals"],
        "final_eval_level_mean": rec["evals"][-1]["level_mean"] if rec["evals"] else None,
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")},
    }
    print(json.dumps({k: summary[k] for k in ("train_steps", "step_s_mean", "train_wall_s", "load_s")}
                     | {"evals": [(e["step"], e["level_mean"]) for e in rec["evals"]]}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
        print("wrote", a.json)


if __name__ == "__main__":
    main()
