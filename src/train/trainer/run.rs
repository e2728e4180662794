//! One training step of the loop: the prompt's rollouts (sampled ahead with the rest of its
//! rollout buffer where it can), the buffer and its update rounds; then the logging window and
//! the checkpoint when due.
use super::{Observer, Trainer};
use crate::error::{Error, Result};
use crate::metrics::MetricsSink;
use crate::train::report::timing::Phases;
use crate::train::rollout::generate::{sample_group, Presampled};
use crate::train::rollout::tree::{rollout_presampled, NodeSample, RolloutSpec, RowInput};
use crate::train::run::checkpoint::{self, TrainState};
use crate::train::world::run;
use std::collections::VecDeque;
use std::time::Instant;

/// First-turn completions of the next prompts, each with its share of the group's sampling time.
pub(super) type Pending = VecDeque<(Presampled, f64)>;

impl Trainer {
    /// Step `state.step`: rollouts of its prompt (skipped when a reward term with
    /// `on_error: skip_step` fails), buffered; an update round per full buffer, and at the end
    /// of an epoch for what is left (as CoMLRL flushes it). `limit` is the step the run stops at.
    pub(super) fn train_step(
        &mut self,
        state: &mut TrainState,
        spec: &RolloutSpec,
        pending: &mut Pending,
        limit: usize,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let step = state.step;
        let rows = self.scenario.dataset.train.rows.len();
        let (epoch, r) = (step / rows, step % rows);
        let buffer_size = self.scenario.trainer.rollout_buffer_size.max(1);
        let row = &self.scenario.dataset.train.rows[r];
        let prompts = self.prompts.render(row)?;
        let input = RowInput {
            prompt: &row.prompt,
            fields: &row.fields,
        };
        let mut phases = Phases::default();
        let where_ = format!("step {} (epoch {}, prompt {})", step + 1, epoch + 1, r + 1);
        // The prompts up to the next update see the same policies: sample them in one batch.
        let group = buffer_size
            .saturating_sub(state.buffer.len())
            .min(rows - r)
            .min(limit - step);
        let t = &self.scenario.trainer;
        if pending.is_empty() && t.batch_buffer_sampling && t.num_turns == 1 && group > 1 {
            let rendered = (r..r + group)
                .map(|i| self.prompts.render(&self.scenario.dataset.train.rows[i]))
                .collect::<Result<Vec<_>>>()?;
            let mut group_phases = Phases::default();
            let sampled = sample_group(
                &self.policies,
                &rendered,
                spec,
                &state.rng,
                &mut group_phases,
            )
            .map_err(|e| e.at_step(step + 1, where_.clone()))?;
            // Each step of the group is charged an equal share of its sampling time.
            let share = group_phases.sampling / group as f64;
            *pending = sampled.into_iter().map(|p| (p, share)).collect();
        }
        let pre = pending.pop_front().map(|(p, share)| {
            phases.sampling += share;
            p
        });
        let nodes = match rollout_presampled(
            &self.policies,
            &prompts,
            &input,
            &self.stack,
            spec,
            &mut state.rng,
            &mut phases,
            pre,
        ) {
            Ok(nodes) => nodes,
            // A term with `on_error: skip_step` failed: this prompt trains nothing.
            Err(Error::Reward(e @ comlrl_reward::RewardError::SkipStep { .. })) => {
                obs.message(&format!("warning: {where_} skipped: {e}"));
                state.window.skipped_steps += 1;
                Vec::new()
            }
            Err(e) => return Err(e.at_step(step + 1, where_)),
        };
        state.window.phases.add(&phases);
        log::debug!(
            "step {}: sampled; {}",
            step + 1,
            crate::runtime::memory_line()
        );
        for node in nodes {
            record_rollout(state, &node, epoch);
            state.buffer.push(node);
        }
        while state.buffer.len() >= buffer_size {
            // Never reached with presampled prompts left (the group ends at the update).
            pending.clear();
            let batch: Vec<NodeSample> = state.buffer.drain(..buffer_size).collect();
            self.update(state, batch)?;
        }
        // CoMLRL flushes what is left at the end of every epoch.
        if r + 1 == rows && !state.buffer.is_empty() {
            pending.clear();
            let batch = std::mem::take(&mut state.buffer);
            self.update(state, batch)?;
        }
        Ok(())
    }

    /// Every `logging.steps` steps and at the last one: the window's metrics row (gathered to
    /// rank 0 under MPI) goes to metrics.jsonl and the observer, and a new window starts.
    pub(super) fn log_window(
        &self,
        state: &mut TrainState,
        mut sink: Option<&mut MetricsSink>,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let total = self.total_steps();
        if state
            .step
            .is_multiple_of(self.scenario.logging.steps.max(1))
            || state.step == total
        {
            if self.placement.distributed() {
                let t = Instant::now();
                run::merge_window(self.world.as_ref(), &self.placement, &mut state.window)?;
                state.window.phases.comm += t.elapsed().as_secs_f64();
            }
            let epoch = (state.step - 1) / self.scenario.dataset.train.rows.len() + 1;
            let row = state.window.row(state.step, epoch, &self.component_names);
            if let (Some(row), Some(sink)) = (row, sink.as_deref_mut()) {
                sink.write(&row)?;
                obs.metrics(&row);
            }
            state.window = self.new_window();
        }
        if let Some(sink) = sink {
            state.metrics_rows = sink.rows;
        }
        Ok(())
    }

    /// A checkpoint every `checkpoint_every` steps, at the last step and when the run stops on
    /// a signal (`stop`); none in a benchmark (`stop_after`). Replicas are checked identical first.
    pub(super) fn checkpoint_if_due(&self, state: &TrainState, stop: bool) -> Result<()> {
        let every = self.scenario.checkpoint_every as usize;
        let due = (every > 0 && state.step.is_multiple_of(every))
            || stop
            || state.step == self.total_steps();
        if !due || self.stop_after.is_some() {
            return Ok(());
        }
        self.replicas
            .check_identical(&self.policies, &self.placement, state.step)?;
        checkpoint::save(
            &self.scenario.output_dir,
            state,
            &self.policies,
            &self.optims,
            &self.samples,
            &self.yaml,
            self.world.as_ref(),
        )?;
        Ok(())
    }
}

/// Adds a node's rewards, term values, KL, lengths and returns to the logging window, and its
/// first-turn rewards to its epoch's mean.
fn record_rollout(state: &mut TrainState, s: &NodeSample, epoch: usize) {
    let w = &mut state.window;
    if s.turn > 0 {
        // Later turns: their own reward means; agent statistics below cover every node.
        if w.turn_rewards.len() < s.turn {
            w.turn_rewards.resize(s.turn, (0.0, 0));
        }
        let slot = &mut w.turn_rewards[s.turn - 1];
        slot.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
        slot.1 += s.rewards.len();
    } else {
        w.rewards.extend_from_slice(&s.rewards);
    }
    for comp in &s.components {
        for (slot, v) in w.components.iter_mut().zip(comp) {
            slot.0 += *v as f64;
            slot.1 += 1;
        }
    }
    for (aw, a) in w.agents.iter_mut().zip(&s.agents) {
        aw.kl_sum += a.kl.iter().map(|&k| k as f64).sum::<f64>();
        aw.zero_advantages += a.advantages.iter().filter(|&&x| x == 0.0).count();
        for (c, r) in a.completions.iter().zip(&a.returns) {
            aw.len_sum += c.len() as f64;
            aw.returns_sum += *r as f64;
            aw.completions += 1;
            w.generated_tokens += c.len();
        }
    }
    if s.turn > 0 {
        return;
    }
    if state.epoch_rewards.len() <= epoch {
        state.epoch_rewards.resize(epoch + 1, (0.0, 0));
    }
    let e = &mut state.epoch_rewards[epoch];
    e.0 += s.rewards.iter().map(|&r| r as f64).sum::<f64>();
    e.1 += s.rewards.len();
}
