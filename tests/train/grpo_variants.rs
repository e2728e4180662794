//! The GRPO variants (`trainer.loss_aggregation`, `advantage_scale`, `advantage_std: sample`,
//! `mask_truncated_completions`, `logprob_temperature: sampling`, `reward_aggregation:
//! normalize_then_sum` through MAGRPO's own `targets`) against TRL 1.16's own loss code
//! (`tests/fixtures/grpo_variants/trl_loss.json`, made by
//! `scripts/fixtures/make_grpo_variants.py`): for each case, the advantages comlrl computes from
//! the fixed rewards, its loss weights (TRL's loss value at ratio 1 is Σ weight · counted tokens)
//! and the gradients of one mini-batch of 2 node samples × 4 completions on tiny-qwen2, f32, on
//! the autograd path and the recomputed one.
use crate::common;
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy};
use comlrl::train::algorithms::magrpo::advantage::{
    advantages_with, batch_spread, rescale, AdvantageScale, AdvantageStd, Baseline, Normalization,
};
use comlrl::train::algorithms::magrpo::loss::{
    loss_and_grads_shaped, sequence_weights, LossAggregation, LossShape,
};
use comlrl::train::algorithms::magrpo::Magrpo;
use comlrl::train::algorithms::Algorithm;
use comlrl::train::rollout::joint::joint_actions;
use comlrl::train::rollout::{AgentRollout, Node};
use comlrl::train::update::Share;
use common::*;
use serde_json::Value;

/// Relative agreement asked of every number.
const REL: f64 = 1e-5;

fn fixture() -> Value {
    json(&fixtures().join("grpo_variants/trl_loss.json"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn key<'a>(case: &'a Value, k: &str) -> Option<&'a str> {
    case["comlrl"][k].as_str()
}

/// The comlrl settings a case maps TRL's to: the advantages' normalization, the loss's shape
/// and the passes' logit scale (1 / the sampling temperature with `logprob_temperature:
/// sampling`).
fn settings(case: &Value, max_new_tokens: usize) -> (Normalization, LossShape, PassPlan) {
    let scale = match key(case, "advantage_scale").unwrap_or("group") {
        "group" => AdvantageScale::Group,
        "batch" => AdvantageScale::Batch,
        "none" => AdvantageScale::None,
        other => panic!("advantage_scale {other}"),
    };
    let aggregation = match key(case, "loss_aggregation").unwrap() {
        "sequence_sum" => LossAggregation::SequenceSum,
        "sequence_mean" => LossAggregation::SequenceMean,
        "token_mean" => LossAggregation::TokenMean,
        "constant" => LossAggregation::Constant,
        other => panic!("loss_aggregation {other}"),
    };
    let norm = Normalization {
        on: true,
        scale,
        // TRL has only the sample standard deviation (+ 1e-4).
        std: AdvantageStd::Sample,
    };
    let shape = LossShape {
        aggregation,
        max_new_tokens,
        mask_truncated: case["comlrl"]["mask_truncated_completions"]
            .as_bool()
            .unwrap_or(false),
    };
    let logit_scale = match key(case, "logprob_temperature").unwrap_or("1") {
        "1" => 1.0,
        "sampling" => 1.0 / case["comlrl"]["temperature"].as_f64().unwrap(),
        other => panic!("logprob_temperature {other}"),
    };
    let plan = PassPlan {
        logit_scale,
        ..PassPlan::rerun_all(ComputeDtype::F32)
    };
    (norm, shape, plan)
}

/// The fixture's two node samples with comlrl's advantages under `norm`.
fn samples(f: &Value, norm: Normalization) -> Vec<AgentRollout> {
    let prompts = f["prompt_ids"].as_array().unwrap();
    let comps = f["completion_ids"].as_array().unwrap();
    let rewards = f["rewards"].as_array().unwrap();
    let mut out: Vec<AgentRollout> = prompts
        .iter()
        .zip(comps)
        .zip(rewards)
        .map(|((p, c), r)| {
            let completions: Vec<Vec<u32>> = c.as_array().unwrap().iter().map(ids).collect();
            let returns: Vec<f32> = f64s(r).into_iter().map(|x| x as f32).collect();
            let k = completions.len();
            let mut s = AgentRollout::sampled(ids(p), completions, vec![String::new(); k]);
            s.advantages = advantages_with(&returns, Baseline::Mean, norm);
            s.kl = vec![0.0; k];
            s.returns = returns;
            s
        })
        .collect();
    if norm.per_batch() {
        let spread = batch_spread(out.iter().map(|s| &s.returns[..]), norm.std);
        out.iter_mut()
            .for_each(|s| rescale(&mut s.advantages, spread));
    }
    out
}

/// The fixture's two node samples as MAGRPO's `targets` makes them from two reward terms
/// (`rewards`, `rewards2`) under `reward_aggregation: normalize_then_sum` with the case's
/// weights (a two-agent scenario of the tiny model; agent 0 holds the fixture's completions),
/// then divided by the buffer's spread as the update does with `advantage_scale: batch`.
fn gdpo_samples(f: &Value, case: &Value) -> Vec<AgentRollout> {
    let w = f64s(&case["comlrl"]["term_weights"]);
    let reward = format!(
        "reward=[{{name: a, rhai: ../rewards/len_ratio.rhai, weight: {}}}, \
         {{name: b, rhai: ../rewards/len_ratio.rhai, weight: {}}}]",
        w[0], w[1]
    );
    let tmp = tempfile::tempdir().unwrap();
    let s = common::tiny_run::load_small(
        tmp.path(),
        &[
            reward.as_str(),
            "reward_processors=[]",
            "trainer.num_generations=4",
            "trainer.reward_aggregation=normalize_then_sum",
            "trainer.advantage_scale=batch",
            "trainer.advantage_std=sample",
        ],
    );
    let magrpo = Magrpo::new(&s);
    let groups = f["completion_ids"].as_array().unwrap();
    let mut out = vec![];
    for (g, comps) in groups.iter().enumerate() {
        let completions: Vec<Vec<u32>> = comps.as_array().unwrap().iter().map(ids).collect();
        let k = completions.len();
        let agent = AgentRollout::sampled(
            ids(&f["prompt_ids"][g]),
            completions,
            vec![String::new(); k],
        );
        let (r1, r2) = (f64s(&f["rewards"][g]), f64s(&f["rewards2"][g]));
        let components: Vec<Vec<f32>> = r1
            .iter()
            .zip(&r2)
            .map(|(a, b)| vec![*a as f32, *b as f32])
            .collect();
        // The logged rewards: the weighted sum, untouched by the aggregation.
        let logged: Vec<f32> = r1
            .iter()
            .zip(&r2)
            .map(|(a, b)| (w[0] * a + w[1] * b) as f32)
            .collect();
        let root = Node {
            turn: 0,
            agents: vec![agent.clone(), agent],
            joint: joint_actions(2, k, false),
            rewards: logged.clone(),
            components,
            children: vec![],
        };
        let mut nodes = magrpo.targets(root).unwrap();
        assert_eq!(nodes.len(), 1);
        let mut node = nodes.remove(0);
        assert_eq!(node.rewards, logged, "the samples keep the logged rewards");
        let mut a0 = node.agents.remove(0);
        a0.kl = vec![0.0; k];
        out.push(a0);
    }
    let spread = batch_spread(out.iter().map(|s| &s.returns[..]), AdvantageStd::Sample);
    out.iter_mut()
        .for_each(|s| rescale(&mut s.advantages, spread));
    out
}

fn close(got: f64, want: f64, scale: f64) -> bool {
    (got - want).abs() <= REL * scale.max(want.abs())
}

#[test]
fn every_variant_matches_trl() {
    let f = fixture();
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases = f["cases"].as_array().unwrap();
    assert!(cases.len() >= 14, "the fixture covers every setting");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let owned = match key(case, "reward_aggregation") {
            Some("normalize_then_sum") => gdpo_samples(&f, case),
            _ => samples(&f, norm),
        };
        let refs: Vec<&AgentRollout> = owned.iter().collect();

        // Advantages: TRL's (r − group mean) / (sample std + 1e-4), batch- or group-scaled.
        let want_adv = f64s(&case["advantages"]);
        let got_adv: Vec<f64> = owned
            .iter()
            .flat_map(|s| s.advantages.iter().map(|&a| a as f64))
            .collect();
        let adv_scale = want_adv.iter().fold(0f64, |m, a| m.max(a.abs()));
        for (i, (g, w)) in got_adv.iter().zip(&want_adv).enumerate() {
            assert!(
                close(*g, *w, adv_scale),
                "{name}: advantage {i}: {g} vs {w}"
            );
        }

        // Loss weights: TRL's loss value is Σ_i w_i · (counted tokens of i).
        let weights = sequence_weights(&refs, shape, &policy.eos_ids, policy.pad_id).unwrap();
        let counted = f64s(&case["completion_mask_tokens"]);
        let terms: Vec<f64> = weights
            .iter()
            .flatten()
            .zip(&counted)
            .map(|(&w, &n)| w as f64 * n)
            .collect();
        let surrogate: f64 = terms.iter().sum();
        // Relative to the terms' size: with `grpo` the advantages sum to 0, and so does the loss.
        let size = terms.iter().map(|t| t.abs()).sum::<f64>();
        let want_loss = case["loss"].as_f64().unwrap();
        assert!(
            close(surrogate, want_loss, size),
            "{name}: Σ weight · tokens {surrogate} vs TRL's loss {want_loss}"
        );

        // Gradients, on both loss paths.
        for (recompute, chunk) in [(false, 0), (true, 3)] {
            let what = format!("{name} (recompute {recompute}, micro-batch {chunk})");
            let lg = loss_and_grads_shaped(
                &policy,
                &vars,
                &refs,
                chunk,
                recompute,
                Share::ALL,
                plan,
                shape,
            )
            .unwrap();
            let mut sq = 0f64;
            for ((n, _), g) in named.iter().zip(&lg.grads) {
                let g: Vec<f64> = match g {
                    Some(g) => f32s(g).into_iter().map(|x| x as f64).collect(),
                    None => panic!("{what}: {n} got no gradient"),
                };
                let norm = g.iter().map(|x| x * x).sum::<f64>();
                sq += norm;
                let want = case["grad_norms"][n]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{what}: no TRL gradient norm of {n}"));
                assert!(
                    close(norm.sqrt(), want, 0.0),
                    "{what}: |grad {n}| {} vs {want}",
                    norm.sqrt()
                );
                if let Some(w) = case["grads"].get(n) {
                    let w = f64s(w);
                    let top = w.iter().fold(0f64, |m, x| m.max(x.abs()));
                    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                        assert!(close(*a, *b, top), "{what}: grad {n}[{i}]: {a} vs {b}");
                    }
                }
            }
            let want = case["grad_global_norm"].as_f64().unwrap();
            assert!(
                close(sq.sqrt(), want, 0.0),
                "{what}: gradient norm {} vs {want}",
                sq.sqrt()
            );
        }
    }
}

#[test]
fn masking_and_aggregation_change_what_they_should() {
    // Without TRL: the fixture's inputs under comlrl's own rules, so a wrong fixture cannot hide
    // a wrong weight. Truncated completions weigh 0 only when masked; `token_mean` weights
    // sum (in absolute value, times tokens) like a mean over the counted tokens.
    let f = fixture();
    let truncated: Vec<bool> = f["truncated"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g.as_array().unwrap().iter().map(|t| t.as_bool().unwrap()))
        .collect();
    assert!(truncated.iter().any(|&t| t) && truncated.iter().any(|&t| !t));
    let norm = Normalization::comlrl(true);
    let owned = samples(&f, norm);
    let refs: Vec<&AgentRollout> = owned.iter().collect();
    let lens: Vec<usize> = owned
        .iter()
        .flat_map(|s| s.completions.iter().map(Vec::len))
        .collect();
    let adv: Vec<f32> = owned.iter().flat_map(|s| s.advantages.clone()).collect();
    for mask in [false, true] {
        let shape = LossShape {
            aggregation: LossAggregation::TokenMean,
            max_new_tokens: 12,
            mask_truncated: mask,
        };
        let w: Vec<f32> = sequence_weights(&refs, shape, &[0], 0).unwrap().concat();
        let tokens: usize = lens
            .iter()
            .zip(&truncated)
            .filter(|(_, &t)| !(mask && t))
            .map(|(l, _)| l)
            .sum();
        for i in 0..w.len() {
            let want = if mask && truncated[i] {
                0.0
            } else {
                -(adv[i] as f64) / tokens as f64
            };
            assert!((w[i] as f64 - want).abs() < 1e-7, "mask {mask}: weight {i}");
        }
    }
    // The default shape's weights are MAGRPO's −A/(G·B).
    let w = sequence_weights(&refs, LossShape::MAGRPO, &[0], 0)
        .unwrap()
        .concat();
    for (wi, a) in w.iter().zip(&adv) {
        assert_eq!(*wi, (-(*a as f64) * 0.5 / 4.0) as f32);
    }
}

/// The clipped surrogate of re-used samples (`trainer.importance_level`, `clip_eps`,
/// `clip_eps_high`, `clip_delta`) against TRL 1.16's `compute_loss` given the same π_old
/// (`tests/fixtures/grpo_variants/trl_ratio.json`: the current log-probs shifted by fixed
/// offsets, ratios on both sides of every clip bound): the loss value (TRL's surrogate), the
/// gradients and TRL's `clip_ratio/*` metrics, token and sequence level, on both loss paths.
#[test]
fn clipped_ratio_matches_trl() {
    use comlrl::train::algorithms::magrpo::clip::{clipped_loss_and_grads, Clip, Old};
    use comlrl_scenario::ImportanceLevel;
    let f = json(&fixtures().join("grpo_variants/trl_ratio.json"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases = f["cases"].as_array().unwrap();
    assert!(
        cases.len() >= 6,
        "the fixture covers both levels and every clip key"
    );
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let owned = samples(&f, norm);
        let refs: Vec<&AgentRollout> = owned.iter().collect();
        let k = owned[0].completions.len();
        let old_rows: Vec<Vec<f32>> = case["old_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| f64s(r).into_iter().map(|x| x as f32).collect())
            .collect();
        let old: Vec<Vec<Old>> = (0..owned.len())
            .map(|g| (0..k).map(|j| Old::Known(&old_rows[g * k + j])).collect())
            .collect();
        let c = &case["comlrl"];
        let clip = Clip {
            level: match key(case, "importance_level").unwrap() {
                "token" => ImportanceLevel::Token,
                "sequence" => ImportanceLevel::Sequence,
                other => panic!("importance_level {other}"),
            },
            low: c["clip_eps"].as_f64().unwrap(),
            high: c["clip_eps_high"].as_f64().unwrap(),
            delta: c["clip_delta"].as_f64(),
        };
        for (recompute, chunk) in [(false, 0), (true, 3)] {
            let what = format!("{name} (recompute {recompute}, micro-batch {chunk})");
            let out = clipped_loss_and_grads(
                &policy,
                &vars,
                &refs,
                &old,
                chunk,
                recompute,
                Share::ALL,
                plan,
                shape,
                clip,
                0,
            )
            .unwrap();
            let want_loss = case["loss"].as_f64().unwrap();
            assert!(
                close(out.grads.loss, want_loss, 0.0),
                "{what}: loss {} vs TRL's {want_loss}",
                out.grads.loss
            );
            let metrics = out.stats.metrics();
            for (m, want) in case["clip_ratio"].as_object().unwrap() {
                let got = metrics
                    .iter()
                    .find(|(n, _)| *n == format!("clip_ratio/{m}"))
                    .unwrap_or_else(|| panic!("{what}: no metric clip_ratio/{m}"))
                    .1;
                assert!(
                    (got - want.as_f64().unwrap()).abs() < 1e-6,
                    "{what}: clip_ratio/{m} {got} vs TRL's {want}"
                );
            }
            let mut sq = 0f64;
            for ((n, _), g) in named.iter().zip(&out.grads.grads) {
                let g: Vec<f64> = match g {
                    Some(g) => f32s(g).into_iter().map(|x| x as f64).collect(),
                    None => panic!("{what}: {n} got no gradient"),
                };
                let norm = g.iter().map(|x| x * x).sum::<f64>();
                sq += norm;
                let want = case["grad_norms"][n].as_f64().unwrap();
                assert!(
                    close(norm.sqrt(), want, 0.0),
                    "{what}: |grad {n}| {} vs {want}",
                    norm.sqrt()
                );
                if let Some(w) = case["grads"].get(n) {
                    let w = f64s(w);
                    let top = w.iter().fold(0f64, |m, x| m.max(x.abs()));
                    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                        assert!(close(*a, *b, top), "{what}: grad {n}[{i}]: {a} vs {b}");
                    }
                }
            }
            let want = case["grad_global_norm"].as_f64().unwrap();
            assert!(
                close(sq.sqrt(), want, 0.0),
                "{what}: gradient norm {} vs {want}",
                sq.sqrt()
            );
        }
    }
}

/// π_old = the current log-probs (on-policy: ratio exactly 1) gives the gradients of the loss
/// without a ratio, for every aggregation: the clipped path's first pass is the default
/// update's.
#[test]
fn on_policy_ratio_is_the_plain_loss() {
    use comlrl::train::algorithms::magrpo::clip::{clipped_loss_and_grads, Clip, Old};
    use comlrl_scenario::ImportanceLevel;
    let f = fixture();
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let owned = samples(&f, Normalization::comlrl(true));
    let refs: Vec<&AgentRollout> = owned.iter().collect();
    let old: Vec<Vec<Old>> = owned
        .iter()
        .map(|s| vec![Old::OnPolicy; s.completions.len()])
        .collect();
    for (aggregation, level) in [
        (LossAggregation::SequenceSum, ImportanceLevel::Token),
        (LossAggregation::TokenMean, ImportanceLevel::Sequence),
    ] {
        let shape = LossShape {
            aggregation,
            max_new_tokens: 12,
            mask_truncated: false,
        };
        let clip = Clip {
            level,
            low: 0.2,
            high: 0.28,
            delta: None,
        };
        let plan = PassPlan::rerun_all(ComputeDtype::F32);
        let plain =
            loss_and_grads_shaped(&policy, &vars, &refs, 3, true, Share::ALL, plan, shape).unwrap();
        let out = clipped_loss_and_grads(
            &policy,
            &vars,
            &refs,
            &old,
            3,
            true,
            Share::ALL,
            plan,
            shape,
            clip,
            0,
        )
        .unwrap();
        assert_eq!(out.stats.ratio_max, 1.0);
        // Every computed completion's log-probs are kept as π_old for later passes.
        let kept = out
            .captured
            .iter()
            .flatten()
            .filter(|c| c.is_some())
            .count();
        assert!(kept > 0);
        for (a, b) in plain.grads.iter().zip(&out.grads.grads) {
            let (a, b) = (f32s(a.as_ref().unwrap()), f32s(b.as_ref().unwrap()));
            let top = a.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    close(*x as f64, *y as f64, top),
                    "{aggregation:?}: {x} vs {y}"
                );
            }
        }
    }
}

/// `ppo_epochs: 2` trains end to end on the small scenario: every logged row carries the
/// ratio's metrics for each agent (none without a ratio), and the second pass sees the moved
/// policy (a ratio away from 1).
#[test]
fn ppo_epochs_run_end_to_end_and_log_the_ratio() {
    use comlrl::train::Trainer;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let plain = [
        "trainer.num_train_epochs=1",
        "trainer.agent_learning_rate=1e-3",
        "logging.steps=2",
    ];
    let twice = [&plain[..], &["trainer.ppo_epochs=2"]].concat();
    let da = Trainer::new(common::tiny_run::load_small(&a, &plain))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    let db = Trainer::new(common::tiny_run::load_small(&b, &twice))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(da.steps_done, db.steps_done);
    let (ra, rb) = (metrics(&a), metrics(&b));
    assert!(ra.iter().all(|r| r.get("agent_0/ratio_mean").is_none()));
    let mut moved = false;
    for r in &rb {
        for i in 0..2 {
            let get = |m: &str| r[format!("agent_{i}/{m}")].as_f64().unwrap();
            let (mean, max) = (get("ratio_mean"), get("ratio_max"));
            assert!(mean.is_finite() && max > 0.0, "{r}");
            for m in ["low_mean", "high_mean", "region_mean"] {
                assert!(
                    (0.0..=1.0).contains(&get(&format!("clip_ratio/{m}"))),
                    "{r}"
                );
            }
            moved |= max > 1.0;
        }
    }
    assert!(
        moved,
        "the second pass compares with the policy before the first step"
    );
}

/// Every gradient of `grads` against a case's TRL gradients (norms per tensor, a few tensors in
/// full, the global norm).
fn check_grads(
    what: &str,
    named: &[(String, candle_core::Var)],
    grads: &[Option<candle_core::Tensor>],
    case: &Value,
) {
    let mut sq = 0f64;
    for ((n, _), g) in named.iter().zip(grads) {
        let g: Vec<f64> = match g {
            Some(g) => f32s(g).into_iter().map(|x| x as f64).collect(),
            None => panic!("{what}: {n} got no gradient"),
        };
        let norm = g.iter().map(|x| x * x).sum::<f64>();
        sq += norm;
        let want = case["grad_norms"][n].as_f64().unwrap();
        assert!(
            close(norm.sqrt(), want, 0.0),
            "{what}: |grad {n}| {} vs {want}",
            norm.sqrt()
        );
        if let Some(w) = case["grads"].get(n) {
            let w = f64s(w);
            let top = w.iter().fold(0f64, |m, x| m.max(x.abs()));
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(close(*a, *b, top), "{what}: grad {n}[{i}]: {a} vs {b}");
            }
        }
    }
    let want = case["grad_global_norm"].as_f64().unwrap();
    assert!(
        close(sq.sqrt(), want, 0.0),
        "{what}: gradient norm {} vs {want}",
        sq.sqrt()
    );
}

/// `trainer.top_entropy_quantile` against TRL 1.16's `compute_loss` with its
/// `top_entropy_quantile` (`tests/fixtures/grpo_variants/trl_entropy.json`): comlrl's per-token
/// entropies against TRL's, the loss (Σ weight · kept tokens, TRL's value at ratio 1), the
/// gradients on both loss paths and the logged mean entropy against TRL's `entropy` metric.
#[test]
fn entropy_mask_matches_trl() {
    use comlrl::train::algorithms::magrpo::entropy_mask::{high_entropy_mask, token_entropies};
    use comlrl::train::algorithms::magrpo::loss::{loss_and_grads_terms, Counted, TokenTerms};
    let f = json(&fixtures().join("grpo_variants/trl_entropy.json"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases: Vec<&Value> = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["comlrl"].get("top_entropy_quantile").is_some())
        .collect();
    assert!(cases.len() >= 3, "two aggregations and truncation masking");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let q = case["comlrl"]["top_entropy_quantile"].as_f64().unwrap();
        let owned = samples(&f, norm);
        let refs: Vec<&AgentRollout> = owned.iter().collect();
        let k = owned[0].completions.len();

        // Every counted token's entropy against TRL's (f32 both).
        let counted = Counted::new(&refs, shape, &policy);
        let ent = token_entropies(
            &policy,
            &refs,
            |i, j| counted.get(i, j),
            0,
            plan.logit_scale,
        )
        .unwrap();
        let want_ent = case["entropies"].as_array().unwrap();
        let mut compared = 0;
        for (g, s) in ent.iter().enumerate() {
            for (j, e) in s.iter().enumerate() {
                let want = f64s(&want_ent[g * k + j]);
                if !counted.get(g, j) {
                    assert!(
                        e.is_empty(),
                        "{name}: an uncounted completion has entropies"
                    );
                    continue;
                }
                assert_eq!(e.len(), want.len());
                for (t, (a, b)) in e.iter().zip(&want).enumerate() {
                    assert!(
                        close(*a as f64, *b, 1.0),
                        "{name}: entropy of completion {g}/{j} token {t}: {a} vs TRL's {b}"
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 20);

        // TRL's loss value at ratio 1: Σ_i w_i · (kept tokens of i).
        let mask = high_entropy_mask(&ent, q);
        let kept: usize = mask.0.iter().flatten().flatten().filter(|&&m| m).count();
        assert!(
            kept > 0 && kept < compared,
            "{name}: the mask keeps some tokens"
        );
        let weights = sequence_weights(&refs, shape, &policy.eos_ids, policy.pad_id).unwrap();
        let mut terms = vec![];
        for (g, w) in weights.iter().enumerate() {
            for (j, &w) in w.iter().enumerate() {
                let n = mask.0[g][j].iter().filter(|&&m| m).count();
                terms.push(w as f64 * n as f64);
            }
        }
        let size = terms.iter().map(|t| t.abs()).sum::<f64>();
        let want_loss = case["loss"].as_f64().unwrap();
        let surrogate: f64 = terms.iter().sum();
        assert!(
            close(surrogate, want_loss, size),
            "{name}: Σ weight · kept tokens {surrogate} vs TRL's loss {want_loss}"
        );

        let terms = TokenTerms {
            top_entropy_quantile: q,
            ..TokenTerms::NONE
        };
        for (recompute, chunk) in [(false, 0), (true, 3)] {
            let what = format!("{name} (recompute {recompute}, micro-batch {chunk})");
            let lg = loss_and_grads_terms(
                &policy,
                &vars,
                &refs,
                chunk,
                recompute,
                Share::ALL,
                plan,
                shape,
                terms,
            )
            .unwrap();
            check_grads(&what, &named, &lg.grads, case);
            if recompute {
                // Every counted completion is computed here (no advantage is 0).
                let want = case["entropy_metric"].as_f64().unwrap();
                let got = lg
                    .entropy_mean()
                    .expect("the recomputed passes log the entropy");
                assert!(
                    close(got, want, 1.0),
                    "{what}: entropy {got} vs TRL's {want}"
                );
            }
        }
    }
}

/// The mask on the clipped path, on-policy (ratio 1): at token level it gives the masked plain
/// loss's gradients; at sequence level each kept token's copy of the sequence's surrogate
/// reaches every token through the mean ratio, so completion i weighs as the plain loss with
/// its advantage times (kept tokens / tokens).
#[test]
fn entropy_mask_on_the_clipped_path_is_the_plain_masked_loss() {
    use comlrl::train::algorithms::magrpo::clip::{clipped_loss_and_grads_terms, Clip, Old};
    use comlrl::train::algorithms::magrpo::loss::{loss_and_grads_terms, TokenTerms};
    use comlrl_scenario::ImportanceLevel;
    let f = fixture();
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let vars: Vec<candle_core::Var> = policy.vars().into_iter().map(|(_, v)| v).collect();
    let owned = samples(&f, Normalization::comlrl(true));
    let refs: Vec<&AgentRollout> = owned.iter().collect();
    let old: Vec<Vec<Old>> = owned
        .iter()
        .map(|s| vec![Old::OnPolicy; s.completions.len()])
        .collect();
    let terms = TokenTerms {
        top_entropy_quantile: 0.4,
        ..TokenTerms::NONE
    };
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    for (aggregation, level) in [
        (LossAggregation::TokenMean, ImportanceLevel::Token),
        (LossAggregation::SequenceMean, ImportanceLevel::Sequence),
    ] {
        let shape = LossShape {
            aggregation,
            max_new_tokens: 12,
            mask_truncated: false,
        };
        let clip = Clip {
            level,
            low: 0.2,
            high: 0.28,
            delta: None,
        };
        let plain = match level {
            ImportanceLevel::Token => loss_and_grads_terms(
                &policy,
                &vars,
                &refs,
                3,
                true,
                Share::ALL,
                plan,
                shape,
                terms,
            )
            .unwrap(),
            _ => {
                use comlrl::train::algorithms::magrpo::entropy_mask::{
                    high_entropy_mask, token_entropies,
                };
                use comlrl::train::algorithms::magrpo::loss::Counted;
                let counted = Counted::new(&refs, shape, &policy);
                let ent =
                    token_entropies(&policy, &refs, |i, j| counted.get(i, j), 0, 1.0).unwrap();
                let mask = high_entropy_mask(&ent, terms.top_entropy_quantile);
                let mut scaled = owned.clone();
                for (g, s) in scaled.iter_mut().enumerate() {
                    for (j, a) in s.advantages.iter_mut().enumerate() {
                        let kept = mask.0[g][j].iter().filter(|&&m| m).count();
                        *a *= kept as f32 / s.completions[j].len() as f32;
                    }
                }
                let refs: Vec<&AgentRollout> = scaled.iter().collect();
                loss_and_grads_shaped(&policy, &vars, &refs, 3, true, Share::ALL, plan, shape)
                    .unwrap()
            }
        };
        let unmasked =
            loss_and_grads_shaped(&policy, &vars, &refs, 3, true, Share::ALL, plan, shape).unwrap();
        let out = clipped_loss_and_grads_terms(
            &policy,
            &vars,
            &refs,
            &old,
            3,
            true,
            Share::ALL,
            plan,
            shape,
            clip,
            0,
            terms,
        )
        .unwrap();
        let mut differs = false;
        for ((a, b), c) in plain
            .grads
            .iter()
            .zip(&out.grads.grads)
            .zip(&unmasked.grads)
        {
            let (a, b, c) = (
                f32s(a.as_ref().unwrap()),
                f32s(b.as_ref().unwrap()),
                f32s(c.as_ref().unwrap()),
            );
            let top = a.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    close(*x as f64, *y as f64, top),
                    "{aggregation:?}/{level:?}: {x} vs {y}"
                );
            }
            differs |= a
                .iter()
                .zip(&c)
                .any(|(x, z)| (x - z).abs() as f64 > 1e-4 * top);
        }
        assert!(differs, "the mask changes the gradients");
    }
}

/// `trainer.kl_in_loss` against TRL 1.16's `compute_loss` with `beta` 0.04 and the fixture's
/// reference log-probs (`use_bias_correction_kl: false`): the gradients on both loss paths and
/// TRL's `kl` metric; on-policy the clipped path adds the same term.
#[test]
fn kl_in_loss_matches_trl() {
    use comlrl::train::algorithms::magrpo::clip::{clipped_loss_and_grads_terms, Clip, Old};
    use comlrl::train::algorithms::magrpo::loss::{loss_and_grads_terms, TokenTerms};
    use comlrl_scenario::ImportanceLevel;
    let f = json(&fixtures().join("grpo_variants/trl_entropy.json"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases: Vec<&Value> = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["comlrl"].get("kl_in_loss").is_some()
                && c["comlrl"].get("kl_bias_correction").is_none()
        })
        .collect();
    assert!(cases.len() >= 2, "two aggregations");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let beta = case["comlrl"]["kl_in_loss"].as_f64().unwrap();
        let mut owned = samples(&f, norm);
        let k = owned[0].completions.len();
        let refs_rows = case["ref_logprobs"].as_array().unwrap();
        for (g, s) in owned.iter_mut().enumerate() {
            s.ref_logprobs = (0..k)
                .map(|j| {
                    f64s(&refs_rows[g * k + j])
                        .into_iter()
                        .map(|x| x as f32)
                        .collect()
                })
                .collect();
        }
        let refs: Vec<&AgentRollout> = owned.iter().collect();
        let terms = TokenTerms {
            kl_in_loss: beta,
            ..TokenTerms::NONE
        };
        let want_kl = case["kl_metric"].as_f64().unwrap();
        for (recompute, chunk) in [(false, 0), (true, 3)] {
            let what = format!("{name} (recompute {recompute}, micro-batch {chunk})");
            let lg = loss_and_grads_terms(
                &policy,
                &vars,
                &refs,
                chunk,
                recompute,
                Share::ALL,
                plan,
                shape,
                terms,
            )
            .unwrap();
            check_grads(&what, &named, &lg.grads, case);
            let kl = lg.token_kl().expect("the KL term's mean");
            assert!(
                close(kl, want_kl, 0.0),
                "{what}: kl {kl} vs TRL's {want_kl}"
            );
        }
        // On-policy, the clipped path's token-level surrogate plus the same KL term.
        let old: Vec<Vec<Old>> = owned
            .iter()
            .map(|s| vec![Old::OnPolicy; s.completions.len()])
            .collect();
        let clip = Clip {
            level: ImportanceLevel::Token,
            low: 0.2,
            high: 0.2,
            delta: None,
        };
        let out = clipped_loss_and_grads_terms(
            &policy,
            &vars,
            &refs,
            &old,
            3,
            true,
            Share::ALL,
            plan,
            shape,
            clip,
            0,
            terms,
        )
        .unwrap();
        check_grads(
            &format!("{name} (clipped, on-policy)"),
            &named,
            &out.grads.grads,
            case,
        );
    }
    // A completion without reference log-probs is an error, not a silent 0.
    let owned = samples(&f, Normalization::comlrl(true));
    let refs: Vec<&AgentRollout> = owned.iter().collect();
    let shape = LossShape {
        aggregation: LossAggregation::TokenMean,
        max_new_tokens: max_new,
        mask_truncated: false,
    };
    let terms = TokenTerms {
        kl_in_loss: 0.04,
        ..TokenTerms::NONE
    };
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let err = match loss_and_grads_terms(
        &policy,
        &vars,
        &refs,
        3,
        true,
        Share::ALL,
        plan,
        shape,
        terms,
    ) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("no reference log-probs"),
    };
    assert!(err.contains("reference log-probs"), "{err}");
}

/// The entropy, the high-entropy mask and the KL in the loss through the whole loop on the small
/// scenario: every logged row carries each agent's mean entropy (a positive number of nats),
/// and with `kl_in_loss` the rollout keeps the reference log-probs the update's KL term reads
/// (its mean k3 logged, ≥ 0); the mask and the entropy bonus change what is learned, and the
/// bonus's coefficient is logged only with the bonus on.
#[test]
fn entropy_and_kl_in_loss_run_end_to_end() {
    use comlrl::train::Trainer;
    let tmp = tempfile::tempdir().unwrap();
    let plain = [
        "trainer.num_train_epochs=1",
        "trainer.agent_learning_rate=1e-3",
        "logging.steps=2",
    ];
    let runs: [(&str, &[&str]); 4] = [
        ("plain", &[]),
        ("mask", &["trainer.top_entropy_quantile=0.3"]),
        ("kl", &["trainer.kl_in_loss=0.04"]),
        ("bonus", &["trainer.entropy_coef=0.05"]),
    ];
    let mut rows = vec![];
    for (name, extra) in runs {
        let dir = tmp.path().join(name);
        let sets = [&plain[..], extra].concat();
        Trainer::new(common::tiny_run::load_small(&dir, &sets))
            .unwrap()
            .run(false, &mut ())
            .unwrap();
        rows.push(metrics(&dir));
    }
    for (r, (name, _)) in rows.iter().zip(runs) {
        assert!(!r.is_empty(), "{name}: no rows");
        for row in r {
            for i in 0..2 {
                let h = row[format!("agent_{i}/entropy")].as_f64().unwrap();
                assert!(h > 0.0 && h.is_finite(), "{name}: {row}");
                let kl = row.get(format!("agent_{i}/kl_in_loss"));
                if name == "kl" {
                    assert!(kl.unwrap().as_f64().unwrap() >= 0.0, "{row}");
                } else {
                    assert!(kl.is_none(), "{name}: {row}");
                }
                let coef = row.get(format!("agent_{i}/entropy_coef"));
                if name == "bonus" {
                    assert_eq!(coef.and_then(Value::as_f64), Some(0.05), "{row}");
                } else {
                    assert!(coef.is_none(), "{name}: {row}");
                }
            }
        }
    }
    let loss = |r: &Vec<Value>| r.last().unwrap()["agent_0/loss"].as_f64().unwrap();
    assert_ne!(
        loss(&rows[0]),
        loss(&rows[1]),
        "the mask changes the update"
    );
    assert_ne!(
        loss(&rows[0]),
        loss(&rows[3]),
        "the bonus changes the update"
    );
}

/// `trainer.entropy_coef` against TRL 1.16's `compute_loss` with its `entropy_coef` 0.01
/// (`tests/fixtures/grpo_variants/trl_entropy_coef.json`): under three aggregations, with the
/// high-entropy mask, with truncation masking, and with a group whose advantages are all 0
/// (those completions carry the bonus's gradient alone): the gradients on the autograd path,
/// the recomputed one (whole passes and micro-batches of 3) and the on-policy clipped path; the
/// bonus's value (TRL's loss − its `policy_loss`); the clipped path's loss (TRL's); the logged
/// entropy against TRL's `entropy` (every counted completion is computed with the bonus on).
#[test]
fn entropy_coef_matches_trl() {
    use comlrl::train::algorithms::magrpo::clip::{clipped_loss_and_grads_terms, Clip, Old};
    use comlrl::train::algorithms::magrpo::loss::{loss_and_grads_terms, TokenTerms};
    use comlrl_scenario::ImportanceLevel;
    let f = json(&fixtures().join("grpo_variants/trl_entropy_coef.json"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    // The adaptive cases (several calls) are `adaptive_entropy_matches_trl`'s.
    let cases: Vec<&Value> = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("calls").is_none())
        .collect();
    let aggregations: std::collections::BTreeSet<&str> = cases
        .iter()
        .map(|c| c["comlrl"]["loss_aggregation"].as_str().unwrap())
        .collect();
    assert!(aggregations.len() >= 2, "at least two aggregations");
    assert!(cases.iter().any(|c| c.get("rewards").is_some()));
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let mut fc = f.clone();
        if let Some(r) = case.get("rewards") {
            fc["rewards"] = r.clone();
        }
        let owned = samples(&fc, norm);
        let refs: Vec<&AgentRollout> = owned.iter().collect();
        // comlrl's advantages are TRL's (the zero-advantage group's exactly 0).
        let want_adv = f64s(&case["advantages"]);
        let got_adv: Vec<f64> = owned
            .iter()
            .flat_map(|s| s.advantages.iter().map(|&a| a as f64))
            .collect();
        for (a, b) in got_adv.iter().zip(&want_adv) {
            assert!(close(*a, *b, 1.0), "{name}: advantage {a} vs TRL's {b}");
            assert_eq!(*a == 0.0, *b == 0.0, "{name}: a zero advantage");
        }
        let c = case["comlrl"]["entropy_coef"].as_f64().unwrap();
        assert_eq!(case["entropy_coef_metric"].as_f64(), Some(c));
        let terms = TokenTerms {
            top_entropy_quantile: case["comlrl"]["top_entropy_quantile"]
                .as_f64()
                .unwrap_or(1.0),
            entropy_coef: c,
            ..TokenTerms::NONE
        };
        let want_loss = case["loss"].as_f64().unwrap();
        let want_bonus = want_loss - case["policy_loss_metric"].as_f64().unwrap();
        assert!(
            want_bonus < -1e-3,
            "{name}: the bonus is visible in TRL's loss"
        );
        let want_ent = case["entropy_metric"].as_f64().unwrap();
        for (recompute, chunk) in [(false, 0), (true, 0), (true, 3)] {
            let what = format!("{name} (recompute {recompute}, micro-batch {chunk})");
            let run = |terms| {
                loss_and_grads_terms(
                    &policy,
                    &vars,
                    &refs,
                    chunk,
                    recompute,
                    Share::ALL,
                    plan,
                    shape,
                    terms,
                )
                .unwrap()
            };
            let lg = run(terms);
            check_grads(&what, &named, &lg.grads, case);
            // Every counted completion is computed, whatever its advantage.
            let truncated = f["truncated"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g.as_array().unwrap())
                .filter(|t| t.as_bool().unwrap())
                .count();
            let uncounted = if shape.mask_truncated { truncated } else { 0 };
            assert_eq!(
                lg.skipped, uncounted,
                "{what}: every counted completion computed"
            );
            let policy_only = run(TokenTerms {
                entropy_coef: 0.0,
                ..terms
            });
            let bonus = lg.loss - policy_only.loss;
            assert!(
                close(bonus, want_bonus, 0.0),
                "{what}: the bonus's value {bonus} vs TRL's {want_bonus}"
            );
            let got = lg.entropy_mean().expect("the entropy is logged");
            assert!(
                close(got, want_ent, 1.0),
                "{what}: entropy {got} vs TRL's {want_ent}"
            );
        }
        // On-policy, the clipped path (TRL's own formula): its loss is TRL's.
        let old: Vec<Vec<Old>> = owned
            .iter()
            .map(|s| vec![Old::OnPolicy; s.completions.len()])
            .collect();
        let level = match case["trl"]["importance_sampling_level"].as_str() {
            Some("sequence") => ImportanceLevel::Sequence,
            _ => ImportanceLevel::Token,
        };
        let clip = Clip {
            level,
            low: 0.2,
            high: 0.2,
            delta: None,
        };
        let out = clipped_loss_and_grads_terms(
            &policy,
            &vars,
            &refs,
            &old,
            3,
            true,
            Share::ALL,
            plan,
            shape,
            clip,
            0,
            terms,
        )
        .unwrap();
        let what = format!("{name} (clipped, on-policy)");
        check_grads(&what, &named, &out.grads.grads, case);
        let got = out.grads.loss;
        assert!(
            close(got, want_loss, want_bonus.abs()),
            "{what}: loss {got} vs TRL's {want_loss}"
        );
    }
}

/// `trainer.use_adaptive_entropy` against TRL 1.16's controller
/// (`tests/fixtures/grpo_variants/trl_entropy_coef.json`, the cases with `calls`): three
/// optimizer-step calls of TRL's `compute_loss` on the same batch and weights, the coefficient
/// going up (to its cap), up under the high-entropy mask, and down (to its floor, never
/// applied). Per call: comlrl's loss and gradients with the coefficient its controller applies
/// (on both loss paths), the entropy the controller measures (TRL's `_last_world_entropy`) and
/// the coefficient after its update (TRL's `entropy_coef`).
#[test]
fn adaptive_entropy_matches_trl() {
    use comlrl::train::algorithms::magrpo::entropy_control::{
        measured_entropy, ControlSettings, EntropyControl,
    };
    use comlrl::train::algorithms::magrpo::loss::{loss_and_grads_terms, TokenTerms};
    let f = json(&fixtures().join("grpo_variants/trl_entropy_coef.json"));
    let policy = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let named = policy.vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let max_new = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases: Vec<&Value> = f["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("calls").is_some())
        .collect();
    assert!(cases.len() >= 3, "up, up under the mask, down");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (norm, shape, plan) = settings(case, max_new);
        let owned = samples(&f, norm);
        let refs: Vec<&AgentRollout> = owned.iter().collect();
        let k = &case["comlrl"];
        let num = |key: &str| k[key].as_f64().unwrap();
        let s = ControlSettings {
            min: num("entropy_coef_min"),
            max: num("entropy_coef_max"),
            delta: num("entropy_coef_delta"),
            target: num("entropy_target"),
        };
        for (recompute, chunk) in [(false, 0), (true, 3)] {
            let mut ctl = EntropyControl::new(num("entropy_coef"));
            for (n, call) in case["calls"].as_array().unwrap().iter().enumerate() {
                let what = format!("{name} call {n} (recompute {recompute})");
                let terms = TokenTerms {
                    top_entropy_quantile: k["top_entropy_quantile"].as_f64().unwrap_or(1.0),
                    entropy_coef: ctl.applied(&s),
                    entropy_on: true,
                    ..TokenTerms::NONE
                };
                let lg = loss_and_grads_terms(
                    &policy,
                    &vars,
                    &refs,
                    chunk,
                    recompute,
                    Share::ALL,
                    plan,
                    shape,
                    terms,
                )
                .unwrap();
                check_grads(&what, &named, &lg.grads, call);
                let h = measured_entropy(&lg);
                let want_h = call["last_world_entropy"].as_f64().unwrap();
                assert!(
                    close(h, want_h, 1.0),
                    "{what}: measured entropy {h} vs TRL's {want_h}"
                );
                ctl.update(&s, h);
                let want = call["entropy_coef"].as_f64().unwrap();
                assert!(
                    (ctl.coef - want).abs() < 1e-12,
                    "{what}: coefficient {} vs TRL's {want}",
                    ctl.coef
                );
            }
        }
    }
}

/// Adaptive entropy control through the loop: the coefficient (logged as
/// `agent_<i>/entropy_coef`) grows step by step toward a target above the entropy, and a run
/// interrupted mid-buffer resumes from its checkpoint (which holds each agent's controller) to
/// the same metrics and weights as the uninterrupted one.
#[test]
fn adaptive_entropy_resumes_exactly() {
    use comlrl::train::Trainer;
    use common::tiny_run::{resume_matches, StopAt};
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let extra = [
        "checkpoint_every=4",
        "trainer.use_adaptive_entropy=true",
        "trainer.entropy_coef=0.01",
        "trainer.entropy_target=100",
        "trainer.entropy_coef_delta=0.002",
    ];
    let sa = Trainer::new(common::tiny_run::load_small(&a, &extra))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(sa.steps_done, 20);
    let rows = metrics(&a);
    for i in 0..2 {
        let coef: Vec<f64> = rows
            .iter()
            .map(|r| r[format!("agent_{i}/entropy_coef")].as_f64().unwrap())
            .collect();
        assert!(
            coef.windows(2).all(|w| w[1] > w[0]) && coef[0] > 0.01,
            "agent {i}: {coef:?}"
        );
    }
    let cp = a.join("checkpoints/step-00000020");
    for i in 0..2 {
        assert!(cp.join(format!("entropy_control.agent{i}.json")).is_file());
    }
    let mut t = Trainer::new(common::tiny_run::load_small(&b, &extra)).unwrap();
    let flag = t.interrupt_flag();
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    resume_matches(&a, &b, &extra);
}
