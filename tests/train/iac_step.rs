//! One IAC update round against CoMLRL 1.4.3's own `IACTrainer` (`actor_critic/iac_step_tiny.*`,
//! from `scripts/fixtures/make_actor_critic.py`): one agent on tiny Qwen2 in f32 with a separate
//! critic (a second tiny Qwen2 with CoMLRL's value head), four recorded rollouts (token ids and
//! rewards), two mini-batches of two in the order CoMLRL's shuffle ran them. V_old, targets,
//! advantages, every mini-batch's log-probs, values, actor and critic losses, and the weights
//! after the round (actor, critic backbone, head) must agree, for a V and a Q critic.
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::grad::value::ValueAt;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::actor_critic::actor::{actor_grads, ActorSample};
use comlrl::train::algorithms::actor_critic::advantage::advantages;
use comlrl::train::algorithms::actor_critic::critic::{
    head_vars, Clip, Critic, Row, ValueLoss, ValueOn,
};
use comlrl::train::algorithms::actor_critic::shared::{
    passes, shared_grads, Passes, SharedBatch, Two,
};
use comlrl::train::optim::{AdamW, AdamWConfig};
use comlrl::train::update::Share;
use common::*;
use std::collections::HashMap;

fn load() -> Policy {
    Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap()
}

fn nums(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// |a − b| ≤ 1e-5 · max(|b|, 1): relative agreement, absolute near 0.
fn snapshot(vars: &[(String, Var)]) -> HashMap<String, Tensor> {
    vars.iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
        .collect()
}

#[test]
fn one_update_round_matches_comlrl() {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("iac_step_tiny.json"));
    let t = load_st(&dir.join("iac_step_tiny.safetensors"));
    let rows: Vec<(Vec<u32>, Vec<Vec<u32>>)> = meta["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (ids(&r["prompt"]), vec![ids(&r["completion"])]))
        .collect();
    let rewards: Vec<f32> = nums(&meta["rewards"]).iter().map(|&r| r as f32).collect();
    let cfg = &meta["config"];
    let coef = cfg["value_loss_coef"].as_f64().unwrap();
    let adamw = |lr: &str| AdamWConfig {
        lr: cfg[lr].as_f64().unwrap(),
        ..AdamWConfig::default()
    };
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let mut cases = 0;
    for (key, case) in meta["cases"].as_object().unwrap() {
        cases += 1;
        let at = match case["critic_type"].as_str().unwrap() {
            "v" => ValueAt::PromptEnd,
            _ => ValueAt::SequenceEnd,
        };
        let actor = load();
        let prefix = format!("{key}.head.");
        let head = ValueHead::from_tensors(
            t.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
                .collect(),
            actor.config.hidden_size,
        )
        .unwrap();
        assert_eq!(
            head.hidden_dim(),
            case["critic_value_head_hidden_dim"]
                .as_u64()
                .map(|d| d as usize)
        );
        let critic = Critic {
            policy: load(),
            head,
            at,
        };
        let actor_named = actor.vars();
        let critic_named = critic.vars();
        let (actor_before, critic_before) = (snapshot(&actor_named), snapshot(&critic_named));
        let actor_vars: Vec<Var> = actor_named.iter().map(|(_, v)| v.clone()).collect();
        let critic_vars: Vec<Var> = critic_named.iter().map(|(_, v)| v.clone()).collect();
        let mut actor_opt = AdamW::new(actor_named.clone(), adamw("agent_learning_rate"));
        let mut critic_opt = AdamW::new(critic_named.clone(), adamw("critic_learning_rate"));

        // At rollout time: V_old, the targets (single turn: the reward), the advantages.
        let all: Vec<Row> = rows.iter().map(|(p, c)| (&p[..], &c[0][..])).collect();
        let old = critic.values(&all).unwrap();
        let old64: Vec<f64> = old.iter().map(|&v| v as f64).collect();
        close_all(
            &format!("{key} V_old"),
            &old64,
            &as_f64s(&t[&format!("{key}.old_values")]),
        );
        let (adv, norm) = advantages(&rewards, &old, true);
        let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        close_all(
            &format!("{key} advantages"),
            &as64(&adv),
            &as_f64s(&t[&format!("{key}.advantages")]),
        );
        close_all(
            &format!("{key} normalized advantages"),
            &as64(&norm),
            &as_f64s(&t[&format!("{key}.normalized_advantages")]),
        );

        // The update: each mini-batch's losses from the weights before its step, then AdamW.
        let steps = case["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "two mini-batches of two");
        for (s, step) in steps.iter().enumerate() {
            let idx: Vec<usize> = step["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            let samples: Vec<ActorSample> = idx
                .iter()
                .map(|&i| ActorSample {
                    prompt: &rows[i].0,
                    response: &rows[i].1,
                    advantage: norm[i],
                })
                .collect();
            let lg = actor_grads(&actor, &actor_vars, &samples, true, Share::ALL, plan).unwrap();
            close(
                &format!("{key} step {s} actor loss"),
                lg.loss,
                step["actor_loss"].as_f64().unwrap(),
            );
            let batch: Vec<Row> = idx.iter().map(|&i| all[i]).collect();
            let targets: Vec<f32> = idx.iter().map(|&i| rewards[i]).collect();
            let cg = critic
                .loss_and_grads(&batch, &targets, coef, &critic_vars, plan)
                .unwrap();
            close_all(
                &format!("{key} step {s} values"),
                &as64(&cg.values),
                &nums(&step["values"]),
            );
            close(
                &format!("{key} step {s} critic loss"),
                cg.loss,
                step["critic_loss"].as_f64().unwrap(),
            );
            actor_opt
                .step_grads(&lg.grads, actor_opt.cfg.lr, None)
                .unwrap();
            critic_opt
                .step_grads(&cg.grads, critic_opt.cfg.lr, None)
                .unwrap();
        }

        // The weights after the round: the head whole, a few backbone tensors whole, and every
        // backbone tensor's change by its norm.
        for (name, var) in critic.head.vars() {
            close_all(
                &format!("{key} head {name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(&t[&format!("{key}.after.head.{name}")]),
            );
        }
        for (which, named, before) in [
            ("actor", &actor_named, &actor_before),
            ("critic", &critic_named, &critic_before),
        ] {
            let deltas = case["update_delta_norms"][which].as_object().unwrap();
            let mut seen = 0;
            for (name, var) in named.iter() {
                if let Some(want) = t.get(&format!("{key}.after.{which}.{name}")) {
                    close_all(
                        &format!("{key} {which} {name} after"),
                        &as_f64s(var.as_tensor()),
                        &as_f64s(want),
                    );
                }
                let Some(want) = deltas.get(name) else {
                    assert!(
                        name.starts_with("value_head."),
                        "{which}: {name} not in the fixture"
                    );
                    continue;
                };
                seen += 1;
                if name.ends_with("k_proj.bias") {
                    // Its gradient is 0 up to rounding (q·b_k shifts every key's score alike,
                    // which the softmax ignores): AdamW's normalised step follows the noise.
                    continue;
                }
                let d: f64 = as_f64s(var.as_tensor())
                    .iter()
                    .zip(as_f64s(&before[name]))
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>()
                    .sqrt();
                let want = want.as_f64().unwrap();
                assert!(
                    (d - want).abs() <= 1e-3 * want + 1e-9,
                    "{key} {which} {name}: ‖Δ‖ {d} vs {want}"
                );
            }
            assert_eq!(seen, deltas.len(), "{key} {which}: every tensor compared");
        }
    }
    assert_eq!(cases, 2, "a V and a Q critic");
}

/// Shared mode (`use_separate_critic: False`, `actor_critic/iac_shared_tiny.*`): the value head
/// on the actor's backbone, one AdamW over both, the value clipped to V_old ± 0.2 (active for
/// some rows: the buffer's V_old are offset from the true values). The value gradient's backbone
/// part joins the actor's before the one step, in one backbone pass per sequence (the
/// algorithm's `shared_grads` as `passes` picks it; the two-pass sum is checked against it
/// below).
#[test]
fn a_shared_head_update_round_matches_comlrl() {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("iac_shared_tiny.json"));
    let t = load_st(&dir.join("iac_shared_tiny.safetensors"));
    let rows: Vec<(Vec<u32>, Vec<Vec<u32>>)> = meta["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (ids(&r["prompt"]), vec![ids(&r["completion"])]))
        .collect();
    let rewards: Vec<f32> = nums(&meta["rewards"]).iter().map(|&r| r as f32).collect();
    let cfg = &meta["config"];
    let coef = cfg["value_loss_coef"].as_f64().unwrap();
    let range = cfg["value_clip_range"].as_f64().unwrap();
    let lr = cfg["agent_learning_rate"].as_f64().unwrap();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let mut cases = 0;
    for (key, case) in meta["cases"].as_object().unwrap() {
        cases += 1;
        let at = match case["critic_type"].as_str().unwrap() {
            "v" => ValueAt::PromptEnd,
            _ => ValueAt::SequenceEnd,
        };
        let actor = load();
        let prefix = format!("{key}.head.");
        let head = ValueHead::from_tensors(
            t.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
                .collect(),
            actor.config.hidden_size,
        )
        .unwrap();
        let view = ValueOn {
            policy: &actor,
            head: &head,
            at,
        };
        let actor_named = actor.vars();
        let before = snapshot(&actor_named);
        let mut named = actor_named.clone();
        named.extend(head_vars(&head));
        let actor_vars: Vec<Var> = actor_named.iter().map(|(_, v)| v.clone()).collect();
        let head_only: Vec<Var> = head_vars(&head).into_iter().map(|(_, v)| v).collect();
        let mut opt = AdamW::new(
            named,
            AdamWConfig {
                lr,
                ..AdamWConfig::default()
            },
        );
        let all: Vec<Row> = rows.iter().map(|(p, c)| (&p[..], &c[0][..])).collect();
        close_all(
            &format!("{key} values at rollout"),
            &as64(&view.values(&all).unwrap()),
            &as_f64s(&t[&format!("{key}.true_values")]),
        );
        let old: Vec<f32> = as_f64s(&t[&format!("{key}.old_values")])
            .iter()
            .map(|&x| x as f32)
            .collect();
        let (adv, norm) = advantages(&rewards, &old, true);
        close_all(
            &format!("{key} advantages"),
            &as64(&adv),
            &as_f64s(&t[&format!("{key}.advantages")]),
        );
        close_all(
            &format!("{key} normalized advantages"),
            &as64(&norm),
            &as_f64s(&t[&format!("{key}.normalized_advantages")]),
        );
        let mut clipped = 0;
        for (s, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let idx: Vec<usize> = step["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            let samples: Vec<ActorSample> = idx
                .iter()
                .map(|&i| ActorSample {
                    prompt: &rows[i].0,
                    response: &rows[i].1,
                    advantage: norm[i],
                })
                .collect();
            let batch: Vec<Row> = idx.iter().map(|&i| all[i]).collect();
            let targets: Vec<f32> = idx.iter().map(|&i| rewards[i]).collect();
            let batch_old: Vec<f32> = idx.iter().map(|&i| old[i]).collect();
            let shared = SharedBatch {
                view,
                samples: &samples,
                rows: &batch,
                loss: ValueLoss {
                    targets: &targets,
                    coef,
                    clip: Some(Clip {
                        old: &batch_old,
                        range,
                    }),
                },
            };
            let how = passes(&samples, &batch, at, true, Share::ALL);
            assert_eq!(how, Passes::Joined, "{key}: one pass serves V and Q here");
            let (lg, cg) = shared_grads(
                &shared,
                &actor_vars,
                &head_only,
                true,
                Share::ALL,
                plan,
                how,
            )
            .unwrap();
            close(
                &format!("{key} step {s} actor loss"),
                lg.loss,
                step["actor_loss"].as_f64().unwrap(),
            );
            close_all(
                &format!("{key} step {s} values"),
                &as64(&cg.values),
                &nums(&step["values"]),
            );
            for (v, o) in cg.values.iter().zip(&batch_old) {
                clipped += usize::from(((v - o) as f64).abs() > range);
            }
            close(
                &format!("{key} step {s} critic loss"),
                cg.loss,
                step["critic_loss"].as_f64().unwrap(),
            );
            // One AdamW over the backbone (the actor's and the value's gradient) and the head.
            let mut grads = lg.grads;
            grads.extend(cg.grads);
            opt.step_grads(&grads, lr, None).unwrap();
        }
        assert!(
            clipped >= 2,
            "{key}: the clip was active for {clipped} rows"
        );
        for (name, var) in head.vars() {
            close_all(
                &format!("{key} head {name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(&t[&format!("{key}.after.head.{name}")]),
            );
        }
        let deltas = case["update_delta_norms"]["actor"].as_object().unwrap();
        assert_eq!(deltas.len(), actor_named.len());
        for (name, var) in &actor_named {
            if let Some(want) = t.get(&format!("{key}.after.actor.{name}")) {
                close_all(
                    &format!("{key} actor {name} after"),
                    &as_f64s(var.as_tensor()),
                    &as_f64s(want),
                );
            }
            if name.ends_with("k_proj.bias") {
                continue;
            }
            let d: f64 = as_f64s(var.as_tensor())
                .iter()
                .zip(as_f64s(&before[name]))
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                .sqrt();
            let want = deltas[name].as_f64().unwrap();
            assert!(
                (d - want).abs() <= 1e-3 * want + 1e-9,
                "{key} actor {name}: ‖Δ‖ {d} vs {want}"
            );
        }
    }
    assert_eq!(cases, 2, "a V and a Q head");
}

/// ‖a − b‖ / ‖b‖ of two gradients, and ‖b‖.
fn rel_diff(a: &Tensor, b: &Tensor) -> (f64, f64) {
    let (a, b) = (as_f64s(a), as_f64s(b));
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>();
    let n = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    (d.sqrt() / n.max(f64::MIN_POSITIVE), n)
}

/// The shared head's one backbone pass per sequence gives the two passes' numbers (they are
/// mathematically the same): on the shared fixture's weights and mini-batches, V and Q heads,
/// the clip active for some rows, the actor loss, the values, the value loss and every
/// gradient (backbone: actor + value; head) within 1e-5 relative. V stays joined when CoMLRL's
/// pad cut shortens the responses (its row is the last prompt token); Q then takes two passes.
#[test]
fn a_shared_head_one_pass_equals_two_passes() {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("iac_shared_tiny.json"));
    let t = load_st(&dir.join("iac_shared_tiny.safetensors"));
    let rows: Vec<(Vec<u32>, Vec<Vec<u32>>)> = meta["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (ids(&r["prompt"]), vec![ids(&r["completion"])]))
        .collect();
    let rewards: Vec<f32> = nums(&meta["rewards"]).iter().map(|&r| r as f32).collect();
    let cfg = &meta["config"];
    let coef = cfg["value_loss_coef"].as_f64().unwrap();
    let range = cfg["value_clip_range"].as_f64().unwrap();
    let actor = load();
    let actor_named = actor.vars();
    let actor_vars: Vec<Var> = actor_named.iter().map(|(_, v)| v.clone()).collect();
    // Responses as CoMLRL's pad cut leaves them: the last token dropped (the EOS where the
    // pad is the EOS), so V's row stays inside the actor's sequence and Q's does not.
    let cut: Vec<Vec<Vec<u32>>> = rows
        .iter()
        .map(|(_, c)| vec![c[0][..c[0].len() - 1].to_vec()])
        .collect();
    let plans = [
        PassPlan::rerun_all(ComputeDtype::F32),
        PassPlan {
            keep_bytes: 1 << 30,
            ..PassPlan::rerun_all(ComputeDtype::F32)
        },
    ];
    let (mut compared, mut clipped) = (0, 0);
    for (key, case) in meta["cases"].as_object().unwrap() {
        let at = match case["critic_type"].as_str().unwrap() {
            "v" => ValueAt::PromptEnd,
            _ => ValueAt::SequenceEnd,
        };
        let prefix = format!("{key}.head.");
        let head = ValueHead::from_tensors(
            t.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
                .collect(),
            actor.config.hidden_size,
        )
        .unwrap();
        let head_named = head_vars(&head);
        let head_only: Vec<Var> = head_named.iter().map(|(_, v)| v.clone()).collect();
        let view = ValueOn {
            policy: &actor,
            head: &head,
            at,
        };
        let old: Vec<f32> = as_f64s(&t[&format!("{key}.old_values")])
            .iter()
            .map(|&x| x as f32)
            .collect();
        let (_, norm) = advantages(&rewards, &old, true);
        let all: Vec<Row> = rows.iter().map(|(p, c)| (&p[..], &c[0][..])).collect();
        for step in case["steps"].as_array().unwrap() {
            let idx: Vec<usize> = step["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            let batch: Vec<Row> = idx.iter().map(|&i| all[i]).collect();
            let targets: Vec<f32> = idx.iter().map(|&i| rewards[i]).collect();
            let batch_old: Vec<f32> = idx.iter().map(|&i| old[i]).collect();
            for (responses, pad_cut) in [(&None, false), (&Some(&cut), true)] {
                let samples: Vec<ActorSample> = idx
                    .iter()
                    .map(|&i| ActorSample {
                        prompt: &rows[i].0,
                        response: match responses {
                            Some(cut) => &cut[i],
                            None => &rows[i].1,
                        },
                        advantage: norm[i],
                    })
                    .collect();
                let how = passes(&samples, &batch, at, true, Share::ALL);
                if pad_cut && at == ValueAt::SequenceEnd {
                    assert_eq!(how, Passes::Two(Two::ValueRowCut), "{key}");
                    continue;
                }
                assert_eq!(how, Passes::Joined, "{key}, pad cut {pad_cut}");
                assert_eq!(
                    passes(&samples, &batch, at, false, Share::ALL),
                    Passes::Two(Two::Autograd)
                );
                for plan in plans {
                    let what = format!("{key}, pad cut {pad_cut}, {plan:?}");
                    let shared = SharedBatch {
                        view,
                        samples: &samples,
                        rows: &batch,
                        loss: ValueLoss {
                            targets: &targets,
                            coef,
                            clip: Some(Clip {
                                old: &batch_old,
                                range,
                            }),
                        },
                    };
                    let run = |how| {
                        shared_grads(
                            &shared,
                            &actor_vars,
                            &head_only,
                            true,
                            Share::ALL,
                            plan,
                            how,
                        )
                        .unwrap()
                    };
                    let (one_lg, one_cg) = run(Passes::Joined);
                    let (two_lg, two_cg) = run(Passes::Two(Two::ValueRowCut));
                    close(&format!("{what}: actor loss"), one_lg.loss, two_lg.loss);
                    close(&format!("{what}: value loss"), one_cg.loss, two_cg.loss);
                    let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
                    close_all(
                        &format!("{what}: values"),
                        &as64(&one_cg.values),
                        &as64(&two_cg.values),
                    );
                    for (v, o) in one_cg.values.iter().zip(&batch_old) {
                        clipped += usize::from(((v - o) as f64).abs() > range);
                    }
                    let names = actor_named.iter().chain(&head_named).map(|(n, _)| n);
                    let one = one_lg.grads.iter().chain(&one_cg.grads);
                    let two = two_lg.grads.iter().chain(&two_cg.grads);
                    assert_eq!(one_cg.grads.len(), head_only.len(), "{what}: head only");
                    for ((name, a), b) in names.zip(one).zip(two) {
                        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
                        let (rel, size) = rel_diff(a, b);
                        assert!(
                            rel < 1e-5,
                            "{what}: {name} off by {rel} (relative; ‖b‖ {size})"
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared > 0);
    assert!(clipped >= 2, "the clip was active for {clipped} rows");
}
