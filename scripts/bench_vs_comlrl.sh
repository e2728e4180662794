#!/usr/bin/env bash
# Side-by-side benchmark against the Python CoMLRL (MAGRPOTrainer, or another of its trainers
# with TRAINER) on the seed scenario:
# runs the peer harness and `comlrl run` alternately (A B A B ...) on the same HF-layout model,
# each under /usr/bin/time -v, and prints the ratios of the medians (s/step, wall, peak RSS)
# plus each side's reward per epoch. Writes everything under $RESULTS.
#
# Usage: PEER=/path/to/venv scripts/bench_vs_comlrl.sh MODEL_DIR [ROUNDS] [EPOCHS] [MAX_NEW_TOKENS]
#   PEER         a venv with torch, transformers, datasets and comlrl (see bench/peer/README.md)
#   PEER_HARNESS the peer harness directory (default: bench/peer, the in-repo copy)
#   RESULTS      output directory (default: bench-results/vs-comlrl/<model name>)
#   COMLRL       our binary (default: target/release/comlrl)
#   PROMPTS      use only the first N of the 10 prompts on both sides (default: all; for 0.5B-sized
#                models, where CoMLRL takes ~5 min per prompt)
#   SCENARIO     our scenario (default: scenarios/story_len_ratio.yaml, the seed scenario, whose
#                trainer settings are the harness's MAGRPOConfig: learning rate 5e-5, 8 generations,
#                a rollout buffer of 2; its execution settings, parallel_updates: false and passes
#                of 8, are the 0.5B's); the model, epochs, max_new_tokens and prompts are set here
#   OURS_SET     extra `--set key=value` arguments for our side, space-separated
#                (e.g. "agents.sampling_dtype=bf16"; small models: "trainer.parallel_updates=true")
#   TRAINER      another CoMLRL trainer for the peer side (iac, maac, madpo, mareinforce, marloo,
#                maremax: bench/peer/bench_trainer.py); set SCENARIO to our matching scenario
#                (e.g. scenarios/story_len_ratio_iac.yaml) and PEER_SET to the CoMLRL config
#                fields that scenario sets (space-separated FIELD=VALUE, e.g.
#                "num_turns=1 rollout_buffer_size=2"); epochs and max_new_tokens are set on both
# Example (IAC): TRAINER=iac SCENARIO=scenarios/story_len_ratio_iac.yaml PEER_SET="num_turns=1" \
#   PEER=$HOME/peer/venv scripts/bench_vs_comlrl.sh tests/fixtures/tiny-qwen2 2 2 32
# Example: PEER=$HOME/peer/venv scripts/bench_vs_comlrl.sh tests/fixtures/tiny-qwen2 2
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$(cd "${1:?usage: $0 MODEL_DIR [ROUNDS] [EPOCHS] [MAX_NEW_TOKENS]}" && pwd)
ROUNDS=${2:-2}
EPOCHS=${3:-3}
MNT=${4:-128}
: "${PEER:?set PEER to a venv with torch, transformers, datasets and comlrl}"
HARNESS=${PEER_HARNESS:-$ROOT/bench/peer}
NAME=$(basename "$MODEL")
export RESULTS=${RESULTS:-$ROOT/bench-results/vs-comlrl/$NAME}
COMLRL=${COMLRL:-$ROOT/target/release/comlrl}
SCENARIO=${SCENARIO:-$ROOT/scenarios/story_len_ratio.yaml}
[ -f "$SCENARIO" ] || { echo "no scenario at $SCENARIO (SCENARIO)" >&2; exit 1; }
SCENARIO=$(cd "$(dirname "$SCENARIO")" && pwd)/$(basename "$SCENARIO")
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)  # absolute: our output_dir would resolve against the scenario
[ -x "$COMLRL" ] || { echo "build first: cargo build --release" >&2; exit 1; }
[ -f "$HARNESS/run_bench.sh" ] || { echo "no peer harness at $HARNESS" >&2; exit 1; }

# Both sides get the same prompts: the harness's ten (the seed scenario's), or their first
# $PROMPTS, in order; set on ours whatever SCENARIO's own prompts are.
LIST=$(grep -E '^    - "' "$ROOT/scenarios/story_len_ratio.yaml" | head -n "${PROMPTS:-10}" \
  | sed -E 's/^    - //' | paste -sd, -)
PROMPT_SET=(--set "dataset.prompts=[$LIST]")
if [ -n "${PROMPTS:-}" ] && [ -z "${TRAINER:-}" ]; then
  # Patch a copy of the harness (never the harness itself) that keeps the first N prompts.
  rm -rf "$RESULTS/harness" && cp -r "$HARNESS" "$RESULTS/harness"
  python3 - "$RESULTS/harness/bench_story.py" "$PROMPTS" <<'PY'
import sys
p, n = sys.argv[1], int(sys.argv[2])
s = open(p).read()
marker = "\n\ndef proper_length_ratio_reward"
assert marker in s, "bench_story.py changed: cannot limit its prompts"
open(p, "w").write(s.replace(marker, f"\nPROMPTS = PROMPTS[:{n}]\n" + marker, 1))
PY
  HARNESS=$RESULTS/harness
fi
EXTRA=()
for kv in ${OURS_SET:-}; do EXTRA+=(--set "$kv"); done

# The machine next to every result: CPU model, bf16/AMX flags and the f32 matmul rate.
"$COMLRL" bench matmul --size 1024 --out "$RESULTS/matmul.json" 2>&1 >/dev/null | grep '^machine:' \
  | tee "$RESULTS/machine.txt" || echo "machine: (comlrl bench matmul failed)" | tee "$RESULTS/machine.txt"

for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS: CoMLRL (peer)"
  bash "$HARNESS/run_bench.sh" "peer-$r" "$MODEL" "$EPOCHS" "$MNT" > "$RESULTS/peer-$r.out" 2>&1 \
    || { echo "peer run failed: see $RESULTS/peer-$r.*" >&2; exit 1; }
  echo "== round $r/$ROUNDS: comlrl"
  rm -rf "$RESULTS/ours-$r"
  /usr/bin/time -v -o "$RESULTS/ours-$r.time" "$COMLRL" run "$SCENARIO" \
    --quiet --set "agents.model=$MODEL" --set "output_dir=$RESULTS/ours-$r" \
    --set "trainer.num_train_epochs=$EPOCHS" --set "agents.max_new_tokens=$MNT" \
    --set logging.steps=1 "${PROMPT_SET[@]}" "${EXTRA[@]}" > "$RESULTS/ours-$r.log" 2>&1 \
    || { echo "comlrl run failed: see $RESULTS/ours-$r.log" >&2; exit 1; }
done

python3 - "$RESULTS" "$ROUNDS" <<'PY'
import json, re, statistics, sys
res, rounds = sys.argv[1], int(sys.argv[2])

def gnu_time(path):
    t = open(path).read()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", t).group(1)
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) * 1024
    return secs, rss

rows = {"peer": [], "ours": []}
for r in range(1, rounds + 1):
    wall, rss = gnu_time(f"{res}/peer-{r}.time")
    pj = json.load(open(f"{res}/peer-{r}.json"))
    # bench_story.py reports the reward per epoch; bench_trainer.py (TRAINER) per tenth of the run.
    by_epoch = pj.get("reward_scaled_mean_per_epoch")
    rewards = (by_epoch.values() if by_epoch else
               [v for v in pj["reward_scaled_by_decile"] if v is not None])
    rows["peer"].append({"wall_s": wall, "peak_rss_bytes": rss, "step_s_mean": pj["step_s_mean"],
                         "reward_by_epoch" if by_epoch else "reward_by_tenth": [round(v, 2) for v in rewards]})
    wall, rss = gnu_time(f"{res}/ours-{r}.time")
    m = [json.loads(l) for l in open(f"{res}/ours-{r}/metrics.jsonl")]
    steps = [x["step_seconds"] for x in m]
    epochs = {}
    for x in m:
        # Epochs that sample nothing (MADPO's training passes over its preference set) log no
        # reward (null): leave them out.
        if x.get("reward_mean") is not None:
            epochs.setdefault(int(x["epoch"]), []).append(x["reward_mean"])
    rows["ours"].append({"wall_s": wall, "peak_rss_bytes": rss, "step_s_mean": sum(steps) / len(steps),
                         "reward_by_epoch": [round(sum(v) / len(v), 2) for _, v in sorted(epochs.items())]})

med = lambda side, k: statistics.median(x[k] for x in rows[side])
summary = {k: {"peer": med("peer", k), "ours": med("ours", k), "ratio": med("peer", k) / med("ours", k)}
           for k in ("step_s_mean", "wall_s", "peak_rss_bytes")}
machine = open(f"{res}/machine.txt").read().strip()
out = {"machine": machine, "rounds": rows, "median": summary}
json.dump(out, open(f"{res}/summary.json", "w"), indent=1)
for side in ("peer", "ours"):
    for i, x in enumerate(rows[side], 1):
        curve = ("reward by epoch", x["reward_by_epoch"]) if "reward_by_epoch" in x else \
            ("reward by tenth of the run", x["reward_by_tenth"])
        print(f"{side} round {i}: {x['step_s_mean']:.3f} s/step, wall {x['wall_s']:.1f} s, "
              f"peak RSS {x['peak_rss_bytes']/1e9:.2f} GB, {curve[0]} {curve[1]}")
s = summary
print(f"median s/step: CoMLRL {s['step_s_mean']['peer']:.3f} vs comlrl {s['step_s_mean']['ours']:.3f} "
      f"-> {s['step_s_mean']['ratio']:.1f}x faster")
print(f"median wall:   CoMLRL {s['wall_s']['peer']:.1f} s vs comlrl {s['wall_s']['ours']:.1f} s "
      f"-> {s['wall_s']['ratio']:.1f}x")
print(f"peak RSS:      CoMLRL {s['peak_rss_bytes']['peer']/1e9:.2f} GB vs comlrl "
      f"{s['peak_rss_bytes']['ours']/1e9:.2f} GB -> {1/s['peak_rss_bytes']['ratio']:.2f}x the memory")
print(f"wrote {res}/summary.json")
PY
