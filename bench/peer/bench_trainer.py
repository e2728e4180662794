"""CPU benchmark of CoMLRL 1.4.3's other trainer families on the story length-ratio task, for
side-by-side runs against comlrl (`scripts/bench_vs_comlrl.sh` with TRAINER=...).

The task is bench_story.py's (the CoMLRL Quick Demo: 10 prompts, length-ratio reward scaled by
100); the trainer is one of CoMLRL's own classes, built from its config class with the given
overrides, on a local model (wandb off):

  magrpo, mareinforce, marloo, maremax   comlrl.trainers.reinforce (MAGRPOConfig and friends)
  iac, maac                              comlrl.trainers.actor_critic (IACConfig, MAACConfig)
  madpo, marlhf                          comlrl.trainers.preference (MADPOConfig, MARLHFConfig)

MARLHF's reward model (and, with rl_algorithm iac or maac, its critics) is the same local model unless
`--set reward_model_name=...` says otherwise, on the CPU (`reward_model_device` defaults to cuda:0).

Usage:
  python bench_trainer.py TRAINER MODEL_DIR [--set field=value ...] [--threads 2] [--seed 0]
                          [--prompts N] [--json OUT.json]

`--set` values are parsed as JSON where they parse (numbers, true/false, null), else kept as
strings; they override the config class's defaults (`num_turns` is 1 unless set: the task has one
turn) (write the fields comlrl's scenario sets, so
both sides train the same thing). Timing wraps `trainer.train()` as a whole (no monkey-patching
of trainer internals, which differ across the families); every reward call is recorded, so the
summary has the reward per training-progress decile as well as the totals. Peak memory is
measured outside, by /usr/bin/time -v.
"""
import argparse
import json
import os
import statistics
import sys
import time

from peer_setup import offline, seed_all

offline()

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FAMILIES = {
    "magrpo": ("comlrl.trainers.reinforce", "MAGRPOConfig", "MAGRPOTrainer"),
    "mareinforce": ("comlrl.trainers.reinforce", "MAREINFORCEConfig", "MAREINFORCETrainer"),
    "marloo": ("comlrl.trainers.reinforce", "MARLOOConfig", "MARLOOTrainer"),
    "maremax": ("comlrl.trainers.reinforce", "MAReMaxConfig", "MAReMaxTrainer"),
    "iac": ("comlrl.trainers.actor_critic", "IACConfig", "IACTrainer"),
    "maac": ("comlrl.trainers.actor_critic", "MAACConfig", "MAACTrainer"),
    "madpo": ("comlrl.trainers.preference", "MADPOConfig", "MADPOTrainer"),
    "marlhf": ("comlrl.trainers.preference", "MARLHFConfig", "MARLHFTrainer"),
}


def parse_value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trainer", choices=sorted(FAMILIES))
    ap.add_argument("model_dir")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=10, help="the first N of the 10 prompts")
    ap.add_argument("--json", default=None, help="write a JSON summary here")
    a = ap.parse_args()

    import importlib
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import comlrl
    from comlrl.utils.reward_processor import RewardProcessors
    from bench_story import PROMPTS, proper_length_ratio_reward

    seed_all(a.seed, a.threads)

    module, config_name, trainer_name = FAMILIES[a.trainer]
    mod = importlib.import_module(module)
    config_cls, trainer_cls = getattr(mod, config_name), getattr(mod, trainer_name)
    overrides = {}
    for kv in a.set:
        field, sep, value = kv.partition("=")
        if not sep:
            sys.exit(f"--set {kv!r}: expected FIELD=VALUE")
        overrides[field] = parse_value(value)
    known = getattr(config_cls, "__dataclass_fields__", {})
    # The story task is single-turn (several 1.4.3 configs default to 2 turns, which need a
    # transition): one turn unless asked otherwise.
    if "num_turns" in known:
        overrides.setdefault("num_turns", 1)
    if a.trainer == "marlhf":
        # Agents passed as objects: CoMLRL needs the reward model's (and critics') source named.
        overrides.setdefault("reward_model_name", a.model_dir)
        overrides.setdefault("reward_model_device", "cpu")
        if overrides.get("rl_algorithm") in ("iac", "maac"):
            overrides.setdefault("critic_model_name", a.model_dir)
    unknown = [f for f in overrides if known and f not in known]
    if unknown:
        sys.exit(f"{config_name} has no field(s) {unknown}")
    config = config_cls(**overrides)

    calls = []  # (seconds since the start of training, [rewards x 100])

    def recorded_reward(*args, **kwargs):
        r = proper_length_ratio_reward(*args, target_min=2, target_max=3)
        calls.append((time.perf_counter() - state["t0"], [100.0 * x for x in r]))
        return r

    state = {"t0": time.perf_counter()}
    t_load0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(a.model_dir)
    agents = [AutoModelForCausalLM.from_pretrained(a.model_dir) for _ in range(2)]
    n_params = sum(p.numel() for p in agents[0].parameters())
    kwargs = dict(
        reward_func=recorded_reward,
        reward_processor=RewardProcessors.scale(factor=100.0),
        args=config,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS[: a.prompts]}),
        tokenizer=tokenizer,
        wandb_config=None,
    )
    if a.trainer in ("iac", "maac"):
        kwargs["agents"] = agents
        separate = getattr(config, "use_separate_critic", True)
        if a.trainer == "maac":
            kwargs["critic_model"] = a.model_dir
        elif separate:
            kwargs["critics"] = [AutoModelForCausalLM.from_pretrained(a.model_dir) for _ in range(2)]
    else:
        kwargs["agents"] = agents
    trainer = trainer_cls(**kwargs)
    t_load = time.perf_counter() - t_load0

    print(f"comlrl {comlrl.__version__} torch {torch.__version__} threads {torch.get_num_threads()} "
          f"{trainer_name} model {a.model_dir} ({n_params:,} params) overrides {overrides}", flush=True)
    state["t0"] = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - state["t0"]

    rewards = [x for _, rs in calls for x in rs]
    deciles = []
    for d in range(10):
        chunk = [x for t, rs in calls if d * total / 10 <= t < (d + 1) * total / 10 or (d == 9 and t >= total)
                 for x in rs]
        deciles.append(statistics.mean(chunk) if chunk else None)
    epochs = getattr(config, "num_train_epochs", 1)
    steps = epochs * a.prompts
    summary = {
        "trainer": a.trainer,
        "model_dir": a.model_dir,
        "n_params": n_params,
        "overrides": overrides,
        "config": {k: getattr(config, k) for k in known} if known else {},
        "threads": torch.get_num_threads(),
        "versions": {"comlrl": comlrl.__version__, "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "python": sys.version.split()[0]},
        "load_s": t_load,
        "train_wall_s": total,
        "n_prompts": a.prompts,
        "epochs": epochs,
        "train_steps": steps,
        "step_s_mean": total / max(steps, 1),
        "reward_calls": len(calls),
        "reward_scaled_mean": statistics.mean(rewards) if rewards else None,
        "reward_scaled_by_decile": deciles,
    }
    print(f"train wall {total:.2f} s (load {t_load:.2f} s); {steps} steps = {summary['step_s_mean']:.3f} s/step; "
          f"{len(calls)} reward calls; mean reward x100 {summary['reward_scaled_mean']}")
    print("reward x100 by tenth of the run:", ["-" if d is None else round(d, 2) for d in deciles])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1, default=str)
        print("wrote", a.json)


if __name__ == "__main__":
    main()
