//! The loop itself. Per step: the prompt's rollouts (sampled ahead with the rest of its rollout
//! buffer where it can), turned into training samples by the algorithm and buffered; an update
//! round per full buffer, and at the end of an epoch for what is left (as CoMLRL flushes it);
//! evaluation when due; the logging window; a checkpoint when due or on a signal. At the end the
//! final models and the plot.
use super::eval::evaluate;
use super::finish::{after_failed_checkpoint, finish};
use super::observer::{Observer, RunSummary};
use super::settings::Settings;
use super::start::start;
use crate::error::{Error, Result};
use crate::metrics::{CompletionsSink, MetricsSink};
use crate::train::algorithms::{Algorithm, ComparatorSource, Round, StepRule};
use crate::train::report::timing::{since, Phases};
use crate::train::rollout::centralized;
use crate::train::rollout::generate::{sample_agent, sample_group, Presampled};
use crate::train::rollout::{rollout, AgentRollout, NodeSample, RolloutSpec, RowInput};
use crate::train::run::checkpoint::{self, Held};
use crate::train::run::{Stop, TrainState};
use crate::train::setup::{Agents, Rewards};
use crate::train::update::housekeeping;
use crate::train::world::Strategy;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// First-turn completions of the next prompts, each with its share of the group's sampling time.
type Pending = VecDeque<(Presampled, f64)>;

/// A trainer's parts, borrowed apart for the loop: the rollouts borrow the agents and rewards
/// while an update round borrows the agents' optimizers, one after the other.
pub(super) struct Loop<'a> {
    pub(super) settings: &'a mut Settings,
    pub(super) agents: &'a mut Agents,
    pub(super) rewards: &'a Rewards,
    pub(super) strategy: &'a dyn Strategy,
    pub(super) algorithm: &'a mut dyn Algorithm,
}

impl Loop<'_> {
    /// Resume or start, then step to the end (or a signal), then the final models and the plot.
    pub(super) fn run(mut self, resume: bool, obs: &mut dyn Observer) -> Result<RunSummary> {
        let (mut state, _lock) = start(
            self.settings,
            self.agents,
            self.rewards.names.len(),
            self.strategy,
            self.algorithm,
            resume,
            obs,
        )?;
        let mut sink = self.open_metrics(&state, obs)?;
        let mut samples = self.open_completions(&state, obs)?;
        let total = self.settings.total_steps();
        let limit = self.settings.limit();
        log::debug!(
            "models loaded, training with {}; {}",
            self.algorithm.name(),
            crate::runtime::memory_line()
        );
        let trainer = &self.settings.scenario.trainer;
        if let Some(note) = crate::train::update::plan::compute_dtype_note(trainer) {
            obs.message(&note);
        }
        obs.start(total, state.step);
        let rows = self.settings.scenario.dataset.train.rows.len().max(1);
        for e in 1..=state.step / rows {
            report_epoch(&state, e, obs);
        }
        if self.settings.eval_enabled() && trainer.eval_at_start && state.step == 0 {
            self.evaluate_at_start(&mut state, sink.as_mut(), obs)?;
        }
        // First-turn completions of the next prompts, sampled together ahead of their steps.
        let mut pending = VecDeque::new();
        let mut interrupted = false;
        while state.step < limit {
            let t0 = Instant::now();
            self.step(&mut state, &mut pending, limit, obs)?;
            state.window.seconds += t0.elapsed().as_secs_f64();
            state.window.steps += 1;
            state.step += 1;
            let trainer = &self.settings.scenario.trainer;
            if self.settings.eval_enabled() && state.step % trainer.eval_interval == 0 {
                let spec = self.spec();
                let eval = evaluate(
                    self.settings,
                    &self.agents.prompts,
                    &spec,
                    &*self.algorithm,
                    state.step,
                )?;
                state.window.eval = Some((eval.reward_mean, eval.return_mean));
                state.window.eval_terms = Some(eval.terms);
            }
            // NaN when the window sampled nothing (an offline algorithm's later epochs).
            let mean = state.window.rewards.iter().map(|&x| x as f64).sum::<f64>()
                / state.window.rewards.len() as f64;
            obs.step(state.step, mean, t0.elapsed().as_secs_f64());
            self.log_window(&mut state, sink.as_mut(), samples.as_mut(), obs)?;
            if state.step.is_multiple_of(rows) {
                report_epoch(&state, state.step / rows, obs);
            }
            // A signal may reach the ranks at different steps: stop when any rank has one.
            let stop = self
                .strategy
                .any(self.settings.interrupt.load(Ordering::SeqCst));
            if let Err(e) = self.checkpoint_if_due(&state, stop) {
                let (settings, agents) = (&*self.settings, &*self.agents);
                return Err(after_failed_checkpoint(
                    settings,
                    agents,
                    self.strategy,
                    &*self.algorithm,
                    e,
                    &state,
                ));
            }
            if stop && state.step < total {
                interrupted = true;
                obs.message(&format!(
                    "interrupted: checkpoint written at step {}; continue with --resume",
                    state.step
                ));
                break;
            }
        }
        finish(
            self.settings,
            self.agents,
            self.strategy,
            &*self.algorithm,
            state,
            interrupted,
        )
    }

    /// How this run's rollouts are produced, from the trainer settings and the parts the loop
    /// holds.
    fn spec(&self) -> RolloutSpec<'_> {
        let t = &self.settings.scenario.trainer;
        let agents = &*self.agents;
        RolloutSpec {
            policies: &agents.policies,
            stack: &self.rewards.stack,
            k: t.num_generations,
            cross: t.joint_mode == comlrl_scenario::JointMode::Cross,
            sampling: &agents.sampling,
            references: agents.references.as_deref(),
            turns: t.num_turns,
            early_termination: t.early_termination_threshold,
            transition: self.rewards.transition.as_deref(),
            prompts: &agents.prompts.0,
            passthrough: t.external_prompt_passthrough,
            parallel: t.parallel_sampling,
            batch_agents: t.batch_agent_sampling,
            exchange: self.strategy,
            samples: &agents.samples,
            sampling_logprobs: agents.sampling_logprobs.as_deref(),
            roles: self.rewards.roles,
        }
    }

    /// When each agent's completions count as cut off (the metrics' `clipped_ratio`).
    fn stops(&self) -> Vec<Stop> {
        let agents = &*self.agents;
        agents
            .sampling
            .iter()
            .zip(&agents.ends)
            .map(|(sampling, ends)| Stop {
                max_new_tokens: sampling.max_new_tokens,
                ends: ends.clone(),
            })
            .collect()
    }

    /// metrics.jsonl, opened where `state` left it; only rank 0 writes it.
    fn open_metrics(
        &self,
        state: &TrainState,
        obs: &mut dyn Observer,
    ) -> Result<Option<MetricsSink>> {
        if !self.strategy.world().is_root() {
            return Ok(None);
        }
        let out = &self.settings.scenario.output_dir;
        let (sink, note) = MetricsSink::open(out, state.metrics_rows, state.step)?;
        if let Some(note) = note {
            obs.message(&note);
        }
        Ok(Some(sink))
    }

    /// completions.jsonl (`logging.completions`), opened where `state` left it; only rank 0
    /// writes it.
    fn open_completions(
        &self,
        state: &TrainState,
        obs: &mut dyn Observer,
    ) -> Result<Option<CompletionsSink>> {
        if !self.strategy.world().is_root() || self.settings.scenario.logging.completions == 0 {
            return Ok(None);
        }
        let out = &self.settings.scenario.output_dir;
        let (sink, note) = CompletionsSink::open(out, state.step)?;
        if let Some(note) = note {
            obs.message(&note);
        }
        Ok(Some(sink))
    }

    /// Step `state.step`: rollouts of its prompt (skipped when a reward term with
    /// `on_error: skip_step` fails), the algorithm's samples of them buffered; an update round
    /// per full buffer, and at the end of an epoch for what is left. `limit` is the step the
    /// run stops at.
    fn step(
        &mut self,
        state: &mut TrainState,
        pending: &mut Pending,
        limit: usize,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let step = state.step;
        let s = &self.settings.scenario;
        let rows = s.dataset.train.rows.len();
        let (epoch, r) = (step / rows, step % rows);
        // An offline algorithm's set is built in the first epoch: later steps sample nothing,
        // and each epoch ends in one round over the set.
        let offline = self.algorithm.offline();
        if offline && epoch > 0 {
            if r + 1 == rows {
                self.round(state, Vec::new())?;
            }
            return Ok(());
        }
        // A collecting epoch (MARLHF's first, each round's first of an iterative algorithm)
        // samples `preference.num_candidates` answers per agent and hands them to the
        // algorithm; it ends in a round on an empty buffer.
        let collecting = s.collecting(epoch);
        // An algorithm with nothing to train before its next collecting epoch samples nothing.
        if !collecting && self.algorithm.idle() {
            return Ok(());
        }
        // A comparing algorithm's comparator (iterative MADPO) in a collecting epoch.
        let (mut current_k, mut comparator_k, mut own_comparator) = (0, 0, false);
        if collecting {
            if let Some(c) = self.algorithm.comparison() {
                (current_k, comparator_k) = (c.current, c.comparator);
                own_comparator = !matches!(c.source, ComparatorSource::Agents);
            }
        }
        let buffer_size = s.trainer.rollout_buffer_size.max(1);
        let row = &s.dataset.train.rows[r];
        let prompts = self.agents.prompts.render(row)?;
        // Without the chat template: what an algorithm that reads the prompts' text is given.
        let formatted = self.agents.prompts.formatted(row);
        let input = RowInput {
            prompt: &row.prompt,
            fields: &row.fields,
        };
        let mut phases = Phases::default();
        let where_ = format!("step {} (epoch {}, prompt {})", step + 1, epoch + 1, r + 1);
        let mut spec = self.spec();
        if collecting {
            spec.k = s.preference.num_candidates;
            // A comparator that is the agents themselves samples in the same batch.
            if comparator_k > 0 && !own_comparator {
                spec.k = current_k + comparator_k;
            }
        }
        // The prompts up to the next update see the same policies: sample them in one batch.
        let group = buffer_size
            .saturating_sub(state.buffer.len())
            .min(rows - r)
            .min(limit - step);
        let t = &s.trainer;
        // A comparator sampling between the prompts draws from the run's generator too: no group.
        if pending.is_empty()
            && t.batch_buffer_sampling
            && t.num_turns == 1
            && group > 1
            && !own_comparator
        {
            let rendered = (r..r + group)
                .map(|i| self.agents.prompts.render(&s.dataset.train.rows[i]))
                .collect::<Result<Vec<_>>>()?;
            let mut group_phases = Phases::default();
            let sampled = sample_group(&spec, &rendered, &state.rng, &mut group_phases)
                .map_err(|e| e.at_step(step + 1, where_.clone()))?;
            // Each step of the group is charged an equal share of its sampling time.
            let share = group_phases.sampling / group as f64;
            *pending = sampled.into_iter().map(|p| (p, share)).collect();
        }
        let pre = pending.pop_front().map(|(p, share)| {
            phases.sampling += share;
            p
        });
        let algorithm = &*self.algorithm;
        let rolled = rollout(&spec, &input, &prompts, &mut state.rng, &mut phases, pre).and_then(
            |mut root| {
                // A collecting epoch hands the algorithm its candidates with their rewards.
                if collecting {
                    return Ok(root.into_reward_samples());
                }
                if !offline {
                    algorithm.rescore(&formatted, &mut root)?;
                }
                algorithm.targets(root)
            },
        );
        let nodes = match rolled {
            Ok(nodes) if own_comparator => {
                let mut nodes = nodes;
                // What the window records: the agents' own candidates.
                let recorded = nodes.clone();
                self.compare(&input, &prompts, &formatted, state, &mut phases, &mut nodes)
                    .map_err(|e| e.at_step(step + 1, where_.clone()))?;
                let stops = self.stops();
                let cross = s.trainer.joint_mode == comlrl_scenario::JointMode::Cross;
                for node in &recorded {
                    state.keep_samples(node, step + 1, &row.prompt, s.logging.completions, cross);
                    state.record(node, epoch, &stops);
                }
                state.window.phases.add(&phases);
                self.algorithm
                    .collect(&formatted, &nodes)
                    .map_err(|e| e.at_step(step + 1, where_.clone()))?;
                if r + 1 == rows {
                    pending.clear();
                    self.round(state, Vec::new())?;
                }
                return Ok(());
            }
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
        let stops = self.stops();
        let cross = s.trainer.joint_mode == comlrl_scenario::JointMode::Cross;
        for node in &nodes {
            state.keep_samples(node, step + 1, &row.prompt, s.logging.completions, cross);
            state.record(node, epoch, &stops);
        }
        if offline || collecting {
            self.algorithm
                .collect(&formatted, &nodes)
                .map_err(|e| e.at_step(step + 1, where_.clone()))?;
            if r + 1 == rows {
                pending.clear();
                self.round(state, Vec::new())?;
            }
            return Ok(());
        }
        state.buffer.extend(nodes);
        while state.buffer.len() >= buffer_size {
            // Never reached with presampled prompts left (the group ends at the update).
            pending.clear();
            let take = match self.algorithm.whole_episodes() {
                true => state.buffer.len(),
                false => buffer_size,
            };
            let batch: Vec<NodeSample> = state.buffer.drain(..take).collect();
            self.round(state, batch)?;
        }
        // CoMLRL flushes what is left at the end of every epoch.
        if r + 1 == rows && !state.buffer.is_empty() {
            pending.clear();
            let batch = std::mem::take(&mut state.buffer);
            self.round(state, batch)?;
        }
        Ok(())
    }

    /// The comparator's candidates of a prompt (sampled with its own policies, or an
    /// endpoint's texts tokenized with the agents' tokenizers; then scored), after the agents'
    /// in the first-turn node of `nodes`. `formatted`: each agent's prompt without the chat
    /// template (what an endpoint is sent).
    fn compare(
        &self,
        input: &RowInput,
        prompts: &[String],
        formatted: &[String],
        state: &mut TrainState,
        phases: &mut Phases,
        nodes: &mut [NodeSample],
    ) -> Result<()> {
        let Some(c) = self.algorithm.comparison() else {
            return Ok(());
        };
        let mut spec = self.spec();
        spec.k = c.comparator;
        // The comparator's candidates are only ranked: no KL to the agents' references.
        spec.references = None;
        spec.sampling_logprobs = None;
        let pre = match c.source {
            ComparatorSource::Agents => return Ok(()),
            ComparatorSource::Policies(policies) => {
                spec.policies = policies;
                None
            }
            ComparatorSource::Texts(api) => {
                let Some(mine) = nodes.iter().find(|n| n.turn == 0) else {
                    return Ok(());
                };
                let t = Instant::now();
                let answers = api.complete_all(formatted, c.comparator)?;
                let agents = self.given_rollouts(mine, answers)?;
                phases.sampling += since(t);
                Some(Presampled::given(&state.rng, agents))
            }
            ComparatorSource::Centralized { index, policies } => {
                let Some(mine) = nodes.iter().find(|n| n.turn == 0) else {
                    return Ok(());
                };
                let t = Instant::now();
                let held = match policies {
                    Some(p) => p,
                    None => &self.agents.policies[..],
                };
                let (Some(Some(policy)), Some(Some(format))) =
                    (held.get(index), self.agents.prompts.0.get(index))
                else {
                    return Err(Error::Config(format!(
                        "preference.comparator_generation_mode centralized samples with agent \
                         {index}'s comparator policy, which this process does not hold: run \
                         in one process"
                    )));
                };
                // CoMLRL's tagged prompt of the agents' prompts (no chat template), wrapped as
                // agent `index` wraps its own (unchanged under the default `chat_template:
                // none`), sampled with that agent's settings from the run's generator.
                let refs: Vec<&str> = formatted.iter().map(String::as_str).collect();
                let prompt = format.wrap(&centralized::build_prompt(&refs))?;
                let seed = rand::RngCore::next_u64(&mut state.rng);
                let answers = sample_agent(policy, index, &prompt, 0, &spec, seed)?.texts;
                let split = centralized::split_by_agent(&answers, mine.agents.len());
                let agents = self.given_rollouts(mine, split)?;
                phases.sampling += since(t);
                Some(Presampled::given(&state.rng, agents))
            }
        };
        let root = rollout(&spec, input, prompts, &mut state.rng, phases, pre)?;
        let theirs = root.into_reward_samples();
        let (Some(mine), Some(theirs)) = (
            nodes.iter_mut().find(|n| n.turn == 0),
            theirs.into_iter().find(|n| n.turn == 0),
        ) else {
            return Ok(());
        };
        mine.append_aligned(theirs)
    }

    /// A comparator's texts, by agent, as the agents' rollouts of `mine`'s prompts: each text
    /// encoded with its agent's tokenizer as CoMLRL encodes a comparator's text (no special
    /// tokens, no EOS).
    fn given_rollouts(
        &self,
        mine: &NodeSample,
        answers: Vec<Vec<String>>,
    ) -> Result<Vec<AgentRollout>> {
        if answers.len() != mine.agents.len() {
            return Err(Error::Internal(format!(
                "the comparator answered {} agents of {}",
                answers.len(),
                mine.agents.len()
            )));
        }
        let mut agents = Vec::with_capacity(mine.agents.len());
        for ((i, a), texts) in mine.agents.iter().enumerate().zip(answers) {
            let policy = self.agents.policies[i]
                .as_ref()
                .ok_or_else(|| Error::Internal(format!("agent {i} is not held here")))?;
            let ids = texts
                .iter()
                .map(|x| policy.tokenizer.encode(x))
                .collect::<crate::model::Result<Vec<_>>>()
                .map_err(Error::from)?;
            agents.push(AgentRollout::sampled(a.prompt_ids.clone(), ids, texts));
        }
        Ok(agents)
    }

    /// One update round: the memory housekeeping around the algorithm's update of the agents
    /// this rank trains, then their statistics into the window and the state.
    fn round(&mut self, state: &mut TrainState, buffer: Vec<NodeSample>) -> Result<()> {
        let t = &self.settings.scenario.trainer;
        let start = Instant::now();
        let agents = &mut *self.agents;
        let freed = housekeeping::before_update(&agents.policies)?;
        // An offline algorithm runs one round per epoch; iterative MADPO one per round (its
        // passes over the pairs are its steps), iterative MARLHF its online rounds every round.
        let iterations = self.settings.scenario.preference.num_iterations;
        let rounds = match t.algorithm {
            comlrl_scenario::Algorithm::MadpoIter => iterations,
            comlrl_scenario::Algorithm::MarlhfIter => {
                iterations.saturating_mul(self.settings.rounds())
            }
            _ if self.algorithm.offline() => t.num_train_epochs,
            _ => self.settings.rounds(),
        };
        let rule = StepRule {
            total_steps: rounds.saturating_mul(self.algorithm.steps_per_round()),
            warmup: t.warmup_steps,
            scheduler: t.lr_scheduler,
            max_grad_norm: t.max_grad_norm,
        };
        let replicas = self.strategy.replicas();
        let parallel = t.parallel_updates && !replicas.on_this_thread();
        let round = Round::new(
            &agents.policies,
            &mut agents.optims,
            &state.opt_steps,
            replicas,
            &freed,
            rule,
            parallel,
            self.strategy.world(),
        );
        let results = self.algorithm.update(round, &buffer);
        // Rebuilt even when the round failed, so no later sampling runs without them.
        let tick = Instant::now();
        housekeeping::after_update(&agents.policies, &freed)?;
        state.window.phases.optimizer += since(tick);
        for (i, u) in results? {
            state.opt_steps[i] = u.opt_steps;
            let w = &mut state.window.agents[i];
            w.loss += u.loss;
            w.grad_norm += u.grad_norm;
            w.updates += u.updates;
            for (name, sum) in u.extra {
                *w.extra.entry(name).or_default() += sum;
            }
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

    /// Every `logging.steps` steps and at the last one: the window's metrics row (completed
    /// with other ranks' statistics under MPI) goes to metrics.jsonl and the observer, and a new
    /// window starts.
    fn log_window(
        &self,
        state: &mut TrainState,
        mut sink: Option<&mut MetricsSink>,
        samples: Option<&mut CompletionsSink>,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let s = &self.settings.scenario;
        let total = self.settings.total_steps();
        let rows = s.dataset.train.rows.len();
        // A collecting epoch's end (MARLHF's reward model has trained) closes its window, so
        // the reward model's metrics never mix with the online updates'.
        let collected = state.step.is_multiple_of(rows)
            && state.step >= rows
            && s.collecting(state.step / rows - 1);
        if state.step.is_multiple_of(s.logging.steps.max(1)) || state.step == total || collected {
            self.strategy.merge_window(&mut state.window)?;
            let epoch = (state.step - 1) / s.dataset.train.rows.len() + 1;
            let row = state.window.row(state.step, epoch, &self.rewards.names);
            if let (Some(row), Some(sink)) = (row, sink.as_deref_mut()) {
                sink.write(&row)?;
                let names = &self.rewards.names;
                let kept = &state.window.samples;
                let (mut texts, mut lines) = (vec![], vec![]);
                if let Some(file) = samples {
                    lines = kept.iter().map(|x| x.to_json(names)).collect();
                    file.write(&lines)?;
                    if !kept.is_empty() {
                        let md: Vec<String> = kept.iter().map(|x| x.to_markdown(names)).collect();
                        texts.push(("completions".to_string(), md.join("\n---\n\n")));
                    }
                }
                obs.metrics(&row, &texts, &lines);
            }
            state.window = self.settings.new_window(self.rewards.names.len());
        }
        if let Some(sink) = sink {
            state.metrics_rows = sink.rows;
        }
        Ok(())
    }

    /// `trainer.eval_at_start`: the untrained agents evaluated, written as a row of its own at
    /// step 0 (epoch 0) holding only the evaluation's columns.
    fn evaluate_at_start(
        &self,
        state: &mut TrainState,
        sink: Option<&mut MetricsSink>,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        let spec = self.spec();
        let eval = evaluate(
            self.settings,
            &self.agents.prompts,
            &spec,
            &*self.algorithm,
            0,
        )?;
        let mut row: crate::metrics::Row = vec![("step".into(), 0.0), ("epoch".into(), 0.0)];
        row.extend(crate::train::report::window::eval_columns(
            eval.reward_mean,
            eval.return_mean,
            Some(&eval.terms),
            &self.rewards.names,
        ));
        if let Some(sink) = sink {
            sink.write(&row)?;
            state.metrics_rows = sink.rows;
            obs.metrics(&row, &[], &[]);
        }
        Ok(())
    }

    /// A checkpoint every `checkpoint_every` steps, at the last step and when the run stops on
    /// a signal (`stop`); none in a benchmark (`stop_after`). Replicas are checked identical
    /// first.
    fn checkpoint_if_due(&self, state: &TrainState, stop: bool) -> Result<()> {
        let s = &self.settings.scenario;
        let every = s.checkpoint_every as usize;
        let due = (every > 0 && state.step.is_multiple_of(every))
            || stop
            || state.step == self.settings.total_steps();
        if !due || self.settings.stop_after.is_some() {
            return Ok(());
        }
        let agents = &*self.agents;
        self.strategy.replicas().check_identical(
            &agents.policies,
            self.strategy.placement(),
            state.step,
        )?;
        let held = Held {
            policies: &agents.policies,
            optims: &agents.optims,
            writes: &agents.samples,
            extra: &*self.algorithm,
        };
        checkpoint::save(
            &s.output_dir,
            state,
            &held,
            &self.settings.yaml,
            self.strategy.world(),
        )?;
        Ok(())
    }
}

/// Tells `obs` that epoch `e` (from 1) is complete, with its mean joint reward.
fn report_epoch(state: &TrainState, e: usize, obs: &mut dyn Observer) {
    if let Some((sum, n)) = state.epoch_rewards.get(e - 1) {
        obs.epoch(e, sum / (*n).max(1) as f64);
    }
}
