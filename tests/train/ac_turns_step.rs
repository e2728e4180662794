//! Multi-turn actor-critic against CoMLRL 1.4.3's own code (`actor_critic/ac_turns_tiny.*`, from
//! `scripts/fixtures/make_actor_critic.py`): three episodes of up to two turns rolled out by
//! CoMLRL's `_collect_rollouts_multi_turn` (recorded completions, a deterministic transition,
//! γ 0.9, the third episode ended early by the −0.2 threshold) and one drain of its buffers
//! (`_process_buffer`: turn after turn, each its own advantages and mini-batches). V_old, the
//! TD(0) targets, the per-turn advantages, every step's log-probs, values and losses, and the
//! weights after the round must agree, for IAC with a separate V and Q critic, IAC with a
//! shared V head (value clipping on), and MAAC with a V critic (`compat_critic_steps`).
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::grad::value::ValueAt;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::actor_critic::actor::{actor_grads, ActorSample};
use comlrl::train::algorithms::actor_critic::advantage::advantages;
use comlrl::train::algorithms::actor_critic::critic::{head_vars, Clip, Critic, Row, ValueOn};
use comlrl::train::algorithms::actor_critic::targets::{td_targets, turn_groups};
use comlrl::train::algorithms::maac::central::{critic_round, Central, CriticRound};
use comlrl::train::algorithms::maac::joint::joint_ids;
use comlrl::train::optim::{AdamW, AdamWConfig};
use comlrl::train::rollout::{AgentRollout, NodeSample};
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

fn as64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// A model's name in the fixture, its tensors, and their values before the round.
type Model<'a> = (&'a str, &'a [(String, Var)], &'a HashMap<String, Tensor>);

fn snapshot(vars: &[(String, Var)]) -> HashMap<String, Tensor> {
    vars.iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().copy().unwrap()))
        .collect()
}

/// One agent's buffer as the fixture recorded it.
struct Sample {
    turn: usize,
    prompt: Vec<u32>,
    completion: Vec<Vec<u32>>,
    text: String,
    reward: f32,
    field: serde_json::Value,
}

fn samples(case: &serde_json::Value, agent: usize) -> Vec<Sample> {
    case["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["agent"].as_u64().unwrap() as usize == agent)
        .map(|s| Sample {
            turn: s["turn"].as_u64().unwrap() as usize,
            prompt: ids(&s["prompt"]),
            completion: vec![ids(&s["completion"])],
            text: s["text"].as_str().unwrap().to_string(),
            reward: s["reward"].as_f64().unwrap() as f32,
            field: s.clone(),
        })
        .collect()
}

fn field(s: &[Sample], name: &str) -> Vec<f64> {
    s.iter().map(|x| x.field[name].as_f64().unwrap()).collect()
}

/// The TD targets and the advantages (z-scored per turn) as the algorithms form them, checked
/// against the fixture's; returns (targets, normalised advantages).
fn targets_and_advantages(
    what: &str,
    s: &[Sample],
    old: &[f32],
    gamma: f64,
) -> (Vec<f32>, Vec<f32>) {
    let turns: Vec<usize> = s.iter().map(|x| x.turn).collect();
    let rewards: Vec<f32> = s.iter().map(|x| x.reward).collect();
    let targets = td_targets(&turns, &rewards, old, gamma);
    close_all(
        &format!("{what} targets"),
        &as64(&targets),
        &field(s, "target"),
    );
    let (mut adv, mut norm) = (vec![0f32; s.len()], vec![0f32; s.len()]);
    let groups = turn_groups(&turns);
    assert_eq!(groups.len(), 2, "{what}: two turns");
    for (_, idx) in &groups {
        let t: Vec<f32> = idx.iter().map(|&j| targets[j]).collect();
        let o: Vec<f32> = idx.iter().map(|&j| old[j]).collect();
        let (a, z) = advantages(&t, &o, true);
        for (k, &j) in idx.iter().enumerate() {
            (adv[j], norm[j]) = (a[k], z[k]);
        }
    }
    close_all(
        &format!("{what} advantages"),
        &as64(&adv),
        &field(s, "advantage"),
    );
    close_all(
        &format!("{what} normalized advantages"),
        &as64(&norm),
        &field(s, "normalized_advantage"),
    );
    (targets, norm)
}

fn head_of(t: &HashMap<String, Tensor>, key: &str, hidden: usize) -> ValueHead {
    let prefix = format!("{key}.head.");
    ValueHead::from_tensors(
        t.iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
            .collect(),
        hidden,
    )
    .unwrap()
}

fn step_rows(step: &serde_json::Value) -> Vec<usize> {
    step["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as usize)
        .collect()
}

/// The weights after the round: the head whole, a few backbone tensors whole, every backbone
/// tensor's change by its norm.
fn check_after(
    key: &str,
    case: &serde_json::Value,
    t: &HashMap<String, Tensor>,
    head: &ValueHead,
    models: &[Model],
) {
    for (name, var) in head.vars() {
        close_all(
            &format!("{key} head {name} after"),
            &as_f64s(var.as_tensor()),
            &as_f64s(&t[&format!("{key}.after.head.{name}")]),
        );
    }
    for &(which, named, before) in models {
        let deltas = case["update_delta_norms"][which].as_object().unwrap();
        let mut seen = 0;
        for (name, var) in named {
            if let Some(want) = t.get(&format!("{key}.after.{which}.{name}")) {
                close_all(
                    &format!("{key} {which} {name} after"),
                    &as_f64s(var.as_tensor()),
                    &as_f64s(want),
                );
            }
            let Some(want) = deltas.get(name) else {
                assert!(name.starts_with("value_head."), "{which}: {name}");
                continue;
            };
            seen += 1;
            if name.ends_with("k_proj.bias") {
                // Its gradient is 0 up to rounding: AdamW's normalised step follows the noise.
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

fn fixture() -> (serde_json::Value, HashMap<String, Tensor>) {
    let dir = fixtures().join("actor_critic");
    (
        json(&dir.join("ac_turns_tiny.json")),
        load_st(&dir.join("ac_turns_tiny.safetensors")),
    )
}

#[test]
fn iac_two_turn_rounds_match_comlrl() {
    let (meta, t) = fixture();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let mut cases = 0;
    for (key, case) in meta["cases"].as_object().unwrap() {
        if case["algorithm"] != "iac" {
            continue;
        }
        cases += 1;
        let cfg = &case["config"];
        let gamma = cfg["discount"].as_f64().unwrap();
        let coef = cfg["value_loss_coef"].as_f64().unwrap();
        let separate = case["separate"].as_bool().unwrap();
        let at = match case["critic_type"].as_str().unwrap() {
            "v" => ValueAt::PromptEnd,
            _ => ValueAt::SequenceEnd,
        };
        let s = samples(case, 0);
        assert_eq!(s.len(), 5, "two episodes of two turns, one of one");
        let actor = load();
        let head = head_of(&t, key, actor.config.hidden_size);
        let own = separate.then(load);
        let view = ValueOn {
            policy: own.as_ref().unwrap_or(&actor),
            head: &head,
            at,
        };
        let adamw = |lr: &str| AdamWConfig {
            lr: cfg[lr].as_f64().unwrap(),
            ..AdamWConfig::default()
        };
        let actor_named = actor.vars();
        let actor_before = snapshot(&actor_named);
        let actor_vars: Vec<Var> = actor_named.iter().map(|(_, v)| v.clone()).collect();
        // Separate: the critic's backbone and head under its own AdamW; shared: the actor's
        // AdamW over its backbone and the head.
        let mut critic_named = own.as_ref().map(Policy::vars).unwrap_or_default();
        critic_named.extend(head_vars(&head));
        let critic_before = snapshot(&critic_named);
        let value_vars: Vec<Var> = match separate {
            true => critic_named.iter().map(|(_, v)| v.clone()).collect(),
            false => actor_vars
                .iter()
                .cloned()
                .chain(head_vars(&head).into_iter().map(|(_, v)| v))
                .collect(),
        };
        let mut actor_opt = match separate {
            true => AdamW::new(actor_named.clone(), adamw("agent_learning_rate")),
            false => {
                let mut all = actor_named.clone();
                all.extend(head_vars(&head));
                AdamW::new(all, adamw("agent_learning_rate"))
            }
        };
        let mut critic_opt = AdamW::new(critic_named.clone(), adamw("critic_learning_rate"));

        // V_old of every buffered turn (the critic of the rollouts), then TD(0) targets.
        let all: Vec<Row> = s
            .iter()
            .map(|x| (&x.prompt[..], &x.completion[0][..]))
            .collect();
        let old = view.values(&all).unwrap();
        close_all(
            &format!("{key} V_old"),
            &as64(&old),
            &field(&s, "old_value"),
        );
        let (targets, norm) = targets_and_advantages(key, &s, &old, gamma);

        let steps = case["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3, "turn 0: two mini-batches, turn 1: one");
        for (n, step) in steps.iter().enumerate() {
            let idx = step_rows(step);
            let turn = step["turn"].as_u64().unwrap() as usize;
            assert!(idx.iter().all(|&j| s[j].turn == turn), "{key} step {n}");
            let batch: Vec<ActorSample> = idx
                .iter()
                .map(|&j| ActorSample {
                    prompt: &s[j].prompt,
                    response: &s[j].completion,
                    advantage: norm[j],
                })
                .collect();
            let lg = actor_grads(&actor, &actor_vars, &batch, true, Share::ALL, plan).unwrap();
            close(
                &format!("{key} step {n} actor loss"),
                lg.loss,
                step["actor_loss"].as_f64().unwrap(),
            );
            let rows: Vec<Row> = idx.iter().map(|&j| all[j]).collect();
            let tg: Vec<f32> = idx.iter().map(|&j| targets[j]).collect();
            let o: Vec<f32> = idx.iter().map(|&j| old[j]).collect();
            let clip = (!separate).then(|| Clip {
                old: &o,
                range: cfg["value_clip_range"].as_f64().unwrap(),
            });
            let cg = view
                .loss_and_grads(&rows, &tg, coef, clip, &value_vars, plan)
                .unwrap();
            close_all(
                &format!("{key} step {n} values"),
                &as64(&cg.values),
                &nums(&step["values"]),
            );
            close(
                &format!("{key} step {n} critic loss"),
                cg.loss,
                step["critic_loss"].as_f64().unwrap(),
            );
            if separate {
                actor_opt
                    .step_grads(&lg.grads, actor_opt.cfg.lr, None)
                    .unwrap();
                critic_opt
                    .step_grads(&cg.grads, critic_opt.cfg.lr, None)
                    .unwrap();
            } else {
                // The backbone's value gradient joins the actor's; the head's follows.
                let k = actor_vars.len();
                let mut grads: Vec<Option<Tensor>> = lg
                    .grads
                    .into_iter()
                    .zip(cg.grads[..k].iter().cloned())
                    .map(|(a, b)| match (a, b) {
                        (Some(a), Some(b)) => Some((a + b).unwrap()),
                        (a, b) => a.or(b),
                    })
                    .collect();
                grads.extend(cg.grads[k..].iter().cloned());
                actor_opt
                    .step_grads(&grads, actor_opt.cfg.lr, None)
                    .unwrap();
            }
        }
        let mut models: Vec<Model> = vec![("actor0", &actor_named, &actor_before)];
        if separate {
            models.push(("critic", &critic_named, &critic_before));
        }
        check_after(key, case, &t, &head, &models);
    }
    assert_eq!(cases, 3, "separate V and Q, shared V");
}

fn nums(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn maac_two_turn_round_matches_comlrl() {
    let (meta, t) = fixture();
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let key = "maac.v";
    let case = &meta["cases"][key];
    let cfg = &case["config"];
    let gamma = cfg["discount"].as_f64().unwrap();
    let per_agent: Vec<Vec<Sample>> = (0..2).map(|a| samples(case, a)).collect();
    // The buffer's nodes: each agent's samples side by side (the same episodes and turns).
    let buffer: Vec<NodeSample> = (0..per_agent[0].len())
        .map(|j| {
            assert_eq!(per_agent[0][j].turn, per_agent[1][j].turn);
            NodeSample {
                turn: per_agent[0][j].turn,
                agents: per_agent
                    .iter()
                    .map(|s| {
                        let x = &s[j];
                        let mut r = AgentRollout::sampled(
                            x.prompt.clone(),
                            x.completion.clone(),
                            vec![x.text.clone()],
                        );
                        r.returns = vec![x.reward];
                        r.advantages = r.returns.clone();
                        r
                    })
                    .collect(),
                rewards: vec![per_agent[0][j].reward],
                components: vec![],
            }
        })
        .collect();
    let actors = [load(), load()];
    let critic = Critic {
        policy: load(),
        head: head_of(&t, key, actors[0].config.hidden_size),
        at: ValueAt::PromptEnd,
    };
    let critic_named = critic.vars();
    let critic_before = snapshot(&critic_named);
    let lr = |name: &str| cfg[name].as_f64().unwrap();
    let opt = AdamW::new(
        critic_named.clone(),
        AdamWConfig {
            lr: lr("critic_learning_rate"),
            ..AdamWConfig::default()
        },
    );
    let mut central = Central {
        critic,
        opt,
        spec: "tiny-qwen2".into(),
    };
    let policies: Vec<&Policy> = actors.iter().collect();
    let joint = joint_ids(&buffer, &policies, 1, false, 2048).unwrap();
    for (j, x) in per_agent[0].iter().enumerate() {
        assert_eq!(
            joint[j],
            ids(&x.field["joint_ids"]),
            "node {j}: the critic's ids"
        );
    }
    let rows: Vec<Row> = joint.iter().map(|v| (&v[..], &[][..])).collect();
    let old = central.critic.values(&rows).unwrap();
    let mut targets = Vec::new();
    let mut norms = Vec::new();
    for (a, s) in per_agent.iter().enumerate() {
        close_all(
            &format!("agent {a} V_old"),
            &as64(&old),
            &field(s, "old_value"),
        );
        let (tg, norm) = targets_and_advantages(&format!("agent {a}"), s, &old, gamma);
        targets.push(tg);
        norms.push(norm);
    }
    // One mini-batch per turn (train_batch_size 3 holds each turn's rows), turn 0's first.
    let turns: Vec<usize> = buffer.iter().map(|n| n.turn).collect();
    let batches: Vec<Vec<usize>> = turn_groups(&turns).into_iter().map(|(_, i)| i).collect();
    let critic_lr = |_: usize| lr("critic_learning_rate");
    let how = CriticRound {
        coef: cfg["value_loss_coef"].as_f64().unwrap(),
        compat: true,
        plan,
        max_grad_norm: None,
        lr: &critic_lr,
    };
    let steps = case["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "two agents × two turns");
    // The critic's round one agent at a time, each mini-batch's rows in the order CoMLRL's
    // shuffle left them: AdamW's first steps turn the rounding of near-zero gradients (which
    // the order of a mean's terms moves) into whole steps, so the orders must match for 1e-5.
    let mut ours = Vec::new();
    for (a, agent_targets) in targets.iter().enumerate() {
        let agent_batches: Vec<Vec<usize>> = steps
            .iter()
            .filter(|s| s["agent"].as_u64().unwrap() as usize == a)
            .map(step_rows)
            .collect();
        for (b, rows_b) in agent_batches.iter().enumerate() {
            let mut sorted = rows_b.clone();
            sorted.sort();
            assert_eq!(
                sorted, batches[b],
                "agent {a}: CoMLRL's mini-batch {b} is turn {b}'s rows"
            );
        }
        let one = [agent_targets.clone()];
        for mut st in critic_round(&mut central, &rows, &one, &agent_batches, &how).unwrap() {
            st.agent = Some(a);
            ours.push((agent_batches[st.batch].clone(), st));
        }
    }
    assert_eq!(
        ours.len(),
        4,
        "CoMLRL's critic steps: one per agent and mini-batch"
    );
    let actor_named: Vec<Vec<(String, Var)>> = actors.iter().map(Policy::vars).collect();
    let before: Vec<HashMap<String, Tensor>> = actor_named.iter().map(|v| snapshot(v)).collect();
    let mut opts: Vec<AdamW> = actor_named
        .iter()
        .map(|n| {
            AdamW::new(
                n.clone(),
                AdamWConfig {
                    lr: lr("agent_learning_rate"),
                    ..AdamWConfig::default()
                },
            )
        })
        .collect();
    let mut scale = 1f64;
    for (n, step) in steps.iter().enumerate() {
        let a = step["agent"].as_u64().unwrap() as usize;
        let turn = step["turn"].as_u64().unwrap() as usize;
        let (order, ours) = &ours[n];
        assert_eq!(ours.agent, Some(a));
        assert_eq!(order, &step_rows(step));
        assert!(
            order.iter().all(|&j| turns[j] == turn),
            "step {n}: turn {turn}"
        );
        // Relative to the largest value the round has read: the critic's steps at lr 2e-3 move
        // its values from about −0.1 to −2 and back, so a later value near 0 is a difference of
        // terms of that size, and carries their f32 rounding (1.6e-5 at most here).
        let want = nums(&step["values"]);
        for (j, (v, w)) in ours.values.iter().zip(&want).enumerate() {
            assert!(
                (*v as f64 - w).abs() <= 1e-5 * w.abs().max(scale),
                "step {n} value {j}: {v} vs {w} (scale {scale})"
            );
        }
        scale = want.iter().fold(scale, |m, w| m.max(w.abs()));
        close(
            &format!("step {n} critic loss"),
            ours.loss,
            step["critic_loss"].as_f64().unwrap(),
        );
        let vars: Vec<Var> = actor_named[a].iter().map(|(_, v)| v.clone()).collect();
        let samples: Vec<ActorSample> = order
            .iter()
            .map(|&j| ActorSample {
                prompt: &buffer[j].agents[a].prompt_ids,
                response: &buffer[j].agents[a].completions,
                advantage: norms[a][j],
            })
            .collect();
        let lg = actor_grads(&actors[a], &vars, &samples, true, Share::ALL, plan).unwrap();
        close(
            &format!("step {n} actor loss"),
            lg.loss,
            step["actor_loss"].as_f64().unwrap(),
        );
        let lr = opts[a].cfg.lr;
        opts[a].step_grads(&lg.grads, lr, None).unwrap();
    }
    check_after(
        key,
        case,
        &t,
        &central.critic.head,
        &[
            ("actor0", &actor_named[0], &before[0]),
            ("actor1", &actor_named[1], &before[1]),
            ("critic", &critic_named, &critic_before),
        ],
    );
}
