//! The comparator of an iterative preference round (CoMLRL 1.4.3's `comparator_policy`, shared
//! by `MADPOIterTrainer` and `MARLHFIterTrainer`): whose candidates the current policy's are
//! compared with, and how the loop samples them ([`Comparison`]).
//!
//! `current` and `current_copy` sample the agents themselves (CoMLRL's copy is taken when the
//! round starts and the round samples before it trains, so the two see the same weights; no
//! second copy is kept here); `model` a frozen model; `history` the policy saved
//! `comparator_history_k` rounds back (`<output_dir>/policy_checkpoints`, CoMLRL's layout:
//! `initial`, `iteration_0000`, …); `api` an OpenAI-compatible endpoint (`api`), each agent's
//! prompt its own request, or under `comparator_generation_mode: centralized` one request per
//! prompt for every agent (`centralized`'s tagged prompt, the answers split). A local
//! comparator (`current`, `current_copy`, `model`, `history`) under `centralized` is one
//! policy, agent `comparator_centralized_agent_index`'s (or the comparator model loaded for it,
//! or that agent's saved policy), sampling that
//! tagged prompt with that agent's settings; its answers are split and re-encoded as an
//! endpoint's ([`ComparatorSource::Centralized`]).
//!
//! A local comparator's token ids are trained as the agents' (CoMLRL decodes them and
//! re-encodes the text with the agent's tokenizer), so it must share the agents' tokenizer,
//! which the vocabulary size checks.
use super::api::{ApiComparator, ApiSettings, Sampling};
use crate::error::{Error, Result};
use crate::model::{LoadOptions, Policy};
use crate::train::algorithms::algorithm::{ComparatorSource, Comparison, TextComparator};
use crate::train::rollout::centralized;
use crate::train::setup::models::source_of;
use comlrl_scenario::{ComparatorGenerationMode, ComparatorPolicy, Scenario};
use std::path::{Path, PathBuf};

/// Where a `history` comparator's policies are saved and read.
struct History {
    /// `<output_dir>/policy_checkpoints`.
    dir: PathBuf,
    /// `comparator_history_k`.
    k: usize,
    /// How the saved policies are loaded.
    opts: LoadOptions,
}

/// The saved policies of 0-based round `iteration` with history `k`: those saved after round
/// `iteration − k`, else the latest round before it that saved every agent, else the initial
/// ones (CoMLRL `_history_policy_checkpoint_path` and `_policy_checkpoint_exists`).
fn history_dir(dir: &Path, agents: usize, k: usize, iteration: usize) -> PathBuf {
    let has_all = |d: &Path| (0..agents).all(|i| d.join(format!("agent_{i}")).is_dir());
    if let Some(target) = iteration.checked_sub(k) {
        for r in (0..=target).rev() {
            let d = dir.join(format!("iteration_{r:04}"));
            if has_all(&d) {
                return d;
            }
        }
    }
    dir.join("initial")
}

/// The `api` comparator with each agent's sampling settings.
struct Api {
    client: ApiComparator,
    sampling: Vec<Sampling>,
    /// `comparator_generation_mode: centralized`: one request per prompt for every agent, with
    /// this agent's sampling settings (`comparator_centralized_agent_index`).
    centralized: Option<usize>,
}

impl TextComparator for Api {
    fn complete(&self, agent: usize, prompt: &str, n: usize) -> Result<Vec<String>> {
        let sampling = self
            .sampling
            .get(agent)
            .copied()
            .ok_or_else(|| Error::Internal(format!("no agent {agent}")))?;
        self.client.complete(prompt, n, sampling)
    }

    fn complete_all(&self, prompts: &[String], n: usize) -> Result<Vec<Vec<String>>> {
        let Some(index) = self.centralized else {
            return prompts
                .iter()
                .enumerate()
                .map(|(i, p)| self.complete(i, p, n))
                .collect();
        };
        let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let answers = self.complete(index, &centralized::build_prompt(&refs), n)?;
        Ok(centralized::split_by_agent(&answers, prompts.len()))
    }
}

/// A round's comparator as `preference.comparator_*` sets it up.
pub struct Comparators {
    agents: usize,
    /// The agents' candidates per prompt (`num_candidates`).
    pub current: usize,
    /// The comparator's candidates per prompt (`comparator_num_candidates`).
    pub comparator: usize,
    /// The comparator samples with the agents themselves.
    self_comparator: bool,
    /// The `model` or `history` comparator's policies.
    policies: Vec<Option<Policy>>,
    history: Option<History>,
    api: Option<Api>,
    /// `comparator_generation_mode: centralized` with a local comparator: the agent whose
    /// policy (or comparator model) answers for every agent.
    centralized: Option<usize>,
    /// The agents' vocabulary, which a comparator must share.
    vocab: usize,
}

impl Comparators {
    /// The comparator of `s.preference`, loaded (`model`) or with the initial policies saved
    /// and loaded (`history`). `agents` are the policies as loaded. On MPI ranks a `model`
    /// comparator is loaded for the agents held here only; `history` and `api` are refused
    /// there (`world::Ranks::supports`).
    pub fn new(s: &Scenario, agents: &[Option<Policy>]) -> Result<Self> {
        let p = &s.preference;
        let vocab = agents
            .iter()
            .flatten()
            .map(|a| a.config.vocab_size)
            .next()
            .unwrap_or(0);
        let opts = LoadOptions {
            seed: s.seed,
            copies_now: false,
            ..LoadOptions::default()
        };
        let mut c = Comparators {
            agents: s.agents.len(),
            current: p.num_candidates,
            comparator: p.comparator_num_candidates.unwrap_or(p.num_candidates),
            self_comparator: matches!(
                p.comparator_policy,
                ComparatorPolicy::Current | ComparatorPolicy::CurrentCopy
            ),
            policies: Vec::new(),
            history: None,
            api: None,
            centralized: (p.comparator_generation_mode == ComparatorGenerationMode::Centralized
                && p.comparator_policy != ComparatorPolicy::Api)
                .then_some(p.comparator_centralized_agent_index),
            vocab,
        };
        match p.comparator_policy {
            ComparatorPolicy::Current | ComparatorPolicy::CurrentCopy => {}
            ComparatorPolicy::Model => {
                let model = p.comparator_model.as_ref().ok_or_else(|| {
                    Error::Config(
                        "preference.comparator_policy model needs comparator_model".into(),
                    )
                })?;
                // One frozen model serves every agent: loaded once per agent held here, so
                // that each samples with its own copy (agents sample at the same time). A
                // centralized one answers for every agent at once: one copy, in its agent's slot.
                c.policies = (0..c.agents).map(|_| None).collect();
                let centralized = c.centralized;
                for (_, (slot, _)) in c
                    .policies
                    .iter_mut()
                    .zip(agents)
                    .enumerate()
                    .filter(|(i, (_, a))| a.is_some() && centralized.is_none_or(|c| c == *i))
                {
                    let policy =
                        Policy::load(&source_of(model, &s.base_dir)?, &opts).map_err(|e| {
                            Error::from(e).within(format!("the comparator model {}", model.spec))
                        })?;
                    *slot = Some(policy);
                }
                for p in c.policies.iter().flatten() {
                    c.check_vocab(p, &model.spec)?;
                }
            }
            ComparatorPolicy::History => {
                if s.agents.iter().any(|a| a.adapter.is_some()) {
                    return Err(Error::Config(
                        "preference.comparator_policy history saves whole policies each round; \
                         agents with a LoRA `adapter` are not supported yet: use `current` or `model`"
                            .into(),
                    ));
                }
                let dir = s.output_dir.join("policy_checkpoints");
                let initial = dir.join("initial");
                // CoMLRL saves the untrained agents once; a resumed run finds them there.
                if !initial.join("agent_0").is_dir() {
                    for (i, a) in agents.iter().enumerate() {
                        if let Some(a) = a {
                            a.save(&initial.join(format!("agent_{i}")))?;
                        }
                    }
                }
                c.history = Some(History {
                    dir,
                    k: p.comparator_history_k.unwrap_or(1),
                    opts,
                });
                c.load_history(0)?;
            }
            ComparatorPolicy::Api => {
                let url = p.comparator_api_url.clone().ok_or_else(|| {
                    Error::Config(
                        "preference.comparator_policy api needs comparator_api_url".into(),
                    )
                })?;
                c.api = Some(Api {
                    client: ApiComparator::new(ApiSettings {
                        url,
                        model: p.comparator_api_model.clone(),
                        max_n: p.comparator_api_max_n_per_request,
                        timeout: p.comparator_api_timeout,
                        retries: p.comparator_api_retries,
                        key_env: p.comparator_api_key_env.clone(),
                        key_header: p.comparator_api_key_header.clone(),
                        key_prefix: p.comparator_api_key_prefix.clone(),
                    }),
                    sampling: s
                        .agents
                        .iter()
                        .map(|a| Sampling {
                            max_new_tokens: a.sampling.max_new_tokens,
                            temperature: a.sampling.temperature,
                            top_p: a.sampling.top_p,
                        })
                        .collect(),
                    centralized: (p.comparator_generation_mode
                        == ComparatorGenerationMode::Centralized)
                        .then_some(p.comparator_centralized_agent_index),
                });
            }
        }
        Ok(c)
    }

    /// What the loop samples in a collecting pass.
    pub fn comparison(&self) -> Comparison<'_> {
        Comparison {
            current: self.current,
            comparator: self.comparator,
            source: match (&self.api, self.centralized, self.self_comparator) {
                (Some(api), _, _) => ComparatorSource::Texts(api),
                (None, Some(index), true) => ComparatorSource::Centralized {
                    index,
                    policies: None,
                },
                (None, Some(index), false) => ComparatorSource::Centralized {
                    index,
                    policies: Some(&self.policies),
                },
                (None, None, true) => ComparatorSource::Agents,
                (None, None, false) => ComparatorSource::Policies(&self.policies),
            },
        }
    }

    /// The comparator's token ids are trained as the agents': it must share their vocabulary.
    fn check_vocab(&self, policy: &Policy, spec: &str) -> Result<()> {
        if policy.config.vocab_size != self.vocab {
            return Err(Error::Config(format!(
                "the comparator {spec} has a vocabulary of {} tokens and the agents {}: its \
                 answers are trained as the agents' token ids, so it must share their tokenizer",
                policy.config.vocab_size, self.vocab
            )));
        }
        Ok(())
    }

    /// The saved policies the `history` comparator of 0-based round `iteration` samples with:
    /// those saved after round `iteration − k` (the latest saved at or before it), else the
    /// initial ones (CoMLRL `_history_policy_checkpoint_path`). Nothing for other comparators.
    pub fn load_history(&mut self, iteration: usize) -> Result<()> {
        let Some(h) = &self.history else {
            return Ok(());
        };
        let agents = self.agents;
        let dir = history_dir(&h.dir, agents, h.k, iteration);
        let mut policies = Vec::with_capacity(agents);
        for i in 0..agents {
            // A centralized comparator samples with one agent's saved policy (CoMLRL
            // `_load_single_policy_checkpoint_agent`): the others are not loaded.
            if self.centralized.is_some_and(|c| c != i) {
                policies.push(None);
                continue;
            }
            let path = dir.join(format!("agent_{i}"));
            let source = crate::model::ModelSource::local(path.clone());
            let policy = Policy::load(&source, &h.opts).map_err(|e| {
                Error::from(e).within(format!(
                    "the history comparator of round {} ({})",
                    iteration + 1,
                    path.display()
                ))
            })?;
            policies.push(Some(policy));
        }
        for p in policies.iter().flatten() {
            self.check_vocab(p, &dir.display().to_string())?;
        }
        self.policies = policies;
        Ok(())
    }

    /// After 0-based round `finished` trained: a `history` comparator saves the agents'
    /// `policies` (index, policy) as that round's and loads the next round's comparator.
    pub fn round_done<'p>(
        &mut self,
        finished: usize,
        policies: impl Iterator<Item = (usize, &'p Policy)>,
    ) -> Result<()> {
        let Some(h) = &self.history else {
            return Ok(());
        };
        let dir = h.dir.join(format!("iteration_{finished:04}"));
        for (i, p) in policies {
            p.save(&dir.join(format!("agent_{i}")))?;
        }
        self.load_history(finished + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelSource;

    fn tiny(seed: u64) -> Policy {
        let opts = LoadOptions {
            seed,
            copies_now: false,
            ..LoadOptions::default()
        };
        Policy::load(&ModelSource::Builtin("tiny".into()), &opts).unwrap()
    }

    /// `p`'s first weight tensor, flattened.
    fn weights(p: &Policy) -> Vec<f32> {
        let (_, v) = p.vars().into_iter().next().unwrap();
        v.as_tensor().flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn the_history_round_is_the_latest_saved_by_every_agent() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let save = |d: &str, agents: &[usize]| {
            for i in agents {
                std::fs::create_dir_all(dir.join(d).join(format!("agent_{i}"))).unwrap();
            }
        };
        save("initial", &[0, 1]);
        save("iteration_0000", &[0, 1]);
        save("iteration_0001", &[0]);
        // Round 0 with k = 1 has no round before it: the initial policies.
        assert_eq!(history_dir(dir, 2, 1, 0), dir.join("initial"));
        assert_eq!(history_dir(dir, 2, 1, 1), dir.join("iteration_0000"));
        // Round 1 saved agent 0 only: CoMLRL's existence check skips it.
        assert_eq!(history_dir(dir, 2, 1, 2), dir.join("iteration_0000"));
        assert_eq!(history_dir(dir, 2, 2, 1), dir.join("initial"));
        assert_eq!(history_dir(dir, 1, 1, 2), dir.join("iteration_0001"));
    }

    #[test]
    fn a_centralized_history_comparator_loads_its_agents_saved_policy_alone() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("r.rhai"), "fn reward(c, ctx) { 1.0 }").unwrap();
        let text = format!(
            "dataset: {{prompts: [\"Hi\"]}}\nreward: {{rhai: r.rhai}}\n\
             agents: {{count: 2, model: builtin:tiny}}\ntrainer: {{algorithm: madpo_iter}}\n\
             preference: {{comparator_policy: history, comparator_generation_mode: centralized, \
             comparator_centralized_agent_index: 1}}\noutput_dir: {}\n",
            tmp.path().join("out").display()
        );
        let s = comlrl_scenario::load_str(&text, &tmp.path().join("s.yaml"), &[]).unwrap();
        let agents = vec![Some(tiny(s.seed)), Some(tiny(s.seed))];
        let mut c = Comparators::new(&s, &agents).unwrap();
        // Round 0: agent 1's initial policy, agent 0's not loaded.
        assert!(c.policies[0].is_none());
        assert_eq!(
            weights(c.policies[1].as_ref().unwrap()),
            weights(&tiny(s.seed))
        );
        assert!(matches!(
            c.comparison().source,
            ComparatorSource::Centralized {
                index: 1,
                policies: Some(_)
            }
        ));
        // Round 0 trained to other weights: round 1 samples with agent 1's as saved then.
        let trained = [tiny(s.seed + 7), tiny(s.seed + 8)];
        assert_ne!(weights(&trained[1]), weights(&tiny(s.seed)));
        c.round_done(0, trained.iter().enumerate()).unwrap();
        let saved = s.output_dir.join("policy_checkpoints/iteration_0000");
        assert!(saved.join("agent_0/config.json").is_file());
        assert!(c.policies[0].is_none());
        assert_eq!(
            weights(c.policies[1].as_ref().unwrap()),
            weights(&trained[1])
        );
    }
}
