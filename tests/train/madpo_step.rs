//! One MADPO mini-batch against CoMLRL 1.4.3's own `MADPOTrainer` (`madpo/madpo_step_tiny.*`, from
//! `scripts/fixtures/make_madpo.py`): two agents on tiny Qwen2 in f32, one prompt with five
//! recorded joint candidates (token ids) and joint rewards. The pairs `reward_gap` and `all`
//! select, then with `compat_last_token` on (CoMLRL's sequence log-prob) every agent's winner and
//! loser log-probs, the detached deltas, each agent's loss and gradients, and the weights after
//! one AdamW step, within 1e-5 relative; with the fix (the default) the last token counts.
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::madpo::loss::{
    agent_grads, deltas, scored, sequence_logprobs, LastToken,
};
use comlrl::train::algorithms::madpo::set::{Pair, PreferenceSet};
use comlrl::train::optim::{AdamW, AdamWConfig};
use comlrl::train::rollout::pairs::{select_pairs, PairSelection};
use comlrl::train::rollout::{AgentRollout, NodeSample};
use comlrl::train::update::Share;
use common::*;
use rand::SeedableRng;
use std::collections::HashMap;

fn load() -> Policy {
    Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// |a − b| ≤ 1e-5 · max(|b|, 1): relative agreement, absolute near 0.
struct Fixture {
    meta: serde_json::Value,
    t: HashMap<String, Tensor>,
    node: NodeSample,
}

fn fixture() -> Fixture {
    let dir = fixtures().join("madpo");
    let meta = json(&dir.join("madpo_step_tiny.json"));
    let t = load_st(&dir.join("madpo_step_tiny.safetensors"));
    let prompts: Vec<Vec<u32>> = meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let agents = prompts
        .iter()
        .zip(meta["candidates"].as_array().unwrap())
        .map(|(p, cs)| {
            let comps: Vec<Vec<u32>> = cs.as_array().unwrap().iter().map(ids).collect();
            AgentRollout::sampled(p.clone(), comps, vec![])
        })
        .collect();
    let rewards: Vec<f32> = meta["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap() as f32)
        .collect();
    let node = NodeSample {
        turn: 0,
        agents,
        rewards,
        components: vec![],
    };
    Fixture { meta, t, node }
}

fn pair_list(v: &serde_json::Value) -> Vec<(usize, usize)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_u64().unwrap() as usize,
                p[1].as_u64().unwrap() as usize,
            )
        })
        .collect()
}

#[test]
fn pair_selection_matches_comlrl() {
    let f = fixture();
    let limit = f.meta["config"]["preference_pairs_per_sample"]
        .as_u64()
        .unwrap() as usize;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let pick = |sel, lim, rng: &mut rand_chacha::ChaCha8Rng| -> Vec<(usize, usize)> {
        select_pairs(&f.node.rewards, sel, lim, rng)
            .iter()
            .map(|p| (p.winner, p.loser))
            .collect()
    };
    let sel = &f.meta["selections"];
    assert_eq!(
        pick(PairSelection::RewardGap, Some(limit), &mut rng),
        pair_list(&sel["reward_gap"])
    );
    assert_eq!(
        pick(PairSelection::All, None, &mut rng),
        pair_list(&sel["all"])
    );
    // `random` draws from Python's generator in CoMLRL: the same set of candidates to draw from,
    // each draw a positive-gap pair, as many as asked.
    let all: Vec<(usize, usize)> = pair_list(&sel["all"]);
    let comlrl_random = pair_list(&sel["random"]);
    assert!(comlrl_random.iter().all(|p| all.contains(p)));
    for seed in 0..20 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let ours = pick(PairSelection::Random, Some(limit), &mut rng);
        assert_eq!(ours.len(), comlrl_random.len());
        assert!(ours.iter().all(|p| all.contains(p)), "{ours:?}");
        let mut dedup = ours.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), ours.len(), "no pair twice");
    }
}

/// The set of the fixture's prompt with the `reward_gap` pairs, and those pairs as one batch.
fn reward_gap_set(f: &Fixture) -> (PreferenceSet, Vec<Pair>) {
    let limit = f.meta["config"]["preference_pairs_per_sample"]
        .as_u64()
        .unwrap() as usize;
    let mut set = PreferenceSet::default();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    set.add(&f.node, PairSelection::RewardGap, Some(limit), &mut rng)
        .unwrap();
    let batch = set.pairs.clone();
    (set, batch)
}

fn check_step(recompute: bool) {
    let f = fixture();
    let (set, batch) = reward_gap_set(&f);
    // The set keeps the used candidates renumbered; map them back through the tokens.
    let rgap = pair_list(&f.meta["selections"]["reward_gap"]);
    for (p, &(w, l)) in batch.iter().zip(&rgap) {
        for a in 0..2 {
            let e = &set.entries[p.entry].agents[a];
            assert_eq!(e.candidates[p.winner], f.node.agents[a].completions[w]);
            assert_eq!(e.candidates[p.loser], f.node.agents[a].completions[l]);
        }
    }
    let policies = [load(), load()];
    let last = LastToken::Dropped;
    let seqs = f.meta["sequence_logprobs"].as_array().unwrap();
    let mut rows: Vec<Vec<f32>> = vec![vec![0.0; 2]; batch.len()];
    for (a, policy) in policies.iter().enumerate() {
        let lps = sequence_logprobs(policy, &set, &batch, a, last, 0).unwrap();
        for (b, p) in batch.iter().enumerate() {
            let want = &seqs[a * batch.len() + b];
            assert_eq!(want["agent"].as_u64().unwrap() as usize, a);
            let get = |c| lps.get(&(p.entry, c)).copied().unwrap_or(0.0) as f64;
            close(
                &format!("agent {a} pair {b} winner"),
                get(p.winner),
                want["winner"].as_f64().unwrap(),
            );
            close(
                &format!("agent {a} pair {b} loser"),
                get(p.loser),
                want["loser"].as_f64().unwrap(),
            );
        }
        for (b, d) in deltas(&lps, &batch).into_iter().enumerate() {
            rows[b][a] = d;
        }
    }
    let want_deltas = f.meta["detached_deltas"].as_array().unwrap();
    for (b, row) in rows.iter().enumerate() {
        for a in 0..2 {
            close(
                &format!("delta pair {b} agent {a}"),
                row[a] as f64,
                want_deltas[b][a].as_f64().unwrap(),
            );
        }
    }
    let beta = f.meta["config"]["dpo_beta"].as_f64().unwrap();
    let lr = f.meta["config"]["agent_learning_rate"].as_f64().unwrap();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let grad_params: Vec<&str> = f.meta["grad_params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for (a, policy) in policies.iter().enumerate() {
        let named = policy.vars();
        let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
        let before: HashMap<String, Tensor> = named
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
            .collect();
        let (lg, stats) = agent_grads(
            policy,
            &vars,
            &set,
            &batch,
            &rows,
            a,
            beta,
            last,
            0,
            recompute,
            Share::ALL,
            plan,
        )
        .unwrap();
        let want = &f.meta["agents"][a];
        close(
            &format!("agent {a} loss"),
            lg.loss,
            want["loss"].as_f64().unwrap(),
        );
        assert!(stats.accuracy >= 0.0 && stats.accuracy <= 1.0);
        let norms = want["grad_norms"].as_object().unwrap();
        let mut sq = 0.0;
        for ((name, _), g) in named.iter().zip(&lg.grads) {
            let g = as_f64s(
                g.as_ref()
                    .unwrap_or_else(|| panic!("agent {a}: no gradient for {name}")),
            );
            let n2: f64 = g.iter().map(|x| x * x).sum();
            sq += n2;
            if grad_params.contains(&name.as_str()) {
                close_all(
                    &format!("agent {a} grad {name}"),
                    &g,
                    &as_f64s(&f.t[&format!("agent{a}.grad.{name}")]),
                );
            }
            if !name.ends_with("k_proj.bias") {
                let want = norms[name].as_f64().unwrap();
                assert!(
                    (n2.sqrt() - want).abs() <= 1e-4 * want + 1e-7,
                    "agent {a} ‖grad {name}‖ {} vs {want}",
                    n2.sqrt()
                );
            }
        }
        close(
            &format!("agent {a} grad norm"),
            sq.sqrt(),
            want["grad_global_norm"].as_f64().unwrap(),
        );
        let mut opt = AdamW::new(
            named.clone(),
            AdamWConfig {
                lr,
                ..AdamWConfig::default()
            },
        );
        opt.step_grads(&lg.grads, lr, None).unwrap();
        let deltas = want["update_delta_norms"].as_object().unwrap();
        for (name, var) in &named {
            if let Some(w) = f.t.get(&format!("agent{a}.after.{name}")) {
                close_all(
                    &format!("agent {a} {name} after"),
                    &as_f64s(var.as_tensor()),
                    &as_f64s(w),
                );
            }
            if name.ends_with("k_proj.bias") {
                continue;
            }
            let d: f64 = as_f64s(var.as_tensor())
                .iter()
                .zip(as_f64s(&before[name]))
                .map(|(x, y)| (x - y) * (x - y))
                .sum::<f64>()
                .sqrt();
            let want = deltas[name].as_f64().unwrap();
            assert!(
                (d - want).abs() <= 1e-3 * want + 1e-9,
                "agent {a} {name}: ‖Δ‖ {d} vs {want}"
            );
        }
    }
}

#[test]
fn one_mini_batch_matches_comlrl_recomputed() {
    check_step(true);
}

#[test]
fn one_mini_batch_matches_comlrl_autograd() {
    check_step(false);
}

#[test]
fn with_the_fix_the_last_token_counts() {
    let f = fixture();
    let (set, batch) = reward_gap_set(&f);
    let policies = [load(), load()];
    let fixed = f.meta["fixed_logprobs"].as_array().unwrap();
    let comlrl = f.meta["sequence_logprobs"].as_array().unwrap();
    let rgap = pair_list(&f.meta["selections"]["reward_gap"]);
    for (a, policy) in policies.iter().enumerate() {
        let lps = sequence_logprobs(policy, &set, &batch, a, LastToken::Counted, 0).unwrap();
        for (b, (p, &(w, _))) in batch.iter().zip(&rgap).enumerate() {
            let ours = lps[&(p.entry, p.winner)] as f64;
            // Every token, EOS included (transformers' log-probs of the whole candidate).
            close(
                &format!("agent {a} candidate {w}"),
                ours,
                fixed[a][w].as_f64().unwrap(),
            );
            let dropped = comlrl[a * batch.len() + b]["winner"].as_f64().unwrap();
            let c = &f.node.agents[a].completions[w];
            let left_out = c.len() - scored(c, policy.pad_id, LastToken::Dropped).len();
            assert!(left_out >= 1);
            // The tokens CoMLRL leaves out have log-prob < 0: the fixed sum is lower.
            assert!(
                ours < dropped - 1e-3,
                "agent {a} candidate {w}: {ours} vs CoMLRL {dropped}"
            );
        }
    }
}

#[test]
fn a_non_finite_margin_is_an_error() {
    let f = fixture();
    let (set, batch) = reward_gap_set(&f);
    let policy = load();
    let vars: Vec<Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    for bad in [f32::NAN, f32::INFINITY] {
        let mut rows = vec![vec![1.0f32; 2]; batch.len()];
        rows[1][1] = bad;
        let err = agent_grads(
            &policy,
            &vars,
            &set,
            &batch,
            &rows,
            0,
            0.1,
            LastToken::Counted,
            0,
            true,
            Share::ALL,
            plan,
        )
        .err()
        .expect("a non-finite margin must fail");
        assert!(matches!(err, comlrl::Error::Diverged(_)), "{err}");
        assert!(err.to_string().contains("margin"), "{err}");
    }
}
