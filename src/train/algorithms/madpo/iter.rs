//! Iterative MADPO (CoMLRL 1.4.3's `MADPOIterTrainer`): `preference.num_iterations` rounds,
//! each one collecting epoch of the loop (`Scenario::collect_epochs`). In a round every prompt's
//! current-policy candidates (`num_candidates`) are sampled beside a comparator's
//! (`comparator_num_candidates`), all scored by the task reward; candidate i of each side form a
//! pair when their rewards differ, `pair_selection` keeps some (`rollout::pairs`,
//! `select_compared_pairs`). At the round's end the round's pairs join the history as a shard,
//! `replay_mode` picks the pairs to train on (`replay`), and `trainer.num_train_epochs` passes of
//! MADPO's loss run over them (`Madpo::train_pass`).
//!
//! Comparators (`comparator_policy`): `current` and `current_copy` sample the agents themselves
//! (CoMLRL's copy is taken when the round starts and the round samples before it trains, so the
//! two see the same weights; no second copy is kept here); `model` a frozen model; `history` the
//! policy saved `comparator_history_k` rounds back (`<output_dir>/policy_checkpoints`, CoMLRL's
//! layout: `initial`, `iteration_0000`, …); `api` an OpenAI-compatible endpoint (`api`).
//!
//! A pair's two sides are token ids as sampled (CoMLRL decodes the comparator's and re-encodes
//! the text with the agent's tokenizer; a local comparator must therefore share the agents'
//! tokenizer, which the vocabulary size checks). An endpoint's texts are encoded as CoMLRL
//! does: the agent's tokenizer, no special tokens, so no EOS.
//!
//! The checkpoint holds the preference history (every round's pairs and the entries they use),
//! the shards, the round index and the generators, so a resumed run goes on collecting the
//! round where it stopped and never samples a finished prompt again; the `history`
//! comparator's policies are read back from their saved folders.
use super::api::{ApiComparator, ApiSettings, Sampling};
use super::replay::{self, Replay};
use super::set::PreferenceSet;
use super::Madpo;
use crate::error::{Error, Result};
use crate::model::{LoadOptions, Policy};
use crate::train::algorithms::algorithm::{
    Algorithm, ComparatorSource, Comparison, TextComparator,
};
use crate::train::algorithms::round::{AgentUpdate, Round};
use crate::train::rollout::pairs::PairSelection;
use crate::train::rollout::{Node, NodeSample};
use crate::train::run::checkpoint::CheckpointPart;
use crate::train::setup::models::source_of;
use comlrl_scenario::{ComparatorPolicy, Scenario};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The checkpoint file (written with agent 0's files).
pub const CHECKPOINT_FILE: &str = "madpo_iter_state.json";

/// The most a checkpoint's state file may hold (token ids; far below this).
const FILE_CAP: u64 = 1 << 34;

/// What the checkpoint keeps.
#[derive(Serialize, Deserialize)]
struct Saved {
    set: PreferenceSet,
    shards: Vec<Range<usize>>,
    iteration: usize,
    rng: ChaCha8Rng,
}

/// Where a `history` comparator's policies are saved and read.
struct History {
    /// `<output_dir>/policy_checkpoints`.
    dir: PathBuf,
    /// `comparator_history_k`.
    k: usize,
    /// How the saved policies are loaded.
    opts: LoadOptions,
}

/// The `api` comparator with each agent's sampling settings.
struct Api {
    client: ApiComparator,
    sampling: Vec<Sampling>,
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
}

/// Iterative MADPO with its history of rounds.
pub struct MadpoIter {
    madpo: Madpo,
    agents: usize,
    current: usize,
    comparator: usize,
    /// The comparator samples with the agents themselves.
    self_comparator: bool,
    /// The `model` or `history` comparator's policies.
    policies: Vec<Option<Policy>>,
    history: Option<History>,
    api: Option<Api>,
    selection: PairSelection,
    limit: Option<usize>,
    replay: Replay,
    /// DPO passes over a round's pairs.
    passes: usize,
    /// Each finished round's range of `madpo.set.pairs`.
    shards: Vec<Range<usize>>,
    /// Rounds finished (trained).
    iteration: usize,
    /// The agents' vocabulary, which a comparator must share.
    vocab: usize,
}

impl MadpoIter {
    /// Iterative MADPO as `s.preference` sets it up, with the comparator loaded (`model`) or
    /// the initial policies saved and loaded (`history`). `agents` are the policies as loaded.
    ///
    /// On MPI ranks each rank samples and trains its agents with the comparator `current`,
    /// `current_copy` or `model` beside them (a `model` comparator is loaded for the agents
    /// held here only); `history` and `api` are refused there (`world::Ranks::supports`).
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
        let mut it = MadpoIter {
            madpo: Madpo::new(s),
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
            selection: p.pair_selection,
            limit: p.pairs_per_sample,
            replay: Replay {
                mode: p.replay_mode,
                k: p.replay_k,
                lambda: p.replay_lambda,
                sample_size: p.replay_sample_size,
            },
            passes: s.trainer.num_train_epochs,
            shards: Vec::new(),
            iteration: 0,
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
                // that each samples with its own copy (agents sample at the same time).
                it.policies = (0..it.agents).map(|_| None).collect();
                for (slot, _) in it
                    .policies
                    .iter_mut()
                    .zip(agents)
                    .filter(|(_, a)| a.is_some())
                {
                    let policy =
                        Policy::load(&source_of(model, &s.base_dir)?, &opts).map_err(|e| {
                            Error::from(e).within(format!("the comparator model {}", model.spec))
                        })?;
                    *slot = Some(policy);
                }
                for p in it.policies.iter().flatten() {
                    it.check_vocab(p, &model.spec)?;
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
                it.history = Some(History {
                    dir,
                    k: p.comparator_history_k.unwrap_or(1),
                    opts,
                });
                it.load_history()?;
            }
            ComparatorPolicy::Api => {
                let url = p.comparator_api_url.clone().ok_or_else(|| {
                    Error::Config(
                        "preference.comparator_policy api needs comparator_api_url".into(),
                    )
                })?;
                it.api = Some(Api {
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
                });
            }
        }
        Ok(it)
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

    /// The saved policies the `history` comparator of round `self.iteration` samples with:
    /// those saved after round `iteration − k` (the latest saved at or before it), else the
    /// initial ones (CoMLRL `_history_policy_checkpoint_path`).
    fn load_history(&mut self) -> Result<()> {
        let Some(h) = &self.history else {
            return Ok(());
        };
        let agents = self.agents;
        let has_all = |d: &Path| (0..agents).all(|i| d.join(format!("agent_{i}")).is_dir());
        let mut dir = h.dir.join("initial");
        if let Some(target) = self.iteration.checked_sub(h.k) {
            for r in (0..=target).rev() {
                let d = h.dir.join(format!("iteration_{r:04}"));
                if has_all(&d) {
                    dir = d;
                    break;
                }
            }
        }
        let mut policies = Vec::with_capacity(agents);
        for i in 0..agents {
            let path = dir.join(format!("agent_{i}"));
            let source = crate::model::ModelSource::local(path.clone());
            let policy = Policy::load(&source, &h.opts).map_err(|e| {
                Error::from(e).within(format!(
                    "the history comparator of round {} ({})",
                    self.iteration + 1,
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

    /// Where this round's pairs start in the set.
    fn round_start(&self) -> usize {
        self.shards.last().map_or(0, |r| r.end)
    }
}

impl Algorithm for MadpoIter {
    fn name(&self) -> &'static str {
        "madpo_iter"
    }

    fn targets(&self, root: Node) -> Result<Vec<NodeSample>> {
        Ok(root.into_reward_samples())
    }

    /// The passes over the round's pairs as `replay` will size them.
    fn steps_per_round(&self) -> usize {
        let start = self.round_start();
        let current = self.madpo.set.pairs.len().saturating_sub(start);
        let mut sizes: Vec<usize> = self.shards.iter().map(|r| r.len()).collect();
        sizes.push(current);
        let n = match replay::draw(&self.replay, &sizes) {
            replay::Draw::Current => current,
            replay::Draw::Sample { sample_size, .. } => sample_size,
        };
        self.passes * n.div_ceil(self.madpo.batch)
    }

    fn comparison(&self) -> Option<Comparison<'_>> {
        Some(Comparison {
            current: self.current,
            comparator: self.comparator,
            source: match (&self.api, self.self_comparator) {
                (Some(api), _) => ComparatorSource::Texts(api),
                (None, true) => ComparatorSource::Agents,
                (None, false) => ComparatorSource::Policies(&self.policies),
            },
        })
    }

    fn collect(&mut self, _prompts: &[String], samples: &[NodeSample]) -> Result<()> {
        for node in samples.iter().filter(|n| n.turn == 0) {
            self.madpo.set.add_compared(
                node,
                self.current,
                self.selection,
                self.limit,
                &mut self.madpo.rng,
            )?;
        }
        Ok(())
    }

    fn update(
        &mut self,
        mut round: Round<'_>,
        buffer: &[NodeSample],
    ) -> Result<Vec<(usize, AgentUpdate)>> {
        let team = round.team();
        let learners = super::preference_learners(&mut round, buffer, "madpo_iter")?;
        let start = self.round_start();
        let generated = self.madpo.set.pairs.len() - start;
        self.shards.push(start..self.madpo.set.pairs.len());
        let pairs = replay::select(
            &self.replay,
            &self.madpo.set.pairs,
            &self.shards,
            &mut self.madpo.rng,
        );
        for _ in 0..self.passes {
            self.madpo.train_pass(learners, team, &pairs)?;
        }
        // The window reports an algorithm's metric as its mean over the agent's steps (a
        // round's window holds that round's steps alone): these are per round.
        let steps = (self.passes * pairs.len().div_ceil(self.madpo.batch)).max(1) as f64;
        for l in learners.iter_mut() {
            l.record("iter_round", (self.iteration + 1) as f64 * steps);
            l.record("iter_round_pairs", generated as f64 * steps);
            l.record("iter_train_pairs", pairs.len() as f64 * steps);
        }
        self.iteration += 1;
        if let Some(h) = &self.history {
            let dir = h.dir.join(format!("iteration_{:04}", self.iteration - 1));
            for l in learners.iter() {
                l.policy().save(&dir.join(format!("agent_{}", l.index())))?;
            }
            self.load_history()?;
        }
        Ok(round.finish())
    }
}

impl CheckpointPart for MadpoIter {
    fn files(&self, agent: usize) -> Vec<String> {
        if agent == 0 {
            vec![CHECKPOINT_FILE.into()]
        } else {
            vec![]
        }
    }

    fn save(&self, dir: &Path, writes: &[bool]) -> Result<()> {
        if !writes.first().copied().unwrap_or(false) {
            return Ok(());
        }
        let saved = Saved {
            set: self.madpo.set.clone(),
            shards: self.shards.clone(),
            iteration: self.iteration,
            rng: self.madpo.rng.clone(),
        };
        let text = serde_json::to_string(&saved)
            .map_err(|e| Error::serialize("the MADPOIter state", e))?;
        let path = dir.join(CHECKPOINT_FILE);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    /// Every rank reads the file (written with agent 0's): each trains its agents on the same
    /// set, in the same order.
    fn load(&mut self, dir: &Path, _held: &[bool]) -> Result<()> {
        let path = dir.join(CHECKPOINT_FILE);
        let text =
            comlrl_scenario::files::read_text(&path, FILE_CAP, "it is not a file comlrl wrote")
                .map_err(|e| Error::io(&path, e))?;
        let saved: Saved = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(&path, "not a MADPOIter state", e))?;
        let n = saved.set.pairs.len();
        let mut end = 0;
        for r in &saved.shards {
            if r.start != end || r.end < r.start || r.end > n {
                return Err(Error::checkpoint(
                    &path,
                    format!("its rounds' ranges of pairs do not tile the set ({r:?} of {n} pairs)"),
                ));
            }
            end = r.end;
        }
        if saved.shards.len() != saved.iteration {
            return Err(Error::checkpoint(
                &path,
                format!(
                    "it records {} finished rounds but {} rounds of pairs",
                    saved.iteration,
                    saved.shards.len()
                ),
            ));
        }
        super::check_set(&saved.set, self.agents, &path)?;
        self.madpo.set = saved.set;
        self.madpo.rng = saved.rng;
        self.shards = saved.shards;
        self.iteration = saved.iteration;
        self.load_history()
    }
}
