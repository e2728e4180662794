//! The `preference` section's key table (`keys.rs` has the macro and the row syntax): the
//! settings of CoMLRL 1.4.3's preference trainers that its `MAGRPOConfig` fields (the `trainer`
//! section) do not cover — for now `MADPOConfig`'s (`trainer.algorithm: madpo`). Values marked
//! "CoMLRL" are `MADPOConfig`'s defaults. [`RawPreference`], [`PreferencePlan`] and the docs
//! table derive from it; [`resolve`] adds the checks that involve the `trainer` section.
use crate::collect::Diags;
use crate::keys::{at_least, if_set, positive, section, Bad, Relevance, SectionContext};
use crate::plan::{Algorithm, CollaborationMode, JointMode, PairSelection, TrainerPlan};
use crate::positions::KeyPath;

/// The most joint candidates MADPO samples per prompt: each agent samples them in one batch and
/// the pairs of a prompt grow as its square, so a scenario's number never sizes an unbounded
/// allocation.
pub const MAX_CANDIDATES: usize = 1024;

/// What the `preference` resolver needs from the rest of the scenario.
pub(crate) struct PreferenceContext {
    /// `trainer.algorithm`.
    pub algorithm: Algorithm,
}

impl SectionContext for PreferenceContext {}

section! {
    raw /// `preference:` — CoMLRL's preference trainers (MADPO).
        RawPreference;
    plan /// The preference trainers' settings (CoMLRL 1.4.3 `MADPOConfig`).
        PreferencePlan, context cx: PreferenceContext;
    computed {
        /// The run learns from preferences (`trainer.algorithm: madpo`): the keys matter.
        active: bool = cx.algorithm == Algorithm::Madpo;
    }
    keys {
        /// K: answers each agent samples per training prompt, once, before training (CoMLRL
        /// `preference_num_candidates`); joint candidate i is every agent's i-th answer, scored
        /// by one joint reward. Under `madpo` it is also `trainer.num_generations` (written
        /// there by the loader; another value there is an error).
        num_candidates: usize = 80, kind "integer in 2..=1024", why "CoMLRL",
            check candidates, only Only::Preference;
        /// Which of a prompt's candidate pairs with a positive reward gap become preference
        /// pairs: `reward_gap` keeps the `pairs_per_sample` largest gaps (equal gaps in
        /// (winner, loser) order, as CoMLRL's stable sort), `random` `pairs_per_sample` drawn
        /// uniformly from the run's seeded generator (CoMLRL draws from Python's, so the pairs
        /// differ from its), `all` every one.
        pair_selection: PairSelection = PairSelection::RewardGap,
            kind "`reward_gap` \\| `random` \\| `all`", why "CoMLRL", only Only::Preference;
        /// At most this many pairs per prompt (`null`: every pair); must be `null` under
        /// `pair_selection: all` (CoMLRL `preference_pairs_per_sample`).
        pairs_per_sample: Option<usize> = match pair_selection {
                PairSelection::All => None,
                _ => Some(16),
            },
            kind "integer ≥ 1 or `null`", shown "`16`; `null` under `pair_selection: all`",
            why "CoMLRL (which makes `all` write `null` itself)",
            check if_set(at_least(1, "use `pairs_per_sample: null` for every pair")),
            only Only::Preference;
        /// β of the DPO loss −log σ(β·(Δ_i + Σ_{j≠i} sg(Δ_j))) (CoMLRL `dpo_beta`).
        dpo_beta: f64 = 0.1, kind "number > 0", why "CoMLRL",
            check positive("use e.g. `dpo_beta: 0.1`"), only Only::Preference;
        /// `decentralized`: each agent its own policy over its own prompt. CoMLRL's
        /// `centralized` (one policy writing every role's part) is not ported yet and is an
        /// error.
        collaboration_mode: CollaborationMode = CollaborationMode::Decentralized,
            kind "`decentralized`", why "CoMLRL", only Only::Preference;
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
        /// MAGRPO loss does. `true` reproduces CoMLRL.
        compat_last_token: bool = false, kind "bool",
            why "the fix (CoMLRL 1.4.3 drops the last token)", only Only::Preference;
    }
}

/// When a preference key has an effect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Only {
    /// `trainer.algorithm: madpo`.
    Preference,
}

impl Relevance for Only {
    type Plan = PreferencePlan;

    fn holds(&self, p: &PreferencePlan, _has_eval: bool) -> bool {
        p.active
    }

    fn moot_warning(&self) -> Option<&'static str> {
        Some("has no effect unless `trainer.algorithm` is `madpo`")
    }
}

fn candidates(_key: &str, k: &usize) -> Option<Bad> {
    (!(2..=MAX_CANDIDATES).contains(k)).then(|| Bad {
        message: format!("preference.num_candidates must be in 2..={MAX_CANDIDATES} (got {k})"),
        hint: "pairs need two candidates; CoMLRL samples 80".into(),
    })
}

/// The section resolved, with the checks against `trainer`: under `madpo`, K candidates are the
/// trainer's `num_generations` (`generations_set`: the scenario wrote it), single turn, aligned
/// joint candidates, decentralized agents, and `pairs_per_sample` null under `all`.
pub(crate) fn resolve(
    d: &mut Diags,
    raw: &RawPreference,
    trainer: &mut TrainerPlan,
    generations_set: bool,
) -> PreferencePlan {
    let p = KeyPath::root().key("preference");
    let cx = PreferenceContext {
        algorithm: trainer.algorithm,
    };
    let plan = PreferencePlan::from_raw(d, &p, raw, &cx);
    if !plan.active {
        return plan;
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
        d.invalid(
            &p.key("collaboration_mode"),
            "`centralized` MADPO is not ported yet",
            "use `collaboration_mode: decentralized`",
        );
    }
    if trainer.num_turns != 1 {
        d.invalid(
            &t.key("num_turns"),
            format!(
                "MADPO learns from single-turn preferences, and num_turns is {}",
                trainer.num_turns
            ),
            "set `num_turns: 1`",
        );
    }
    if trainer.joint_mode != JointMode::Aligned {
        d.invalid(
            &t.key("joint_mode"),
            "MADPO's joint candidate i is every agent's i-th answer: `cross` has no such pairing",
            "use `joint_mode: aligned`",
        );
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
