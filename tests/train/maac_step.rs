//! One MAAC update round against CoMLRL 1.4.3's own `MAACTrainer` (`actor_critic/maac_step_tiny.*`,
//! from `scripts/fixtures/make_actor_critic.py`): two agents on tiny Qwen2 in f32, one critic (a
//! third tiny Qwen2 with CoMLRL's value head), three recorded joint rollouts (texts, token ids,
//! per-agent rewards), one mini-batch per agent, `compat_critic_steps` on (CoMLRL steps the
//! critic once per agent). The critic's joint token ids, V_old, each agent's advantages, every
//! step's log-probs, values, actor and critic losses, and the weights after the round (both
//! actors, critic backbone, head) must agree, for a V and a Q critic.
use crate::common;
use candle_core::{Tensor, Var};
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::grad::value::ValueAt;
use comlrl::model::{ComputeDtype, LoadOptions, ModelSource, Policy, ValueHead};
use comlrl::train::algorithms::actor_critic::actor::{actor_grads, ActorSample};
use comlrl::train::algorithms::actor_critic::advantage::advantages;
use comlrl::train::algorithms::actor_critic::critic::{Critic, Row};
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

fn as64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The fixture's recorded joint rollouts as the buffer holds them (one completion per agent,
/// agent a's return its reward of the node).
fn buffer(meta: &serde_json::Value, case: &serde_json::Value) -> Vec<NodeSample> {
    let rewards: Vec<Vec<f64>> = meta["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .map(nums)
        .collect();
    let nodes = meta["nodes"].as_array().unwrap();
    let rows = case["rows"].as_array().unwrap();
    nodes
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(n, (node, row))| NodeSample {
            turn: 0,
            agents: (0..2)
                .map(|a| {
                    let text = node["completions"][a].as_str().unwrap().to_string();
                    let mut r = AgentRollout::sampled(
                        ids(&row[a]["prompt"]),
                        vec![ids(&row[a]["completion"])],
                        vec![text],
                    );
                    r.returns = vec![rewards[a][n] as f32];
                    r.advantages = r.returns.clone();
                    r
                })
                .collect(),
            rewards: vec![rewards[0][n] as f32],
            components: vec![],
        })
        .collect()
}

#[test]
fn one_update_round_matches_comlrl() {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("maac_step_tiny.json"));
    let t = load_st(&dir.join("maac_step_tiny.safetensors"));
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
        let q = case["critic_type"].as_str().unwrap() == "q";
        let actors = [load(), load()];
        let prefix = format!("{key}.head.");
        let head = ValueHead::from_tensors(
            t.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.clone())))
                .collect(),
            actors[0].config.hidden_size,
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
            at: ValueAt::PromptEnd,
        };
        let critic_named = critic.vars();
        let opt = AdamW::new(critic_named.clone(), adamw("critic_learning_rate"));
        let mut central = Central {
            critic,
            opt,
            spec: "tiny-qwen2".into(),
        };
        let actor_named: Vec<Vec<(String, Var)>> = actors.iter().map(Policy::vars).collect();
        let before: Vec<HashMap<String, Tensor>> =
            actor_named.iter().map(|v| snapshot(v)).collect();
        let critic_before = snapshot(&critic_named);

        // The critic's input: the joint text of the prompts (decoded from the agents' ids) and,
        // for Q, the joint action, in agent 0's tokens.
        let buf = buffer(&meta, case);
        let policies: Vec<&Policy> = actors.iter().collect();
        let joint = joint_ids(&buf, &policies, 1, q, 2048).unwrap();
        for (n, want) in case["joint_ids"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                joint[n],
                ids(want),
                "{key} node {n}: the critic's token ids"
            );
        }
        let rows: Vec<Row> = joint.iter().map(|v| (&v[..], &[][..])).collect();

        // At rollout time: V_old, then each agent's targets and advantages.
        let old = central.critic.values(&rows).unwrap();
        close_all(
            &format!("{key} V_old"),
            &as64(&old),
            &as_f64s(&t[&format!("{key}.old_values")]),
        );
        let targets: Vec<Vec<f32>> = (0..2)
            .map(|a| buf.iter().map(|s| s.agents[a].returns[0]).collect())
            .collect();
        let adv: Vec<(Vec<f32>, Vec<f32>)> = targets
            .iter()
            .map(|tg| advantages(tg, &old, true))
            .collect();
        for (a, (raw, norm)) in adv.iter().enumerate() {
            close_all(
                &format!("{key} agent {a} advantages"),
                &as64(raw),
                &as_f64s(&t[&format!("{key}.agent{a}.advantages")]),
            );
            close_all(
                &format!("{key} agent {a} normalized advantages"),
                &as64(norm),
                &as_f64s(&t[&format!("{key}.agent{a}.normalized_advantages")]),
            );
        }

        // The critic's round, CoMLRL's way: one step per agent on the one mini-batch.
        let steps = case["steps"].as_array().unwrap();
        assert_eq!(
            steps.len(),
            2,
            "one mini-batch per agent, agent after agent"
        );
        let lr = |_: usize| central_lr(cfg);
        let how = CriticRound {
            coef,
            compat: true,
            plan,
            max_grad_norm: None,
            lr: &lr,
        };
        let batches = vec![vec![0, 1, 2]];
        let ours = critic_round(&mut central, &rows, &targets, &batches, &how).unwrap();
        assert_eq!(ours.len(), 2, "{key}: N critic steps per mini-batch");
        for (s, step) in steps.iter().enumerate() {
            let a = step["agent"].as_u64().unwrap() as usize;
            assert_eq!(ours[s].agent, Some(a));
            let order: Vec<usize> = step["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            let values: Vec<f64> = order.iter().map(|&j| ours[s].values[j] as f64).collect();
            close_all(
                &format!("{key} step {s} values"),
                &values,
                &nums(&step["values"]),
            );
            close(
                &format!("{key} step {s} critic loss"),
                ours[s].loss,
                step["critic_loss"].as_f64().unwrap(),
            );
            // The actor's step (it reads no value of the critic's: its order is free).
            let (actor, named) = (&actors[a], &actor_named[a]);
            let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
            let samples: Vec<ActorSample> = order
                .iter()
                .map(|&j| ActorSample {
                    prompt: &buf[j].agents[a].prompt_ids,
                    response: &buf[j].agents[a].completions,
                    advantage: adv[a].1[j],
                })
                .collect();
            let lg = actor_grads(actor, &vars, &samples, true, Share::ALL, plan).unwrap();
            close(
                &format!("{key} step {s} actor loss"),
                lg.loss,
                step["actor_loss"].as_f64().unwrap(),
            );
            let mut opt = AdamW::new(named.clone(), adamw("agent_learning_rate"));
            opt.step_grads(&lg.grads, opt.cfg.lr, None).unwrap();
        }

        // The weights after the round: the head whole, a few backbone tensors whole, and every
        // backbone tensor's change by its norm.
        for (name, var) in central.critic.head.vars() {
            close_all(
                &format!("{key} head {name} after"),
                &as_f64s(var.as_tensor()),
                &as_f64s(&t[&format!("{key}.after.head.{name}")]),
            );
        }
        let models = [
            ("actor0", &actor_named[0], &before[0]),
            ("actor1", &actor_named[1], &before[1]),
            ("critic", &critic_named, &critic_before),
        ];
        for (which, named, before) in models {
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

fn central_lr(cfg: &serde_json::Value) -> f64 {
    cfg["critic_learning_rate"].as_f64().unwrap()
}

/// The fix (`compat_critic_steps: false`): one critic step per mini-batch on every agent's
/// targets, its loss the mean of the agents' parts, each part what that agent's own step would
/// have read from the same critic.
#[test]
fn the_fixed_critic_takes_one_step_per_mini_batch_on_every_agents_targets() {
    let dir = fixtures().join("actor_critic");
    let meta = json(&dir.join("maac_step_tiny.json"));
    let t = load_st(&dir.join("maac_step_tiny.safetensors"));
    let case = &meta["cases"]["maac.v"];
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let central = || {
        let policy = load();
        let head = ValueHead::from_tensors(
            t.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("maac.v.head.")?.to_string(), v.clone())))
                .collect(),
            policy.config.hidden_size,
        )
        .unwrap();
        let critic = Critic {
            policy,
            head,
            at: ValueAt::PromptEnd,
        };
        let opt = AdamW::new(critic.vars(), AdamWConfig::default());
        Central {
            critic,
            opt,
            spec: "tiny-qwen2".into(),
        }
    };
    let actors = [load(), load()];
    let policies: Vec<&Policy> = actors.iter().collect();
    let buf = buffer(&meta, case);
    let joint = joint_ids(&buf, &policies, 1, false, 2048).unwrap();
    let rows: Vec<Row> = joint.iter().map(|v| (&v[..], &[][..])).collect();
    let targets: Vec<Vec<f32>> = (0..2)
        .map(|a| buf.iter().map(|s| s.agents[a].returns[0]).collect())
        .collect();
    assert_ne!(
        targets[0], targets[1],
        "the fixture's agents' targets differ"
    );
    let lr = |_: usize| 1e-3;
    let run = |compat: bool, batches: Vec<Vec<usize>>| {
        let mut c = central();
        let how = CriticRound {
            coef: 0.6,
            compat,
            plan,
            max_grad_norm: None,
            lr: &lr,
        };
        let steps = critic_round(&mut c, &rows, &targets, &batches, &how).unwrap();
        (steps, c.opt.step)
    };
    let (fixed, taken) = run(false, vec![vec![0, 1], vec![2]]);
    assert_eq!(taken, 2, "one step per mini-batch");
    assert!(fixed.iter().all(|s| s.agent.is_none()));
    let (compat, taken) = run(true, vec![vec![0, 1], vec![2]]);
    assert_eq!(taken, 4, "CoMLRL: one step per agent per mini-batch");
    // Agent 0's first step reads the critic before the round, as the joint step does: their
    // parts agree; agent 1's own step reads the critic agent 0 moved (CoMLRL's quirk).
    let own = |a: usize| {
        compat
            .iter()
            .find(|s| s.agent == Some(a) && s.batch == 0)
            .unwrap()
    };
    close("agent 0's part", fixed[0].agent_loss[0], own(0).loss);
    assert!((fixed[0].agent_loss[1] - own(1).loss).abs() > 1e-3);
    close(
        "the joint step's loss",
        fixed[0].loss,
        (fixed[0].agent_loss[0] + fixed[0].agent_loss[1]) / 2.0,
    );
    // Its values are V_old (the critic before the round), and agent 1's part is read from them.
    let c = central();
    let old = c.critic.values(&rows[..2]).unwrap();
    close_all("values", &as64(&fixed[0].values), &as64(&old));
    let part: f64 = (0..2)
        .map(|j| ((targets[1][j] - old[j]) as f64).powi(2))
        .sum::<f64>()
        * 0.6
        / 2.0;
    close("agent 1's part", fixed[0].agent_loss[1], part);
}
