//! The `preference` section's key table (`keys.rs` has the macro and the row syntax): the
//! settings of CoMLRL 1.4.3's preference trainers that its `MAGRPOConfig` fields (the `trainer`
//! section) do not cover: `MADPOConfig`'s (`trainer.algorithm: madpo` and `marlhf`),
//! `MARLHFConfig`'s (`marlhf`: `rl_algorithm` and the reward model's `reward_*`, under CoMLRL's
//! own field names so that a CoMLRL config maps one to one) and the iterative trainers'
//! (`madpo_iter`, `marlhf_iter`: rounds, replay, comparator). Values marked "CoMLRL" are those
//! classes' defaults. [`RawPreference`], [`PreferencePlan`] and the docs
//! table derive from it; [`resolve`] adds the checks that involve the `trainer` section.
use crate::agents::model_ref;
use crate::collect::Diags;
use crate::keys::{
    at_least, if_set, learning_rate, positive, section, Bad, Relevance, SectionContext,
};
use crate::plan::{
    AdvantageMode, AdvantageScale, Algorithm, CollaborationMode, ComparatorGenerationMode,
    ComparatorPolicy, JointMode, ModelRef, ModelSource, PairSelection, ReplayMode,
    RewardAggregation, RlAlgorithm, ScoringReward, TrainerPlan,
};
use crate::positions::KeyPath;
use std::path::Path;

/// The most joint candidates MADPO samples per prompt: each agent samples them in one batch and
/// the pairs of a prompt grow as its square, so a scenario's number never sizes an unbounded
/// allocation.
pub const MAX_CANDIDATES: usize = 1024;

/// The most reward-model epochs over the preference set.
pub const MAX_REWARD_EPOCHS: usize = 10_000;

/// The most rounds of an iterative trainer (each keeps its preference set for replay).
pub const MAX_ITERATIONS: usize = 10_000;

/// What the `preference` resolver needs from the rest of the scenario.
pub(crate) struct PreferenceContext<'a> {
    /// `trainer.algorithm`.
    pub algorithm: Algorithm,
    /// The scenario's directory (a relative reward model path).
    pub base: &'a Path,
}

impl SectionContext for PreferenceContext<'_> {}

section! {
    raw /// `preference:` — CoMLRL's preference trainers (MADPO, MARLHF).
        RawPreference;
    plan /// The preference trainers' settings (CoMLRL 1.4.3 `MADPOConfig`, `MARLHFConfig`).
        PreferencePlan, context cx: PreferenceContext<'_>;
    computed {
        /// The run learns from preferences (`trainer.algorithm: madpo` or `marlhf`): the keys
        /// matter.
        active: bool = cx.algorithm.learns_from_preferences();
        /// The run learns a reward model (`trainer.algorithm: marlhf` or `marlhf_iter`).
        marlhf: bool = cx.algorithm.learns_reward_model();
        /// The run trains in rounds against a comparator (`trainer.algorithm: madpo_iter` or
        /// `marlhf_iter`).
        iter: bool = cx.algorithm.iterative();
        /// The run is iterative MARLHF (`trainer.algorithm: marlhf_iter`).
        marlhf_iter: bool = cx.algorithm == Algorithm::MarlhfIter;
    }
    keys {
        /// K: answers each agent samples per training prompt, once, before training (CoMLRL
        /// `preference_num_candidates`); joint candidate i is every agent's i-th answer, scored
        /// by one joint reward. Under `madpo` it is also `trainer.num_generations` (written
        /// there by the loader; another value there is an error).
        num_candidates: usize = if iter { 20 } else { 80 }, kind "integer in 2..=1024",
            shown "`80`; `20` with `madpo_iter`, `marlhf_iter`",
            why "CoMLRL (`MADPOIterConfig`, `MARLHFIterConfig`: 20)",
            check candidates, only Only::Preference;
        /// Which of a prompt's candidate pairs with a positive reward gap become preference
        /// pairs: `reward_gap` keeps the `pairs_per_sample` largest gaps (equal gaps in
        /// (winner, loser) order, as CoMLRL's stable sort), `random` `pairs_per_sample` drawn
        /// uniformly from the run's seeded generator (CoMLRL draws from Python's, so the pairs
        /// differ from its), `all` every one. Under `madpo_iter` a pair is the current policy's
        /// candidate i against the comparator's candidate i (one pair per index at most), and
        /// `comparator_reward` (its default, and only there) keeps the `pairs_per_sample` whose
        /// comparator candidate scored highest, ties by the larger gap, as CoMLRL.
        pair_selection: PairSelection = if iter {
                PairSelection::ComparatorReward
            } else {
                PairSelection::RewardGap
            },
            kind "`reward_gap` \\| `random` \\| `all` \\| `comparator_reward`",
            shown "`reward_gap`; `comparator_reward` with `madpo_iter`, `marlhf_iter`", why "CoMLRL",
            only Only::Preference;
        /// At most this many pairs per prompt (`null`: every pair); must be `null` under
        /// `pair_selection: all` (CoMLRL `preference_pairs_per_sample`).
        pairs_per_sample: Option<usize> = match pair_selection {
                PairSelection::All => None,
                _ if iter => Some(4),
                _ => Some(16),
            },
            kind "integer ≥ 1 or `null`",
            shown "`16`; `4` with `madpo_iter`, `marlhf_iter`; `null` under `pair_selection: all`",
            why "CoMLRL (which makes `all` write `null` itself)",
            check if_set(at_least(1, "use `pairs_per_sample: null` for every pair")),
            only Only::Preference;
        /// β of the DPO loss −log σ(β·(Δ_i + Σ_{j≠i} sg(Δ_j))) (CoMLRL `dpo_beta`).
        dpo_beta: f64 = 0.1, kind "number > 0", why "CoMLRL",
            check positive("use e.g. `dpo_beta: 0.1`"), only Only::Preference;
        /// `decentralized`: each agent its own policy over its own prompt; `centralized`: one
        /// policy writes every agent's part (CoMLRL's field of `MADPOConfig`): the same as
        /// `trainer.collaboration_mode`, which it sets (and follows). Ported for `madpo` and
        /// `marlhf`; an error under `madpo_iter` and `marlhf_iter`.
        collaboration_mode: CollaborationMode = CollaborationMode::Decentralized,
            kind "`decentralized` \\| `centralized`", why "CoMLRL", only Only::Preference;
        /// Count environment steps as `environment_steps_per_pair` per trained pair (the
        /// `preference/env_steps` metric); `false` counts none (CoMLRL `use_environment_step`,
        /// its W&B step).
        use_environment_step: bool = true, kind "bool", why "CoMLRL", only Only::Preference;
        /// Environment steps one trained pair counts for (its two joint candidates).
        environment_steps_per_pair: usize = 2, kind "integer ≥ 1", why "CoMLRL",
            check at_least(1, "use `environment_steps_per_pair: 2` (a pair is two joint candidates)"),
            only Only::Preference;
        /// CoMLRL 1.4.3's sequence log-prob cuts a candidate at its first pad token and then
        /// leaves out its last token; comlrl counts every sampled token (EOS included), as its
        /// MAGRPO loss does. `true` reproduces CoMLRL (whose centralized MADPO counts every
        /// token: nothing to reproduce there).
        compat_last_token: bool = false, kind "bool",
            why "the fix (CoMLRL 1.4.3 drops the last token)", only Only::Preference;
        /// MARLHF's online algorithm against the frozen reward model (CoMLRL `rl_algorithm`):
        /// `magrpo`, `mareinforce`, `marloo`, `maremax` (MAGRPO with that `advantage_mode`,
        /// which `trainer.advantage_mode` then must not contradict), or the actor-critics `iac`
        /// and `maac`, whose critic is `trainer.critic` (the trainer's other defaults stay
        /// MARLHF's, as CoMLRL passes its own config's values to the actor-critic trainer).
        rl_algorithm: RlAlgorithm = RlAlgorithm::Magrpo,
            kind "`magrpo` \\| `mareinforce` \\| `marloo` \\| `maremax` \\| `iac` \\| `maac`", why "CoMLRL",
            only Only::Marlhf;
        /// The reward model's AdamW learning rate (CoMLRL `reward_learning_rate`; constant, no
        /// schedule, no clipping, and torch's AdamW defaults for the rest — betas 0.9 / 0.999,
        /// epsilon 1e-8, weight decay 0.01 — as CoMLRL builds it).
        reward_learning_rate: f64 = 1.0e-5, kind "number > 0", why "CoMLRL",
            check learning_rate, only Only::Marlhf;
        /// Passes of the reward model over the preference set (under `marlhf_iter`, over a
        /// round's replayed pairs), each in a freshly shuffled order (CoMLRL
        /// `reward_num_train_epochs`).
        reward_num_train_epochs: usize = if iter { 2 } else { 1 }, kind "integer in 1..=10000",
            shown "`1`; `2` with `marlhf_iter`",
            why "CoMLRL (`MARLHFIterConfig`: 2)",
            check reward_epochs, only Only::Marlhf;
        /// Preference pairs per reward-model step (CoMLRL `reward_train_batch_size`).
        reward_train_batch_size: usize = 1, kind "integer ≥ 1", why "CoMLRL",
            check at_least(1, "use e.g. `reward_train_batch_size: 1`"), only Only::Marlhf;
        /// Joint texts longer than this many tokens are cut at the end before scoring (CoMLRL
        /// `reward_max_length`); `null`: never cut (a text beyond the model's context is then
        /// an error, where CoMLRL cuts at the tokenizer's limit).
        reward_max_length: Option<usize> = None, kind "integer ≥ 1 or `null`", shown "`null`",
            why "CoMLRL", check if_set(at_least(1, "use `reward_max_length: null` not to cut")),
            only Only::Marlhf;
        /// Train the reward head alone, the backbone frozen (CoMLRL `reward_freeze_backbone`).
        reward_freeze_backbone: bool = false, kind "bool", why "CoMLRL", only Only::Marlhf;
        /// Rounds of `madpo_iter` and `marlhf_iter`: each one pass over the training prompts that
        /// samples the current policy's and the comparator's candidates and pairs them, then
        /// (`madpo_iter`) `trainer.num_train_epochs` DPO passes over the round's replayed pairs,
        /// or (`marlhf_iter`) a reward model trained afresh on them and `num_train_epochs`
        /// online epochs against it (CoMLRL `num_iterations`).
        num_iterations: usize = 6, kind "integer in 1..=10000", why "CoMLRL",
            check iterations, only Only::Iter;
        /// Which rounds' preference sets a round trains on (CoMLRL `preference_replay_mode`):
        /// `current` its own; `nearest_k` the last `replay_k` rounds' (its own included);
        /// `all_history` every round's; `lambda_decay` every round's, the set of age a (0: this
        /// round's) drawn with weight (1−λ)·λ^a, normalised (λ = 1: equal weights). Except for
        /// `current`, `replay_sample_size` pairs are drawn: each from a set chosen by weight
        /// (equal but for `lambda_decay`; rounds with no pair left out), then without
        /// replacement within the set, then shuffled.
        replay_mode: ReplayMode = ReplayMode::Current,
            kind "`current` \\| `nearest_k` \\| `all_history` \\| `lambda_decay`", why "CoMLRL",
            only Only::Iter;
        /// The rounds `nearest_k` replays (CoMLRL `preference_replay_k`); required there, `null`
        /// (or 1) under `current`, an error elsewhere.
        replay_k: Option<usize> = None, kind "integer ≥ 1 or `null`", shown "`null`",
            why "CoMLRL", check if_set(at_least(1, "use e.g. `replay_k: 2`")), only Only::Iter;
        /// λ of `lambda_decay`, in [0, 1] (CoMLRL `preference_replay_lambda`); required there,
        /// an error elsewhere.
        replay_lambda: Option<f64> = None, kind "number in [0, 1] or `null`", shown "`null`",
            why "CoMLRL", check if_set(unit_interval), only Only::Iter;
        /// Pairs a replaying round trains on (CoMLRL `preference_replay_sample_size`); `null`:
        /// as many as the round generated (else the latest round that had any). An error under
        /// `current`.
        replay_sample_size: Option<usize> = None, kind "integer in 1..=1000000 or `null`",
            shown "`null`", why "CoMLRL", check if_set(replay_sample), only Only::Iter;
        /// Whose candidates the current policy's are compared with (CoMLRL
        /// `comparator_policy`): `current` (the policy itself, other draws), `current_copy` (a
        /// copy taken at the round's start: the same weights while the round samples, so the
        /// same as `current` here, which keeps no second copy), `model` (`comparator_model`,
        /// frozen), `history` (the policy as saved `comparator_history_k` rounds ago, the
        /// initial one before that; saved under `<output_dir>/policy_checkpoints`), `api` (an
        /// OpenAI-compatible chat-completions endpoint, `comparator_api_*`; its texts are
        /// tokenized with the agents' tokenizers, no EOS, as CoMLRL re-encodes them).
        /// `marlhf_iter` refuses `history` (not ported there yet).
        comparator_policy: ComparatorPolicy = ComparatorPolicy::Current,
            kind "`current` \\| `current_copy` \\| `model` \\| `history` \\| `api`", why "CoMLRL",
            only Only::Iter;
        /// `decentralized`: each agent's comparator answers that agent's prompt; `centralized`:
        /// one comparator answers one prompt that asks for every agent's output in tagged
        /// sections (CoMLRL's `TaggedCentralizedComparatorAdapter`), then split into the
        /// agents' outputs (an answer with no section: every agent's output empty, where CoMLRL
        /// stops with a parse error). CoMLRL `comparator_generation_mode`; under `centralized`
        /// the policy of agent `comparator_centralized_agent_index` (`current`,
        /// `current_copy`), the comparator model (`model`) or that agent's saved policy
        /// (`history`, loaded alone) samples the tagged prompt, or the endpoint answers it
        /// (`api`).
        comparator_generation_mode: ComparatorGenerationMode = ComparatorGenerationMode::Decentralized,
            kind "`decentralized` \\| `centralized`", why "CoMLRL", only Only::Iter;
        /// Whose sampling settings (and, with `current` / `current_copy`, whose policy) the
        /// `centralized` comparator answers with (0-based; CoMLRL
        /// `comparator_centralized_agent_index`); below the number of agents.
        comparator_centralized_agent_index: usize = 0, kind "integer ≥ 0", why "CoMLRL",
            only Only::Iter;
        /// Candidates the comparator samples per prompt (CoMLRL `comparator_num_candidates`);
        /// `null`: `num_candidates`. Pairs compare index i of both, so only the first
        /// min(K, this) of each pair up.
        comparator_num_candidates: Option<usize> = None, kind "integer in 1..=1024 or `null`",
            shown "`null`", why "CoMLRL", check if_set(comparator_candidates), only Only::Iter;
        /// How many rounds back the `history` comparator is (CoMLRL `comparator_history_k`);
        /// `null`: 1 under `history`, an error with another comparator.
        comparator_history_k: Option<usize> = None, kind "integer ≥ 1 or `null`", shown "`null`",
            why "CoMLRL", check if_set(at_least(1, "use `comparator_history_k: 1` (the last round)")),
            only Only::Iter;
        /// The `api` comparator's chat-completions URL (CoMLRL `comparator_api_url`, spoken in
        /// its `comparator_api_format: openai`); required there.
        comparator_api_url: Option<String> = None, kind "string or `null`", shown "`null`",
            why "CoMLRL", only Only::Iter;
        /// The request's `model` field (CoMLRL `comparator_api_model`); `null` leaves it out.
        comparator_api_model: Option<String> = None, kind "string or `null`", shown "`null`",
            why "CoMLRL", only Only::Iter;
        /// Candidates asked for per request, `n` (CoMLRL `comparator_api_max_n_per_request`);
        /// `null`: all of a prompt's in one.
        comparator_api_max_n_per_request: Option<usize> = None, kind "integer ≥ 1 or `null`",
            shown "`null`", why "CoMLRL",
            check if_set(at_least(1, "use `comparator_api_max_n_per_request: null` for one request")),
            only Only::Iter;
        /// Seconds one request may take, connection to last byte (CoMLRL
        /// `comparator_api_timeout`).
        comparator_api_timeout: f64 = 120.0, kind "number > 0", why "CoMLRL",
            check positive("use e.g. `comparator_api_timeout: 120`"), only Only::Iter;
        /// Further tries of a request that timed out, failed to connect or got HTTP 429 / 5xx
        /// (other statuses are errors at once).
        comparator_api_retries: usize = 0, kind "integer in 0..=10", why "CoMLRL retries none",
            check api_retries, only Only::Iter;
        /// The environment variable holding the endpoint's key (CoMLRL
        /// `comparator_api_key_env`); `null`: no key is sent. The key itself is never written in
        /// a scenario (CoMLRL's `comparator_api_key` is not ported): it stays out of the resolved
        /// scenario, checkpoints, logs and errors.
        comparator_api_key_env: Option<String> = None, kind "string or `null`", shown "`null`",
            why "CoMLRL", only Only::Iter;
        /// The header the key is sent in (CoMLRL `comparator_api_key_header`).
        comparator_api_key_header: String = "Authorization".to_string(), kind "string",
            why "CoMLRL", only Only::Iter;
        /// What precedes the key in that header, then a space (CoMLRL
        /// `comparator_api_key_prefix`); empty: the key alone.
        comparator_api_key_prefix: String = "Bearer".to_string(), kind "string", why "CoMLRL",
            only Only::Iter;
        /// What ranks a `marlhf_iter` round's candidates (CoMLRL `preference_scoring_reward`):
        /// `task` the task reward; `reward_model` the previous round's reward model (the first
        /// round, which has none, the task reward), whose scores then become the pairs' rewards.
        scoring_reward: ScoringReward = ScoringReward::Task,
            kind "`task` \\| `reward_model`", why "CoMLRL", only Only::MarlhfIter;
    }
    resolved {
        /// The reward model's backbone, written as an agent's `model` (CoMLRL
        /// `reward_model_name`, which defaults to the agents' model): a causal LM whose final
        /// hidden state at the joint text's last token a fresh Linear(H → 1) head reads.
        reward_model: String => Option<ModelRef>, kind "string", shown "agent 0's model",
            why "CoMLRL", via |d, p, raw| raw.map(|spec| model_ref(d, &p.key("reward_model"), spec, cx.base)),
            emit model_setting;
        /// The `model` comparator, written as an agent's `model` (CoMLRL
        /// `comparator_model_name`): every agent's comparator, frozen, sampling with the
        /// agents' settings. Required under `comparator_policy: model`, an error elsewhere.
        comparator_model: String => Option<ModelRef>, kind "string", shown "none",
            why "CoMLRL", via |d, p, raw| raw.map(|spec| model_ref(d, &p.key("comparator_model"), spec, cx.base)),
            emit model_setting;
    }
}

fn model_setting(m: &Option<ModelRef>) -> Option<String> {
    m.as_ref().map(|m| match &m.source {
        ModelSource::Local(p) => p.display().to_string(),
        _ => m.spec.clone(),
    })
}

fn reward_epochs(_key: &str, n: &usize) -> Option<Bad> {
    (!(1..=MAX_REWARD_EPOCHS).contains(n)).then(|| Bad {
        message: format!(
            "preference.reward_num_train_epochs must be in 1..={MAX_REWARD_EPOCHS} (got {n})"
        ),
        hint: "CoMLRL trains the reward model for 1 epoch".into(),
    })
}

fn iterations(_key: &str, n: &usize) -> Option<Bad> {
    (!(1..=MAX_ITERATIONS).contains(n)).then(|| Bad {
        message: format!("preference.num_iterations must be in 1..={MAX_ITERATIONS} (got {n})"),
        hint: "CoMLRL runs 6 rounds".into(),
    })
}

/// The most pairs a replaying round draws: each is a copy of a pair's token ids, so a number
/// from the file must not size that allocation unchecked.
const MAX_REPLAY_SAMPLE: usize = 1_000_000;

fn replay_sample(_key: &str, n: &usize) -> Option<Bad> {
    (!(1..=MAX_REPLAY_SAMPLE).contains(n)).then(|| Bad {
        message: format!(
            "preference.replay_sample_size must be in 1..={MAX_REPLAY_SAMPLE} (got {n})"
        ),
        hint: "use `replay_sample_size: null` for the round's count".into(),
    })
}

fn unit_interval(_key: &str, x: &f64) -> Option<Bad> {
    (!(0.0..=1.0).contains(x)).then(|| Bad {
        message: format!("preference.replay_lambda must be in [0, 1] (got {x})"),
        hint: "use e.g. `replay_lambda: 0.5` (1 weighs every round alike)".into(),
    })
}

fn api_retries(_key: &str, n: &usize) -> Option<Bad> {
    (*n > 10).then(|| Bad {
        message: format!("preference.comparator_api_retries must be in 0..=10 (got {n})"),
        hint: "use e.g. `comparator_api_retries: 2`".into(),
    })
}

fn comparator_candidates(_key: &str, k: &usize) -> Option<Bad> {
    (!(1..=MAX_CANDIDATES).contains(k)).then(|| Bad {
        message: format!(
            "preference.comparator_num_candidates must be in 1..={MAX_CANDIDATES} (got {k})"
        ),
        hint: "use `comparator_num_candidates: null` for num_candidates".into(),
    })
}

/// When a preference key has an effect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Only {
    /// `trainer.algorithm: madpo` or `marlhf`.
    Preference,
    /// `trainer.algorithm: marlhf`.
    Marlhf,
    /// `trainer.algorithm: madpo_iter` or `marlhf_iter`.
    Iter,
    /// `trainer.algorithm: marlhf_iter`.
    MarlhfIter,
}

impl Relevance for Only {
    type Plan = PreferencePlan;

    fn holds(&self, p: &PreferencePlan, _has_eval: bool) -> bool {
        match self {
            Only::Preference => p.active,
            Only::Marlhf => p.marlhf,
            Only::Iter => p.iter,
            Only::MarlhfIter => p.marlhf_iter,
        }
    }

    fn moot_warning(&self) -> Option<&'static str> {
        match self {
            Only::Preference => Some(
                "has no effect unless `trainer.algorithm` is `madpo`, `marlhf`, `madpo_iter` or `marlhf_iter`",
            ),
            Only::Marlhf => {
                Some("has no effect unless `trainer.algorithm` is `marlhf` or `marlhf_iter`")
            }
            Only::Iter => {
                Some("has no effect unless `trainer.algorithm` is `madpo_iter` or `marlhf_iter`")
            }
            Only::MarlhfIter => Some("has no effect unless `trainer.algorithm` is `marlhf_iter`"),
        }
    }
}

fn candidates(_key: &str, k: &usize) -> Option<Bad> {
    (!(2..=MAX_CANDIDATES).contains(k)).then(|| Bad {
        message: format!("preference.num_candidates must be in 2..={MAX_CANDIDATES} (got {k})"),
        hint: "pairs need two candidates; CoMLRL samples 80".into(),
    })
}

/// The section resolved, with the checks against `trainer`: single turn, aligned joint
/// candidates, decentralized agents, and `pairs_per_sample` null under `all`. Under `madpo`, K
/// candidates are the trainer's `num_generations` (`generations_set`: the scenario wrote it);
/// under `marlhf`, `num_generations` stays the online phase's K and `rl_algorithm` sets the
/// trainer's `advantage_mode`.
pub(crate) fn resolve(
    d: &mut Diags,
    raw: &RawPreference,
    trainer: &mut TrainerPlan,
    generations_set: bool,
    base: &Path,
    num_agents: usize,
) -> PreferencePlan {
    let p = KeyPath::root().key("preference");
    let cx = PreferenceContext {
        algorithm: trainer.algorithm,
        base,
    };
    let plan = PreferencePlan::from_raw(d, &p, raw, &cx);
    if !plan.marlhf && raw.reward_model.is_some() {
        d.warn(
            &p.key("reward_model"),
            "has no effect unless `trainer.algorithm` is `marlhf` or `marlhf_iter`",
        );
    }
    if !plan.iter && raw.comparator_model.is_some() {
        d.warn(
            &p.key("comparator_model"),
            "has no effect unless `trainer.algorithm` is `madpo_iter` or `marlhf_iter`",
        );
    }
    if !plan.active {
        return plan;
    }
    let name = match (plan.marlhf, plan.iter) {
        (true, true) => "MARLHFIter",
        (true, _) => "MARLHF",
        (_, true) => "MADPOIter",
        _ => "MADPO",
    };
    let mut plan = plan;
    if plan.iter {
        resolve_iter(d, &p, &mut plan, num_agents);
    } else if plan.pair_selection == PairSelection::ComparatorReward {
        d.invalid(
            &p.key("pair_selection"),
            format!(
                "{name} has no comparator: `comparator_reward` ranks a comparator's candidates"
            ),
            "use `pair_selection: reward_gap`, or `trainer.algorithm: madpo_iter`",
        );
    }
    let t = KeyPath::root().key("trainer");
    if plan.pair_selection == PairSelection::All && plan.pairs_per_sample.is_some() {
        d.invalid(
            &p.key("pairs_per_sample"),
            "`pair_selection: all` keeps every pair, so a number of pairs per prompt contradicts it",
            "remove `pairs_per_sample` (or write `null`), or use `pair_selection: reward_gap`",
        );
    }
    if plan.collaboration_mode == CollaborationMode::Centralized {
        if plan.iter {
            d.invalid(
                &p.key("collaboration_mode"),
                format!(
                    "`centralized` {name} is not ported yet (it is for MAGRPO, MADPO and MARLHF)"
                ),
                "use `collaboration_mode: decentralized`",
            );
        } else if num_agents < 2 {
            d.invalid(
                &p.key("collaboration_mode"),
                format!("`centralized` writes the outputs of two or more agents in one answer, and the scenario has {num_agents}"),
                "give `agents` two or more entries, or use `collaboration_mode: decentralized`",
            );
        } else {
            // An alias of `trainer.collaboration_mode` (CoMLRL has the field on both configs),
            // which the run reads.
            trainer.collaboration_mode = CollaborationMode::Centralized;
        }
    } else if trainer.collaboration_mode == CollaborationMode::Centralized {
        plan.collaboration_mode = CollaborationMode::Centralized;
    }
    if trainer.num_turns != 1 {
        d.invalid(
            &t.key("num_turns"),
            format!(
                "{name} learns from single-turn preferences, and num_turns is {}",
                trainer.num_turns
            ),
            "set `num_turns: 1`",
        );
    }
    if trainer.joint_mode != JointMode::Aligned {
        d.invalid(
            &t.key("joint_mode"),
            format!("{name}'s joint candidate i is every agent's i-th answer: `cross` has no such pairing"),
            "use `joint_mode: aligned`",
        );
    }
    if plan.marlhf {
        resolve_marlhf(d, &p, &plan, trainer);
        if plan.marlhf_iter {
            resolve_marlhf_iter(d, &p, &plan);
        }
        return plan;
    }
    if generations_set && trainer.num_generations != plan.num_candidates {
        d.invalid(
            &t.key("num_generations"),
            format!(
                "{} contradicts preference.num_candidates ({}), the answers MADPO samples per agent and prompt",
                trainer.num_generations, plan.num_candidates
            ),
            "remove `trainer.num_generations` and set `preference.num_candidates`",
        );
    }
    trainer.num_generations = plan.num_candidates;
    plan
}

/// MADPOIter's checks, as CoMLRL's `_validate_iterative_config`: each replay mode's own keys
/// and none of the others', each comparator's own keys; `comparator_history_k` becomes 1
/// under `history` when unset.
fn resolve_iter(d: &mut Diags, p: &KeyPath, plan: &mut PreferencePlan, num_agents: usize) {
    let mode = plan.replay_mode;
    let only = |d: &mut Diags, key: &str, set: bool, valid: &str| {
        if set {
            d.invalid(
                &p.key(key),
                format!(
                    "it has no effect with `replay_mode: {}`",
                    crate::keys::shown(&mode).trim_matches('`')
                ),
                format!("remove `{key}` (it is only valid with {valid})"),
            );
        }
    };
    match mode {
        ReplayMode::Current => {
            only(
                d,
                "replay_k",
                plan.replay_k.is_some_and(|k| k != 1),
                "`nearest_k`",
            );
            only(
                d,
                "replay_lambda",
                plan.replay_lambda.is_some(),
                "`lambda_decay`",
            );
            only(
                d,
                "replay_sample_size",
                plan.replay_sample_size.is_some(),
                "`nearest_k`, `all_history` or `lambda_decay`",
            );
        }
        ReplayMode::NearestK => {
            if plan.replay_k.is_none() {
                d.invalid(
                    &p.key("replay_k"),
                    "`replay_mode: nearest_k` needs the number of rounds to replay",
                    "set e.g. `replay_k: 2`",
                );
            }
            only(
                d,
                "replay_lambda",
                plan.replay_lambda.is_some(),
                "`lambda_decay`",
            );
        }
        ReplayMode::AllHistory => {
            only(d, "replay_k", plan.replay_k.is_some(), "`nearest_k`");
            only(
                d,
                "replay_lambda",
                plan.replay_lambda.is_some(),
                "`lambda_decay`",
            );
        }
        ReplayMode::LambdaDecay => {
            only(d, "replay_k", plan.replay_k.is_some(), "`nearest_k`");
            if plan.replay_lambda.is_none() {
                d.invalid(
                    &p.key("replay_lambda"),
                    "`replay_mode: lambda_decay` needs the decay λ",
                    "set e.g. `replay_lambda: 0.5`",
                );
            }
        }
    }
    let policy = plan.comparator_policy;
    if plan.comparator_centralized_agent_index >= num_agents {
        d.invalid(
            &p.key("comparator_centralized_agent_index"),
            format!(
                "{} is not an agent's index ({num_agents} agents, counted from 0)",
                plan.comparator_centralized_agent_index
            ),
            "use e.g. `comparator_centralized_agent_index: 0`",
        );
    }
    if policy == ComparatorPolicy::Api && plan.comparator_api_url.is_none() {
        d.invalid(
            &p.key("comparator_policy"),
            "`api` needs the endpoint's URL",
            "set `preference.comparator_api_url` (an OpenAI-compatible chat-completions URL)",
        );
    }
    if policy == ComparatorPolicy::History {
        plan.comparator_history_k.get_or_insert(1);
    } else if plan.comparator_history_k.is_some() {
        d.invalid(
            &p.key("comparator_history_k"),
            "it is only valid with `comparator_policy: history`",
            "remove `comparator_history_k`",
        );
    }
    match (
        policy == ComparatorPolicy::Model,
        plan.comparator_model.is_some(),
    ) {
        (true, false) => d.invalid(
            &p.key("comparator_policy"),
            "`model` needs the comparator's model",
            "set `preference.comparator_model` (a path or hub id, as an agent's `model`)",
        ),
        (false, true) => d.invalid(
            &p.key("comparator_model"),
            "it is only valid with `comparator_policy: model`",
            "remove `comparator_model`, or set `comparator_policy: model`",
        ),
        _ => {}
    }
}

/// MARLHF's checks: a MAGRPO-family online algorithm, whose advantage mode becomes the
/// trainer's (a different one written there is an error, as for `algorithm: marloo`).
fn resolve_marlhf(d: &mut Diags, p: &KeyPath, plan: &PreferencePlan, trainer: &mut TrainerPlan) {
    let Some(mode) = plan.rl_algorithm.advantage_mode() else {
        // An actor-critic backend: its critic is `trainer.critic` (resolved with the trainer);
        // `marlhf_iter` refuses it (`resolve_marlhf_iter`) and resolves no critic.
        if trainer.critic.is_none() && !plan.marlhf_iter {
            d.invalid(
                &p.key("rl_algorithm"),
                format!("`{}` needs `trainer.critic`", plan.rl_algorithm.name()),
                "remove `trainer.critic`'s errors above",
            );
        }
        return;
    };
    if trainer.advantage_mode != AdvantageMode::Mean && trainer.advantage_mode != mode {
        d.invalid(
            &KeyPath::root().key("trainer").key("advantage_mode"),
            format!(
                "it contradicts `preference.rl_algorithm: {}`, which is MAGRPO with that algorithm's advantage mode",
                plan.rl_algorithm.name()
            ),
            "remove `trainer.advantage_mode` and choose the online algorithm with `preference.rl_algorithm`",
        );
    }
    trainer.advantage_mode = mode;
    if mode != AdvantageMode::Mean
        && trainer.advantage_normalization
        && trainer.advantage_scale == AdvantageScale::Group
    {
        d.warn(
            &p.key("rl_algorithm"),
            format!(
                "`{}` trains exactly as `magrpo` while trainer.advantage_normalization is true (CoMLRL's default too): normalization removes the baseline's shift and scale; set `advantage_normalization: false` for the baseline to matter",
                plan.rl_algorithm.name()
            ),
        );
    }
    if trainer.reward_aggregation == RewardAggregation::NormalizeThenSum {
        d.invalid(
            &KeyPath::root().key("trainer").key("reward_aggregation"),
            "MARLHF's online phase trains on the reward model's one score, not on the task's terms",
            "remove `trainer.reward_aggregation`",
        );
    }
}

/// What `marlhf_iter` does not port yet, refused rather than run differently from CoMLRL: an
/// actor-critic online phase (CoMLRL builds a fresh actor-critic trainer, critics included,
/// every round) and the `history` comparator (its policies are saved when a round's online
/// epochs end, which the round's collecting pass does not see here).
fn resolve_marlhf_iter(d: &mut Diags, p: &KeyPath, plan: &PreferencePlan) {
    if plan.rl_algorithm.advantage_mode().is_none() {
        d.invalid(
            &p.key("rl_algorithm"),
            format!(
                "`{}` is not ported for `marlhf_iter` yet (CoMLRL builds a fresh critic every round)",
                plan.rl_algorithm.name()
            ),
            "use `rl_algorithm: magrpo` (or `mareinforce`, `marloo`, `maremax`), or `trainer.algorithm: marlhf`",
        );
    }
    if plan.comparator_policy == ComparatorPolicy::History {
        d.invalid(
            &p.key("comparator_policy"),
            "`history` is not ported for `marlhf_iter` yet",
            "use `comparator_policy: current`, `current_copy`, `model` or `api`",
        );
    }
}
