//! How a run's rollouts are produced: the settings and the parts (policies and their sampling
//! settings, reference policies, reward stack, transition, prompt formatters, the exchange with
//! other ranks) that stay the same from one prompt to the next until an update.
use super::exchange::RolloutExchange;
use super::prompt::PromptFormatter;
use crate::model::{Policy, SamplingParams};
use comlrl_reward::{RewardStack, TransitionFn};

/// How rollouts are produced.
pub struct RolloutSpec<'a> {
    /// Each agent's policy, `None` where another rank holds it.
    pub policies: &'a [Option<Policy>],
    /// The joint reward.
    pub stack: &'a RewardStack,
    /// Generations per agent per node.
    pub k: usize,
    /// Joint actions are the Cartesian product (else aligned).
    pub cross: bool,
    /// Each agent's sampling settings.
    pub sampling: &'a [SamplingParams],
    /// Frozen reference policies of the agents sampled here, when the KL penalty is on: each
    /// completion's KL to its agent's reference is computed with the rollout.
    pub references: Option<&'a [Option<Policy>]>,
    /// Turns per episode; > 1 needs `transition`.
    pub turns: usize,
    /// Stop expanding a node whose mean reward exceeds this.
    pub early_termination: Option<f64>,
    /// Writes the agents' next-turn prompts (multi-turn).
    pub transition: Option<&'a dyn TransitionFn>,
    /// Each agent's prompt formatting (template, then chat template), applied to the
    /// transition's prompts.
    pub prompts: &'a [Option<PromptFormatter>],
    /// `external_prompt_passthrough`: the transition's prompts skip the agents' `template`
    /// (a chat template still wraps them).
    pub passthrough: bool,
    /// Sample the agents at the same time (one task each on the thread pool).
    pub parallel: bool,
    /// Agents on one shared base decode together, one forward per token step for all their
    /// rows (`trainer.batch_agent_sampling`).
    pub batch_agents: bool,
    /// The exchanges with the run's other processes (identities for a process alone).
    pub exchange: &'a dyn RolloutExchange,
    /// `samples[i]`: this rank samples agent `i` (holds its first replica); other replicas of
    /// an agent hold its policy but only train it.
    pub samples: &'a [bool],
    /// Each agent's logit scale for the sampling-time log-probs kept with its completions
    /// (`AgentRollout::sampling_logprobs`), when the loss needs them.
    pub sampling_logprobs: Option<&'a [f64]>,
    /// A centralized actor's number of roles: its one policy's answers are split into that
    /// many outputs (`centralized::split`) for the joint reward; `None`: each agent's
    /// completion is its own output.
    pub roles: Option<usize>,
}

impl RolloutSpec<'_> {
    /// The agents sampled here, in agent order.
    pub fn local(&self) -> Vec<usize> {
        (0..self.samples.len())
            .filter(|&i| self.samples[i])
            .collect()
    }
}
