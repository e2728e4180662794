//! The seam between the shared training loop and an algorithm. The loop (`train::trainer`)
//! samples each prompt's rollout tree and scores it, buffers what the algorithm makes of it,
//! runs an update round when the buffer is full, and writes metrics, checkpoints and the final
//! models; an algorithm owns only what differs:
//!
//! - after a prompt's rollouts are scored, what its completions train ([`Algorithm::targets`]:
//!   returns and advantages, or whatever targets the algorithm needs, per completion);
//! - the update round: each mini-batch's losses and gradients, stepped through the shared
//!   optimizer step ([`Algorithm::update`] with a [`Round`]; the gradients of a loss over
//!   sequence log-probabilities come from `train::update::passes`);
//! - what it adds to checkpoints (its [`CheckpointPart`]: extra networks such as critics or
//!   value heads, their optimizers, its own state) and to the metrics ([`Learner::record`]);
//! - its extra networks, which it loads when it is built (`registry`).
//!
//! [`Learner::record`]: super::round::Learner::record
use super::round::{AgentUpdate, Round};
use crate::error::Result;
use crate::model::Policy;
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::CheckpointPart;

/// What [`Algorithm::comparison`] asks the loop to sample.
pub struct Comparison<'a> {
    /// The agents' candidates per prompt.
    pub current: usize,
    /// The comparator's candidates per prompt.
    pub comparator: usize,
    /// Where the comparator's candidates come from.
    pub source: ComparatorSource<'a>,
}

/// Who writes a comparator's candidates.
pub enum ComparatorSource<'a> {
    /// The agents themselves, in the same batch as their own.
    Agents,
    /// These policies, one per agent.
    Policies(&'a [Option<Policy>]),
    /// A text endpoint; its answers are tokenized with the agents' tokenizers.
    Texts(&'a dyn TextComparator),
    /// One local policy answering for every agent (`comparator_generation_mode: centralized`
    /// with `current`, `current_copy` or `model`): agent `index`'s policy (`policies: None`),
    /// or `policies[index]`, samples CoMLRL's tagged prompt with agent `index`'s settings; its
    /// answers are split into the agents' outputs and tokenized as an endpoint's.
    Centralized {
        /// `comparator_centralized_agent_index`.
        index: usize,
        /// The comparator's own policies (`model`); `None`: the agents.
        policies: Option<&'a [Option<Policy>]>,
    },
}

/// A comparator that answers with texts (an HTTP endpoint).
pub trait TextComparator: Sync {
    /// `n` answers to agent `agent`'s `prompt` (its template, no chat template).
    fn complete(&self, agent: usize, prompt: &str, n: usize) -> Result<Vec<String>>;

    /// `n` answers of every agent to a prompt, from each agent's `prompts` (their templates, no
    /// chat template), by agent: each agent's own [`TextComparator::complete`] unless the
    /// comparator answers all agents at once (a centralized one).
    fn complete_all(&self, prompts: &[String], n: usize) -> Result<Vec<Vec<String>>> {
        prompts
            .iter()
            .enumerate()
            .map(|(i, p)| self.complete(i, p, n))
            .collect()
    }
}

/// A training algorithm (selected by `trainer.algorithm`, see `registry`).
pub trait Algorithm: CheckpointPart + Send + Sync {
    /// The `trainer.algorithm` value that selects it.
    fn name(&self) -> &'static str;

    /// What one prompt's scored rollout tree trains: its nodes in creation order (the root
    /// first), each completion with its return and advantage. Every rank calls it with the
    /// same tree and must compute the same samples; evaluation calls it too.
    fn targets(&self, root: Node) -> Result<Vec<NodeSample>>;

    /// Optimizer steps each agent takes in one update round (for the learning-rate schedule,
    /// which spans the run's rounds).
    fn steps_per_round(&self) -> usize;

    /// One update round over the buffered samples (in buffer order): the gradients of every
    /// agent `round` trains, each mini-batch stepped with [`super::round::Learner::step`].
    /// Returns what each agent reported, by agent index.
    fn update(
        &mut self,
        round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>>;

    /// Whether an update round takes the whole buffer once it holds `rollout_buffer_size`
    /// nodes (CoMLRL's actor-critic buffers, which fill by whole episodes), rather than exactly
    /// `rollout_buffer_size` nodes: a multi-turn actor-critic's TD target reads the next turn's
    /// V_old, so an episode's nodes must train in one round, under the critic that rolled
    /// them out.
    fn whole_episodes(&self) -> bool {
        false
    }

    /// Whether the algorithm learns offline from a set it builds once (MADPO's preference
    /// set). The loop then samples and scores the training prompts in the first epoch only,
    /// hands each prompt's samples to [`Algorithm::collect`] instead of buffering them, and at
    /// the end of every epoch runs one update round with an empty buffer, in which the
    /// algorithm trains one pass over its set; [`Algorithm::steps_per_round`] is then the steps
    /// of one such pass and the run has `num_train_epochs` rounds. Online algorithms (the
    /// default) get every prompt's samples through the buffer.
    fn offline(&self) -> bool {
        false
    }

    /// An offline algorithm's share of a first-epoch prompt: its samples from
    /// [`Algorithm::targets`]; a collecting algorithm's, in its collecting epochs
    /// (`Scenario::collecting`, sampled with `preference.num_candidates` completions): the
    /// prompt's candidates with their rewards (`Node::into_reward_samples`); either way
    /// each agent's prompt from its template (no chat template). Every rank calls it with the same samples, in step order.
    /// A collecting epoch ends in an update round with an empty buffer, where the algorithm
    /// trains on what it collected (MARLHF's reward model).
    fn collect(&mut self, _prompts: &[String], _samples: &[NodeSample]) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "{} is not an offline algorithm",
            self.name()
        )))
    }

    /// Whether the algorithm trains nothing until its next collecting epoch (a `marlhf_iter`
    /// round that gave no pair to train on: CoMLRL skips its online passes); the loop then
    /// samples nothing in the epochs before it. `false` (the default): it trains.
    fn idle(&self) -> bool {
        false
    }

    /// A comparing algorithm's comparator in its collecting epochs (iterative MADPO): the loop
    /// samples `current` candidates of the agents and `comparator` more, from `policies` (or,
    /// when `None`, from the agents themselves in the same batch), scores each joint candidate
    /// and hands [`Algorithm::collect`] one node whose first `current` candidates are the
    /// agents' and the rest the comparator's. `None` (the default): no comparator.
    fn comparison(&self) -> Option<Comparison<'_>> {
        None
    }

    /// Replaces the task rewards of a training prompt's scored rollout tree before
    /// [`Algorithm::targets`] (MARLHF's reward model scores each joint action); `prompts` are
    /// each agent's prompt from its template (no chat template). Not called for evaluation, which reports the task reward.
    /// The default keeps the task rewards.
    fn rescore(&self, _prompts: &[String], _root: &mut Node) -> Result<()> {
        Ok(())
    }
}
