//! One update round: every agent's policy-gradient loss over the buffered rollouts, in
//! mini-batches, with an AdamW step and the LR schedule per mini-batch; the sampling copies of
//! the weights are freed for the round and rebuilt after it. A replicated agent's
//! passes are split over its replicas and their gradients summed before the step.
use super::Trainer;
use crate::error::Result;
use crate::model::Policy;
use crate::train::algorithms::magrpo::loss::loss_and_grads_in;
use crate::train::optim::adamw::AdamW;
use crate::train::optim::schedule::lr_at;
use crate::train::report::timing::{since, Phases};
use crate::train::rollout::tree::NodeSample;
use crate::train::run::checkpoint::TrainState;
use crate::train::setup::agents::pass_plan;
use rayon::prelude::*;
use std::time::Instant;

impl Trainer {
    /// One update round: each agent trains on the buffered samples, in mini-batches (the agents
    /// at the same time when `parallel_updates` is on).
    pub(super) fn update(&mut self, state: &mut TrainState, buffer: Vec<NodeSample>) -> Result<()> {
        let t = &self.scenario.trainer;
        let total_opt = self.total_opt_steps();
        let start = Instant::now();
        crate::runtime::release_free_memory();
        log::debug!("update round starts; {}", crate::runtime::memory_line());
        let opt_steps = state.opt_steps.clone();
        let replicas = &self.replicas;
        let plan = pass_plan(t);
        // The round never samples: every agent's bf16 sampling copies are freed for its length
        // (their pages serve the gradients) and rebuilt once at its end, after the last step;
        // other copies follow each step.
        let released = self
            .policies
            .iter()
            .map(|p| {
                p.as_ref()
                    .map_or(Ok(false), |p| p.release_sampling_copies())
            })
            .collect::<std::result::Result<Vec<bool>, _>>()?;
        let work =
            |(i, (policy, opt)): (usize, (&Policy, &mut AdamW))| -> Result<(usize, AgentUpdate)> {
                let vars: Vec<candle_core::Var> =
                    opt.params.iter().map(|p| p.var.clone()).collect();
                let mut u = AgentUpdate {
                    opt_steps: opt_steps[i],
                    ..Default::default()
                };
                for chunk in buffer.chunks(t.train_batch_size.max(1)) {
                    let samples: Vec<&crate::train::rollout::tree::AgentRollout> =
                        chunk.iter().map(|s| &s.agents[i]).collect();
                    let mut lg = loss_and_grads_in(
                        policy,
                        &vars,
                        &samples,
                        t.micro_batch_size,
                        t.gradient_checkpointing,
                        replicas.share(i),
                        plan,
                    )?;
                    log::debug!(
                        "agent {i}: gradients accumulated ({} layer passes kept their \
                         activations, at most {:.1} MB a pass; {} sequences of advantage 0 \
                         skipped); {}",
                        lg.kept_layers,
                        lg.kept_bytes_max as f64 / 1e6,
                        lg.skipped,
                        crate::runtime::memory_line()
                    );
                    let tick = Instant::now();
                    replicas.reduce(i, &vars, &mut lg)?;
                    u.phases.comm += since(tick);
                    let tick = Instant::now();
                    let lr = lr_at(
                        opt.cfg.lr,
                        u.opt_steps as usize,
                        total_opt,
                        t.warmup_steps,
                        t.lr_scheduler,
                    );
                    let norm = opt.step_grads(&lg.grads, lr, t.max_grad_norm)?;
                    drop(lg.grads);
                    if !released.get(i).copied().unwrap_or(false) {
                        policy.weights_changed()?;
                    }
                    u.phases.optimizer += since(tick);
                    u.phases.forward += lg.forward_s;
                    u.phases.backward += lg.backward_s;
                    u.flops += lg.flops;
                    u.opt_steps = opt.step;
                    u.loss += lg.loss;
                    u.grad_norm += norm;
                    u.updates += 1;
                    u.lr = lr;
                }
                Ok((i, u))
            };
        // The agents this rank holds.
        let pairs: Vec<(usize, (&Policy, &mut AdamW))> = self
            .policies
            .iter()
            .zip(self.optims.iter_mut())
            .enumerate()
            .filter_map(|(i, (p, o))| Some((i, (p.as_ref()?, o.as_mut()?))))
            .collect();
        // Replicated agents' collectives run on this (MPI's) thread, one agent after another.
        let parallel = t.parallel_updates && !self.placement.replicated();
        let results: Result<Vec<(usize, AgentUpdate)>> = if parallel && pairs.len() > 1 {
            pairs.into_par_iter().map(work).collect()
        } else {
            pairs.into_iter().map(work).collect()
        };
        // Rebuilt even when the round failed, so no later sampling runs without them.
        let tick = Instant::now();
        for (p, released) in self.policies.iter().zip(&released) {
            if let (Some(p), true) = (p, released) {
                p.weights_changed()?;
            }
        }
        // What the round freed and the copies did not take back (its gradients, scratch) goes
        // back to the OS before sampling, so it does not add to sampling's peak.
        crate::runtime::release_free_memory_above(crate::runtime::TRIM_AFTER_UPDATE_ABOVE_BYTES);
        state.window.phases.optimizer += since(tick);
        for (i, u) in results? {
            state.opt_steps[i] = u.opt_steps;
            let w = &mut state.window.agents[i];
            w.loss += u.loss;
            w.grad_norm += u.grad_norm;
            w.updates += u.updates;
            if i == 0 && u.updates > 0 {
                state.window.lr = Some(u.lr);
            }
            state.window.phases.add(&u.phases);
            state.window.train_flops += u.flops;
        }
        state.window.phases.update += since(start);
        log::debug!("update done; {}", crate::runtime::memory_line());
        Ok(())
    }
}

/// What one agent's part of an update round reports.
#[derive(Default)]
struct AgentUpdate {
    opt_steps: u64,
    loss: f64,
    grad_norm: f64,
    updates: usize,
    lr: f64,
    phases: Phases,
    flops: f64,
}
