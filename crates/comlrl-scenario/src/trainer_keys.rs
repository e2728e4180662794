//! The `trainer` section's key table: every key once, with its type, default, reason, check and
//! meaning (`keys.rs` has the macro and the row syntax). [`RawTrainer`], [`TrainerPlan`], the
//! defaults, range checks, the resolved-YAML writer and the docs table in docs/scenario.md are
//! derived from it; cross-key checks are in `trainer.rs`.
//!
//! To add a key: add one row below, read `scenario.trainer.<name>` where the trainer uses it,
//! and regenerate the docs table with `COMLRL_BLESS=1 cargo test --release -p comlrl-scenario
//! --test scenario key_tables`. The main crate's test `tests/cli/scenario_keys_read.rs` fails until
//! some code under src/ reads the new key. A new value type (an enum) is listed in
//! `plain_settings!` in `keys.rs` (the compiler says "`Setting` is not implemented" until it is).
//! Values marked "CoMLRL" are those of `MAGRPOConfig` in CoMLRL 1.4, so that a scenario means
//! what the same settings mean in the Python library.
use crate::code::resolve_code;
use crate::collect::Diags;
use crate::critic_keys::{CriticPlan, RawCritic};
use crate::error::ErrorKind;
use crate::keys::{
    at_least, if_set, learning_rate, non_negative, positive, section, unit, Bad, Relevance,
};
use crate::plan::{
    AdvantageMode, AdvantageScale, AdvantageStd, Algorithm, CodeSource, CollaborationMode, Dtype,
    ImportanceLevel, JointMode, LogprobTemperature, LossAggregation, LrScheduler, Preset,
    RewardAggregation, TransitionPlan,
};
use crate::positions::KeyPath;
use crate::raw::RawTransition;
use crate::trainer::TrainerContext;

section! {
    raw /// `trainer:` — CoMLRL's `MAGRPOConfig` (1.4 names) plus optimizer settings.
        RawTrainer;
    plan /// Every `MAGRPOConfig` setting (CoMLRL 1.4 names) plus comlrl's optimizer extras.
        TrainerPlan, context cx: TrainerContext<'_>;
    keys {
        /// The training algorithm: `magrpo`, multi-agent group-relative policy optimisation;
        /// `mareinforce`, `marloo` and `maremax` are MAGRPO with `advantage_mode` `raw`, `rloo`
        /// and `max` (CoMLRL's trainers of those names differ from its MAGRPO in that default
        /// alone), so that a CoMLRL config's trainer maps to one value. Writing a different
        /// `advantage_mode` beside them is an error. `iac`: independent actor-critic (CoMLRL's
        /// `IACTrainer`), each agent with a critic of its own (`critic`); it changes the
        /// defaults of `num_generations`, `rollout_buffer_size` and `num_train_epochs` to
        /// `IACConfig`'s. `maac`: multi-agent actor-critic (CoMLRL's `MAACTrainer`), one
        /// critic for all agents reading their joint prompt, with the same defaults. See
        /// docs/algorithms.md. `madpo` is CoMLRL's offline
        /// multi-agent DPO: the first pass samples a preference set, every epoch trains on it
        /// (the `preference` section). `marlhf` is CoMLRL's MARLHF: a first epoch samples the
        /// preference set, a joint reward model learns from it, then `num_train_epochs` of
        /// online MARL train against that model (`preference.rl_algorithm`, `reward_*`).
        /// `madpo_iter` is CoMLRL's MADPOIter: `preference.num_iterations` rounds, each one
        /// pass over the prompts comparing the current policy's candidates with a comparator's,
        /// then `num_train_epochs` DPO passes over the round's (replayed) pairs. `marlhf_iter` is
        /// CoMLRL's MARLHFIter: rounds as `madpo_iter`'s, each training a fresh reward model on
        /// the round's (replayed) pairs, then `num_train_epochs` online epochs against it.
        algorithm: Algorithm = Algorithm::Magrpo,
            kind "`magrpo` \\| `mareinforce` \\| `marloo` \\| `maremax` \\| `iac` \\| `maac` \\| `madpo` \\| `marlhf` \\| `madpo_iter` \\| `marlhf_iter`",
            why "CoMLRL's MAGRPO trainer";
        /// A published recipe whose settings become the defaults of the keys it names (the
        /// resolved scenario, e.g. `comlrl check --print`, shows them all): `dr_grpo` (Dr. GRPO,
        /// arXiv 2503.20783) sets `loss_aggregation: constant` and `advantage_scale: none`;
        /// `dapo` (arXiv 2503.14476, as TRL's paper index) sets `loss_aggregation: token_mean`,
        /// `mask_truncated_completions: true`, `importance_level: token`, `clip_eps` 0.2 and
        /// `clip_eps_high` 0.28; `gspo` (arXiv 2507.18071 v2) sets `importance_level:
        /// sequence`, `loss_aggregation: sequence_mean`, `clip_eps` 3e-4 and `clip_eps_high`
        /// 4e-4. Writing one of those keys with another value beside it is an error. DAPO's
        /// dynamic sampling is not implemented. See docs/grpo_variants.md.
        preset: Option<Preset> = None, kind "`dr_grpo` \\| `dapo` \\| `gspo` or `null`", shown "none",
            why "off: CoMLRL's MAGRPO objective";
        /// Passes over the training prompts.
        num_train_epochs: usize = algorithm.default_num_train_epochs(), kind "integer ≥ 1",
            shown "`20`; `40` with `iac`, `maac`; `1` with `madpo_iter`, `2` with `marlhf_iter` (per round)", why "CoMLRL: each trainer's config default",
            check at_least(1, "set `num_train_epochs: 1` or more");
        /// AdamW learning rate of every agent that does not set its own (CoMLRL 1.4's name;
        /// older CoMLRL: `learning_rate`).
        agent_learning_rate: f64 = 5.0e-6, kind "number > 0", why "CoMLRL",
            check learning_rate;
        /// G: completions per agent per prompt. The group baseline needs at least 2; `iac` and
        /// `maac` (a critic's baseline) take 1 or more.
        num_generations: usize = algorithm.default_num_generations(),
            kind "integer ≥ 2 (≥ 1 with `iac`, `maac`)", shown "`4`; `1` with `iac`, `maac`",
            why "CoMLRL: each trainer's config default";
        /// How per-agent generations form joint actions: `aligned` pairs the g-th generation of
        /// every agent (G joint actions); `cross` takes the Cartesian product (G^N joint
        /// actions, each agent's completion credited with the sum of the returns it took part
        /// in). `cross` estimates values better at the cost of G^N reward calls. CoMLRL also
        /// accepts `align`/`crossed`; here they are errors with the right spelling suggested, so
        /// that the resolved config has one spelling.
        joint_mode: JointMode = JointMode::Aligned, kind "`aligned` \\| `cross`", why "CoMLRL";
        /// <a id="advantage_mode"></a>Group baseline b subtracted from each return R: `mean`
        /// (MAGRPO: mean of the group), `raw` (none: MAREINFORCE), `max` (MAREMAX), `rloo`
        /// (mean of the other G−1: MARLOO, equal to G/(G−1)·(R − mean)). **With
        /// `advantage_normalization: true` and `advantage_scale: group` all four give the same advantages**: each is R
        /// shifted by a constant (rloo also scaled by a positive constant), and normalization
        /// subtracts the group mean and divides by the group standard deviation, which removes
        /// any shift and positive scale. So a non-`mean` mode only matters with normalization
        /// off (a warning says so).
        advantage_mode: AdvantageMode = algorithm.default_advantage_mode(),
            kind "`mean` \\| `raw` \\| `max` \\| `rloo`",
            shown "`mean`; `raw`, `rloo`, `max` under `algorithm` `mareinforce`, `marloo`, `maremax`",
            why "CoMLRL: each trainer's config default";
        /// Re-centre each group's advantages on their mean and divide them by a standard
        /// deviation (which one: `advantage_scale`, `advantage_std`). Makes the update size
        /// independent of the reward scale.
        advantage_normalization: bool = true, kind "bool", why "CoMLRL";
        /// Which returns normalization's standard deviation is taken over (TRL's
        /// `scale_rewards`): `group` (the G returns of the group, as the mean is), `batch`
        /// (every return of the agent in the rollout buffer: one scale for all groups, so a
        /// group whose returns barely differ is not blown up; "Lite PPO", arXiv 2508.08221), or
        /// `none` (only re-centred, not divided: Dr. GRPO, arXiv 2503.20783, which finds that
        /// the division weighs questions by their difficulty).
        advantage_scale: AdvantageScale = Preset::advantage_scale(preset),
            kind "`group` \\| `batch` \\| `none`", shown "`group`; `none` under `preset: dr_grpo`", why "CoMLRL (TRL's default is `group` too)";
        /// The standard deviation normalization divides by: `population` (over n, floored at
        /// 1e-6; CoMLRL) or `sample` (Bessel-corrected, over n − 1, plus 1e-4: TRL's `nanstd`
        /// and epsilon). With G = 4 the advantages differ by a factor √(4/3), and so does the
        /// step size.
        advantage_std: AdvantageStd = AdvantageStd::Population,
            kind "`population` \\| `sample`", why "CoMLRL (torch `std(unbiased=False)`)";
        /// How several reward terms become the return the advantages are computed from:
        /// `sum_then_normalize` (the weighted sum of the raw terms, passed through
        /// `reward_processors`), or `normalize_then_sum` (GDPO; TRL's
        /// `multi_objective_aggregation`): each term is first z-scored within its group of
        /// joint actions (its sample standard deviation plus 1e-4, as TRL), then weighted and
        /// summed, so a term with a wide range does not drown the others. The logged rewards
        /// stay the processed weighted sum. TRL's setting is this with `advantage_scale: batch`
        /// and `advantage_std: sample`; see docs/grpo_variants.md.
        reward_aggregation: RewardAggregation = RewardAggregation::SumThenNormalize,
            kind "`sum_then_normalize` \\| `normalize_then_sum`",
            why "CoMLRL (TRL's default too)";
        /// How each completion's token log-probs weigh in the loss; each option is the
        /// advantage A times a weight on Σ_t log π (B: the mini-batch's node samples, G: the
        /// generations, |o|: the completion's tokens). `sequence_sum`: 1/(G·B) (MAGRPO; a long
        /// completion weighs more). `sequence_mean`: 1/(G·B·|o|) (GRPO, TRL `grpo`; a token of a
        /// short completion weighs more, favouring short right and long wrong answers).
        /// `token_mean`: 1/(the mini-batch's active tokens) (DAPO, arXiv 2503.14476, TRL `dapo`;
        /// TRL `bnpo` with one micro-batch per step). `constant`: 1/(G·B·max_new_tokens) (Dr.
        /// GRPO, arXiv 2503.20783, TRL `dr_grpo`). See docs/grpo_variants.md.
        loss_aggregation: LossAggregation = Preset::loss_aggregation(preset),
            kind "`sequence_sum` \\| `sequence_mean` \\| `token_mean` \\| `constant`",
            shown "`sequence_sum`; `constant` under `preset: dr_grpo`",
            why "CoMLRL's MAGRPO loss";
        /// Completions that reached `max_new_tokens` without stopping (their last token is
        /// neither an EOS nor the pad token: TRL's rule) add nothing to the loss, and
        /// `token_mean` does not count their tokens; their returns still count in their group's
        /// baseline and spread (DAPO's overlong filtering; TRL `mask_truncated_completions`).
        mask_truncated_completions: bool = Preset::mask_truncated_completions(preset),
            kind "bool", shown "`false`; `true` under `preset: dapo`",
            why "CoMLRL and TRL train on truncated completions";
        /// The temperature of the log-probs the loss differentiates: `1` (the model's own
        /// distribution, while sampling used the agent's `temperature`: the gradient is that of
        /// log π, not of the sampling distribution) or `sampling` (the logits divided by the
        /// agent's sampling temperature, as TRL's GRPOTrainer scores: log-probs of the
        /// distribution that was sampled, up to top-k/top-p). Needs a sampling temperature above
        /// 0.
        logprob_temperature: LogprobTemperature = LogprobTemperature::One,
            kind "`1` \\| `sampling`", why "CoMLRL scores at temperature 1";
        /// Train only on the highest-entropy tokens (TRL's `top_entropy_quantile`, ρ of "Beyond
        /// the 80/20 Rule", arXiv 2506.01939): a token's loss is kept when the entropy of its
        /// next-token distribution is at least the (1 − ρ) quantile of the entropies of the
        /// mini-batch's counted completion tokens (torch's linear interpolation), else it weighs
        /// 0; the aggregation's normaliser is unchanged (TRL). `1` keeps every token; the paper
        /// uses 0.2. Costs one more forward over the mini-batch (its entropies are needed before
        /// the first backward). MAGRPO family only.
        top_entropy_quantile: f64 = 1.0, kind "number in [0, 1]",
            why "TRL: off (every token trains)",
            check unit(true, "use e.g. `top_entropy_quantile: 0.2` (the paper's), or 1 for every token");
        /// An entropy bonus (TRL's `entropy_coef`): the loss becomes the policy loss − c · H̄,
        /// H̄ the mean next-token entropy over the mini-batch's counted completion tokens (those
        /// `top_entropy_quantile` keeps, when set), not rescaled by `loss_aggregation`, so c
        /// means the same for every aggregation. Its gradient reaches every counted completion,
        /// those of advantage 0 too (they are then computed). The entropy is that of the
        /// distribution the loss scores (`logprob_temperature`). MAGRPO family only.
        entropy_coef: f64 = 0.0, kind "number ≥ 0",
            why "TRL's default; CoMLRL has none",
            check non_negative("use 0 for no entropy bonus, or a small value such as 0.001 to 0.01");
        /// Adaptive entropy control (TRL's `use_adaptive_entropy`, from Skywork-OR1, arXiv
        /// 2505.22312): the bonus's coefficient starts at `entropy_coef` and changes after every
        /// optimizer step, by `entropy_coef_delta` up when the step's mean entropy (over the
        /// tokens the bonus acts on, every replica's) was at most `entropy_target`, down
        /// otherwise, kept within [`entropy_coef_min`, `entropy_coef_max`]; a step applies it
        /// only when the previous step's entropy was at most `entropy_target` (none before the
        /// first step). Per agent, kept in checkpoints. MAGRPO family only.
        use_adaptive_entropy: bool = false, kind "bool", why "TRL's default: a constant coefficient";
        /// The adaptive coefficient's lower bound (TRL's `entropy_coef_min`).
        entropy_coef_min: f64 = 0.0, kind "number ≥ 0", why "TRL's default",
            check non_negative("TRL's default: 0"), only Only::AdaptiveEntropy;
        /// The adaptive coefficient's upper bound (TRL's `entropy_coef_max`); at least
        /// `entropy_coef_min`.
        entropy_coef_max: f64 = 1.0, kind "number ≥ 0", why "TRL's default",
            check non_negative("TRL's default: 1"), only Only::AdaptiveEntropy;
        /// The adaptive coefficient's change per optimizer step (TRL's `entropy_coef_delta`).
        entropy_coef_delta: f64 = 0.005, kind "number ≥ 0", why "TRL's default",
            check non_negative("TRL's default: 0.005"), only Only::AdaptiveEntropy;
        /// The mean entropy in nats at or below which the adaptive bonus applies and grows
        /// (TRL's `entropy_target`); set it near the entropy logged early in training
        /// (`agent_<i>/entropy`), over the same tokens when `top_entropy_quantile` is below 1.
        entropy_target: f64 = 0.2, kind "number ≥ 0", why "TRL's default",
            check non_negative("TRL's default: 0.2; use a value near the agent's early logged entropy"),
            only Only::AdaptiveEntropy;
        /// Passes over each rollout buffer (PPO's epochs; TRL's `num_iterations`): every pass
        /// takes one optimizer step per mini-batch of `train_batch_size`. More than 1 re-uses
        /// the samples off-policy and needs a probability ratio (`importance_level`). MAGRPO
        /// family only.
        ppo_epochs: usize = 1, kind "integer ≥ 1",
            why "CoMLRL: one pass over a buffer",
            check at_least(1, "set `ppo_epochs: 1` (one pass, CoMLRL) or more");
        /// The probability ratio π/π_old that weighs re-used samples (TRL's
        /// `importance_sampling_level`), π_old being the log-probs at sampling time: `token`
        /// (one ratio per token: PPO, GRPO, DAPO), `sequence` (one per completion,
        /// exp(mean_t(log π − log π_old)): GSPO) or `none` (no ratio: CoMLRL's uncorrected
        /// steps). Each token's loss is then −min(r·A, clip(r, 1 − clip_eps, 1 + clip_eps_high)·A)
        /// with `loss_aggregation`'s weights. A mini-batch taken before the round's first
        /// optimizer step is on-policy (ratio exactly 1, as TRL); later ones, and later passes,
        /// are corrected. MAGRPO family only. See docs/grpo_variants.md.
        importance_level: ImportanceLevel = Preset::importance_level(preset, ppo_epochs),
            kind "`none` \\| `token` \\| `sequence`",
            shown "`none`; `token` with `ppo_epochs` > 1 or `preset: dapo`, `sequence` under `preset: gspo`",
            why "CoMLRL has no ratio; TRL's default level is `token`";
        /// The ratio's lower clip 1 − ε (and upper, unless `clip_eps_high`; TRL's `epsilon`).
        clip_eps: f64 = Preset::clip_eps(preset), kind "number > 0",
            shown "`0.2`; `3e-4` under `preset: gspo`", why "TRL's and PPO's default",
            check positive("use e.g. `clip_eps: 0.2` (TRL's default)");
        /// The ratio's upper clip 1 + ε_high (DAPO's asymmetric "clip higher"; TRL's
        /// `epsilon_high`); `null`: `clip_eps`.
        clip_eps_high: Option<f64> = Preset::clip_eps_high(preset), kind "number > 0 or `null`",
            shown "`null` (= `clip_eps`); `0.28` under `preset: dapo`, `4e-4` under `preset: gspo`",
            why "TRL: symmetric unless set",
            check if_set(positive("use e.g. `clip_eps_high: 0.28` (DAPO), or remove it for `clip_eps`"));
        /// Two-sided clipping (TRL's `delta`, arXiv 2505.22257): the unclipped ratio term is
        /// itself capped at this, so a negative advantage's loss cannot grow without bound;
        /// `null`: not capped. TRL recommends a value above 1 + `clip_eps_high`.
        clip_delta: Option<f64> = None, kind "number > 1 or `null`", shown "none",
            why "TRL: off",
            check if_set(ratio_cap);
        /// Node samples buffered per agent before an update. A node is one prompt (and, in
        /// multi-turn, one branch at one turn) with its G generations. (CoMLRL's `IACConfig`
        /// counts completions, the same with its default of one generation.)
        rollout_buffer_size: usize = algorithm.default_rollout_buffer_size(),
            kind "integer ≥ 1", shown "`2`; `8` with `iac`, `maac`",
            why "CoMLRL: each trainer's config default",
            check at_least(1, "set `rollout_buffer_size: 1` or more (CoMLRL default 2)");
        /// Mini-batch size within an update; the default is one batch per buffer.
        train_batch_size: usize = rollout_buffer_size, kind "integer ≥ 1",
            shown "`rollout_buffer_size`", why "CoMLRL",
            check at_least(1, "set it to 1 or more, or remove it to use rollout_buffer_size");
        /// Turns per episode; more than 1 needs an `external_transition` (and, with `iac` or
        /// `maac`, one completion per agent and turn: their TD(0) targets).
        num_turns: usize = 1, kind "integer ≥ 1",
            why "**CoMLRL defaults to 2**, which requires an `external_transition`; 1 is the single-turn MAGRPO of the paper's examples",
            check at_least(1, "set `num_turns: 1` for single-turn training");
        /// γ for returns across turns (MAGRPO: a joint action's return is its reward + γ × the
        /// mean return of its child's joint actions; `iac`, `maac`: the TD(0) target
        /// r_t + γ · V_old of the next turn). 1 is CoMLRL 1.4.3's: its `MAGRPOConfig` and
        /// `IACConfig` default to 1.0, and its MAGRPO trains on the undiscounted sum whatever
        /// the field says. Multi-turn only.
        discount: f64 = 1.0, kind "number in [0, 1]",
            why "CoMLRL 1.4.3 (its MAGRPO return is undiscounted)",
            check unit(true, "use e.g. `discount: 0.9`"), only Only::MultiTurn;
        /// Stop expanding a branch whose mean reward exceeds this; `null` never stops early.
        /// Multi-turn only.
        early_termination_threshold: Option<f64> = Some(-0.2), kind "number or `null`",
            why "CoMLRL", only Only::MultiTurn;
        /// Use the transition's prompt verbatim instead of passing it through the agent's
        /// template (with `{prompt}` = the transition's prompt and the row's other fields).
        /// Multi-turn only.
        external_prompt_passthrough: bool = false, kind "bool", why "CoMLRL",
            only Only::MultiTurn;
        /// Evaluate every N training steps (one step = one training prompt); `0` never. Needs
        /// `dataset.eval`. Each evaluation samples the eval prompts one at a time, as training
        /// does (a prompt's G generations per agent are the batch), so there is no
        /// `eval_batch_size`.
        eval_interval: usize = 16, kind "integer ≥ 0", why "CoMLRL", only Only::Eval;
        /// Eval prompts per evaluation (the first N of `dataset.eval`).
        eval_num_samples: usize = 4, kind "integer ≥ 0", why "CoMLRL", only Only::Eval;
        /// Also evaluate once before the first training step, logged as a metrics row of its
        /// own at step 0 (the untrained agents: a before/after pair with the last evaluation).
        /// CoMLRL evaluates before each epoch's first prompt (its batch 0); `false` keeps the
        /// evaluations at the multiples of `eval_interval` only.
        eval_at_start: bool = false, kind "bool",
            why "comlrl's schedule evaluates after steps; CoMLRL's batch-0 evaluation is this key", only Only::Eval;
        /// Clip each agent's gradient to this global L2 norm; `null` does not clip.
        max_grad_norm: Option<f64> = None, kind "number > 0 or `null`", shown "none",
            why "CoMLRL does not clip",
            check if_set(positive("use e.g. `max_grad_norm: 1.0`, or remove it to disable clipping"));
        /// Linear learning-rate warmup from 0 over this many optimizer steps (an agent takes
        /// one per mini-batch of an update).
        warmup_steps: usize = 0, kind "integer ≥ 0", why "CoMLRL has no schedule";
        /// Schedule after warmup: constant, linear decay to 0, or cosine decay to 0 over the
        /// run's optimizer steps.
        lr_scheduler: LrScheduler = LrScheduler::Constant,
            kind "`constant` \\| `linear` \\| `cosine`", why "CoMLRL's plain AdamW";
        /// Coefficient of a KL penalty to a frozen copy of the initial model (for an agent with
        /// an `adapter`, its own frozen base with the initial adapter: no second copy of the
        /// model); `0` is off and keeps no reference model in memory.
        kl_coef: f64 = 0.0, kind "number ≥ 0", why "CoMLRL MAGRPO has none",
            check non_negative("use 0 to disable the reference-KL penalty, or a small value such as 0.04");
        /// The reference KL as a term of the loss instead (TRL's `beta`): each counted token
        /// adds β · k3 = β · [exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1] to its loss before the
        /// aggregation, ℓ_ref its log-prob under the frozen initial model (kept with the rollout)
        /// and ℓ the current one, so its gradient reaches every counted token, those of
        /// completions whose advantage is 0 too. TRL's `use_bias_correction_kl: false`. One of
        /// `kl_coef` and `kl_in_loss`: both would charge the same KL twice. MAGRPO family only;
        /// not with `logprob_temperature: sampling` (the reference log-probs are at temperature 1).
        kl_in_loss: f64 = 0.0, kind "number ≥ 0", why "TRL's `beta` default; CoMLRL has none",
            check non_negative("use 0 for no KL term in the loss, or a small value such as 0.04 (TRL's former default)");
        /// AdamW β1.
        adam_beta1: f64 = 0.9, kind "number in [0, 1)", why "torch default, which CoMLRL uses",
            check unit(false, "torch defaults: adam_beta1 0.9, adam_beta2 0.999");
        /// AdamW β2.
        adam_beta2: f64 = 0.999, kind "number in [0, 1)", why "torch default",
            check unit(false, "torch defaults: adam_beta1 0.9, adam_beta2 0.999");
        /// AdamW ε.
        adam_epsilon: f64 = 1e-8, kind "number > 0", why "torch default",
            check positive("torch default: 1e-8");
        /// AdamW decoupled weight decay.
        weight_decay: f64 = 0.01, kind "number ≥ 0",
            why "torch `AdamW` default, which CoMLRL inherits",
            check non_negative("torch AdamW default: 0.01; 0 disables it");
        /// Agents sample at the same time, one thread-pool task each (CoMLRL runs them one
        /// after the other). Results are identical either way: each agent samples from its own
        /// RNG stream drawn from the run's seed. Costs one KV cache per agent.
        parallel_sampling: bool = true, kind "bool", why "same results, faster";
        /// The prompts of one rollout buffer (single-turn, same epoch) sample in one batch, so
        /// each decode step reads the weights once for all their rows (2 × K rows at the
        /// default buffer of 2). The policy does not change within a buffer, and each prompt
        /// keeps its own RNG streams: the same samples as one prompt at a time (only the last
        /// bits of the logits can differ).
        batch_buffer_sampling: bool = true, kind "bool", why "same samples, faster decoding";
        /// Adapter agents on one shared base (`agents.adapter`, one process or one rank) decode
        /// together: each token step is one forward over all their rows, whose products read the
        /// base's weights once for all the agents instead of once per agent, each agent's rows
        /// adding its own adapter's term and attending over its own KV cache. Each agent keeps
        /// its sampling settings and RNG streams, and samples the same tokens bit for bit
        /// (docs/adapters.md). Off: each agent decodes alone, as before (for comparisons).
        batch_agent_sampling: bool = true, kind "bool", why "same samples, the base read once per step";
        /// Agents compute their updates at the same time. Identical results; costs a second set
        /// of gradient accumulators (one more copy of the weights) and activations. Turn it off
        /// when memory, not time, is short: then one agent's gradients and activations are held
        /// at a time (the Qwen2.5-0.5B seed scenario does).
        parallel_updates: bool = true, kind "bool", why "same results, faster";
        /// Numeric type of AdamW's two moment buffers: `f32` is torch's AdamW exactly; `bf16`
        /// halves them (8 → 4 bytes per parameter) by storing bf16 with stochastic rounding:
        /// read exactly, updated in f32, rounded up or down at random in proportion to the
        /// distance, so small updates are not lost on average. The random bits are keyed by seed, step and parameter: runs and resumes are
        /// reproducible, whatever the thread count. A checkpoint written with the other setting
        /// is converted on resume, with a note. See docs/performance.md.
        optimizer_state_dtype: Dtype = Dtype::F32, kind "`f32` \\| `bf16`",
            why "torch's AdamW exactly", check state_precision;
        /// Completions per forward/backward pass in the loss; `0` = all K of a node sample in
        /// one pass. Gradients are accumulated in place across passes, so results do not
        /// depend on it (up to float rounding); smaller uses less activation memory, larger
        /// makes bigger products, which pays on larger models (the Qwen2.5-0.5B seed scenario
        /// sets 8). Not in CoMLRL, which scores one sequence at a time.
        micro_batch_size: usize = 2, kind "integer ≥ 0",
            why "little activation memory, fast on small models";
        /// Keep only each decoder layer's input during the loss's forward and re-run one layer
        /// at a time in the backward (transformers' `gradient_checkpointing`). One extra
        /// forward's compute for a fraction of the activation memory. Layers whose activations
        /// fit `activation_budget_mb` are not re-run.
        gradient_checkpointing: bool = true, kind "bool", why "a fraction of the memory";
        /// With `gradient_checkpointing`, the loss's first forward keeps the activations of
        /// layers (bottom first) while one pass's kept activations fit in this many MiB, and
        /// those layers skip their re-run in the backward: identical results, less compute.
        /// It bounds the extra memory: at most this much per pass (per agent updating at the
        /// same time, and per waiting pass where a mini-batch runs its LM heads first, see
        /// docs/performance.md). Small models keep every layer within the default; a
        /// Qwen2.5-0.5B-sized model keeps about one layer of an 8-sequence pass (the norms'
        /// outputs, attention probabilities and SwiGLU are recomputed, not kept). 0 re-runs
        /// every layer.
        activation_budget_mb: usize = 96, kind "integer ≥ 0",
            why "small models skip the re-run, at a bounded cost in memory";
        /// With `gradient_checkpointing`, the loss computes the prompt that a pass's
        /// completions share (they come from one node sample) once instead of once per
        /// completion: its tokens but the last go through the layers as one row, packed into
        /// the same products as the completions, which attend to its keys and values; the
        /// gradients sent back to those are summed into that row's backward. The same sums as
        /// computing every row whole, up to float rounding, with (rows − 1) × (prompt tokens −
        /// 1) fewer positions in each of a pass's products, so it pays most with long prompts
        /// (chat templates, system prompts, task statements) and passes of many rows
        /// (`micro_batch_size`). Passes on non-f32 weights or a GPU are computed whole. `false` computes every
        /// row whole, as CoMLRL does. See docs/performance.md.
        share_prompt: bool = true, kind "bool", why "same gradients, fewer products";
        /// Operand type of the update's big products: `f32` is the exact path; `bf16` rounds
        /// both operands of every projection's x·Wᵀ, dy·W and dyᵀ·x and of the LM head's
        /// products to bf16 and sums in f32 (TRL's `bf16=True` autocast). Weights, gradients and
        /// AdamW state stay f32; norms, softmax, attention scores, RoPE, SwiGLU and the loss stay
        /// f32; sampling and scoring are not affected (see `agents.sampling_dtype`). Needs
        /// `gradient_checkpointing: true` and f32 weights. It pays where the CPU multiplies bf16
        /// faster than f32 (AMX, AMD's `vdpbf16ps`); on Intel cores without AMX `f32` is
        /// faster, and the run says so. See docs/performance.md.
        compute_dtype: Dtype = Dtype::F32, kind "`f32` \\| `bf16`",
            why "exact: the update in f32", check compute_precision;
        /// A mini-batch of several passes prepares each weight once for all of them when the
        /// copies fit in this many MiB (per agent updating at the same time; 4 bytes a
        /// parameter): with `compute_dtype: bf16` packed for the bf16 kernel (both layouts),
        /// in f32 a contiguous Wᵀ, which gemm multiplies faster than the strided view where a
        /// pass has few rows. Else each product reads the weight as it is. The same products
        /// bit for bit. 0: no copies.
        packed_weights_mb: usize = 256, kind "integer ≥ 0",
            why "small models prepare once; large ones read their weights in place";
        /// Most joint actions a rollout node may score (`cross`: num_generations^agents). Each
        /// is one reward call over N completions; 4096 keeps a node's scoring to seconds and
        /// its memory to a few MB with a wide margin for multi-turn trees (joint^turns nodes).
        /// Raise it knowingly.
        max_joint_actions: usize = 4096, kind "integer ≥ 1", why "seconds per node",
            check at_least(1, "use e.g. `max_joint_actions: 4096`; `cross` scores at least one joint action"),
            only Only::Cross;
        /// `decentralized`: each agent its own policy over its own prompt. `centralized`
        /// (CoMLRL's `CentralizedMAGRPOTrainer`): one policy, agent 0's model, sampling and
        /// learning rate, acts for every agent (the other agents give only their `template`):
        /// its prompt asks for every agent's output in `<agent_i>` tags, built from each
        /// agent's own prompt; each of its K joint answers is split into the agents' outputs
        /// only for the reward, and the update is MAGRPO's (or, under `madpo`, MADPO's with the
        /// answers as joint candidates; under `marlhf`, MAGRPO's against a reward model of the
        /// tagged prompt and the whole answer) on the joint answer's tokens (every token, EOS
        /// included, as CoMLRL scores it). An answer with no tag at all gives every agent `""`
        /// (CoMLRL). Single turn, `magrpo` and its family, `madpo` or `marlhf`, 2 or more
        /// agents; set too by `preference.collaboration_mode`. See docs/algorithms.md.
        collaboration_mode: CollaborationMode = CollaborationMode::Decentralized,
            kind "`decentralized` \\| `centralized`",
            why "CoMLRL (`MAGRPOConfig`'s default)";
    }
    resolved {
        /// Required iff `num_turns > 1`: `{rhai: path}` plus optional `params`, the script that
        /// writes each agent's next-turn prompt from the branch's history (CoMLRL's
        /// `external_transition` callable). It defines `fn transition(ctx)` returning an array
        /// of one prompt string per agent; `ctx` is `#{prompt, fields, params, turn,
        /// agent_count, completions, prompt_history, response_history}` — `completions` are the
        /// parent joint action's completions (agent 0 first), `prompt_history[i]` /
        /// `response_history[i]` agent i's prompts and completions along the branch including
        /// the parent turn, `turn` the 1-based turn just completed. It runs in the reward
        /// sandbox. Or `{plugin: path}`: a native transition plugin exporting
        /// `comlrl_transition_v1` (see "Transition plugins" in the reward guide), run in a
        /// child process unless `isolate: false`. `time_budget_ms`, `isolate` and `on_error`
        /// work as on a reward term (one call writes one joint action's prompts). Each joint
        /// action of a turn branches into a child node with G new generations per agent; a
        /// joint action's return is its reward + `discount` × the mean of its child's returns;
        /// every node is a training sample.
        external_transition: RawTransition => Option<TransitionPlan>, kind "mapping",
            shown "none", why "",
            via |d, p, raw| transition(d, &p.key("external_transition"), raw, num_turns, cx),
            emit transition_raw;
        /// The critic of `algorithm: iac` or `maac`: its model, learning rate, type and value
        /// head (CoMLRL `IACConfig`'s and `MAACConfig`'s critic fields); its keys are in the `trainer.critic` table
        /// below. Warned about and ignored under an algorithm without a critic.
        critic: RawCritic => Option<CriticPlan>, kind "mapping", shown "all defaults (`iac`, `maac`)",
            why "",
            via |d, p, raw| crate::critic_keys::resolve(d, &p.key("critic"), raw, cx.critic_for.unwrap_or(algorithm), cx.base),
            emit crate::critic_keys::to_raw;
    }
}

/// When a trainer key has an effect.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Only {
    /// `num_turns > 1`.
    MultiTurn,
    /// `dataset.eval` is set.
    Eval,
    /// `joint_mode: cross`.
    Cross,
    /// `use_adaptive_entropy: true`.
    AdaptiveEntropy,
}

impl Relevance for Only {
    type Plan = TrainerPlan;

    fn holds(&self, t: &TrainerPlan, has_eval: bool) -> bool {
        match self {
            Only::MultiTurn => t.num_turns > 1,
            Only::Eval => has_eval,
            Only::Cross => t.joint_mode == JointMode::Cross,
            Only::AdaptiveEntropy => t.use_adaptive_entropy,
        }
    }

    fn moot_warning(&self) -> Option<&'static str> {
        match self {
            Only::MultiTurn => {
                Some("has no effect with num_turns: 1 (it only matters between turns)")
            }
            Only::Eval => Some("has no effect without an evaluation set (add `dataset.eval`)"),
            Only::Cross => None,
            Only::AdaptiveEntropy => Some(
                "has no effect without `use_adaptive_entropy: true` (the entropy coefficient stays `entropy_coef`)",
            ),
        }
    }
}

/// `clip_delta`: a cap on the ratio above 1 (a cap at or below 1 would clip every on-policy
/// token).
fn ratio_cap(_key: &str, v: &f64) -> Option<Bad> {
    (!(*v > 1.0 && v.is_finite())).then(|| Bad {
        message: format!("clip_delta must be a number above 1 (got {v})"),
        hint: "use e.g. `clip_delta: 1.5` (above 1 + clip_eps_high), or remove it".into(),
    })
}

/// `optimizer_state_dtype`: f32 or bf16; `auto` and f16 would not say what is stored.
fn state_precision(_key: &str, d: &Dtype) -> Option<Bad> {
    matches!(d, Dtype::Auto | Dtype::F16).then(|| Bad {
        message: format!(
            "optimizer_state_dtype {} is not supported",
            if *d == Dtype::Auto { "auto" } else { "f16" }
        ),
        hint: "use `optimizer_state_dtype: f32` (torch's AdamW exactly) or `bf16` (half the memory, stochastic rounding)".into(),
    })
}

/// `num_generations` below what `algorithm` needs (checked in `trainer.rs`, which knows it).
pub(crate) fn group_size(algorithm: Algorithm, n: usize) -> Option<Bad> {
    match algorithm.min_num_generations() {
        2 if n < 2 => Some(Bad {
            message: format!("num_generations must be at least 2 (got {n}): the group baseline compares several generations of the same prompt"),
            hint: "set `num_generations: 2` or more (CoMLRL default 4; the story example uses 8)".into(),
        }),
        _ if n < 1 => Some(Bad {
            message: format!("num_generations must be at least 1 (got {n})"),
            hint: "set `num_generations: 1` (CoMLRL's IAC default) or more".into(),
        }),
        _ => None,
    }
}

/// `compute_dtype`: f32 or bf16; `auto` and f16 have no update path.
fn compute_precision(_key: &str, d: &Dtype) -> Option<Bad> {
    let name = match d {
        Dtype::F32 | Dtype::Bf16 => return None,
        Dtype::Auto => "auto",
        Dtype::F16 => "f16",
    };
    Some(Bad {
        message: format!("compute_dtype {name} is not supported"),
        hint: "use `compute_dtype: f32` (the exact update) or `bf16` (bf16 operands, f32 sums, \
               f32 weights and optimizer state)"
            .into(),
    })
}

/// `external_transition`: required with more than one turn, never called with one.
fn transition(
    d: &mut Diags,
    path: &KeyPath,
    raw: Option<&RawTransition>,
    num_turns: usize,
    cx: &TrainerContext,
) -> Option<TransitionPlan> {
    match raw {
        None if num_turns > 1 => {
            d.error(
                ErrorKind::MissingKey,
                &KeyPath::root().key("trainer").key("num_turns"),
                format!("num_turns: {num_turns} needs `trainer.external_transition`, which writes each agent's next-turn prompt"),
                Some("add `external_transition: {rhai: path/to/transition.rhai}` under `trainer`, or set `num_turns: 1`".into()),
            );
            None
        }
        None => None,
        Some(t) => {
            if num_turns == 1 {
                d.warn(path, "is never called with num_turns: 1");
            }
            let source = resolve_code(
                d,
                path,
                t.rhai.as_deref(),
                t.plugin.as_deref(),
                cx.base,
                cx.opts,
            )?;
            let params = t
                .params
                .clone()
                .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
            if !params.is_object() {
                d.error(
                    ErrorKind::WrongType,
                    &path.key("params"),
                    "params must be a mapping",
                    Some("write `params: {key: value}`".into()),
                );
            }
            if t.time_budget_ms == Some(0) {
                d.invalid(
                    &path.key("time_budget_ms"),
                    "time_budget_ms must be at least 1",
                    "remove it for the default (see docs/rewards.md), or give milliseconds, e.g. `time_budget_ms: 2000`",
                );
            }
            if matches!(source, CodeSource::Rhai(_)) && t.isolate.is_some() {
                d.invalid(
                    &path.key("isolate"),
                    "`isolate` applies to plugins only; Rhai scripts always run in the sandbox",
                    "remove `isolate` from `external_transition`",
                );
            }
            Some(TransitionPlan {
                source,
                params,
                time_budget_ms: t.time_budget_ms,
                isolate: t.isolate,
                on_error: t.on_error,
            })
        }
    }
}

fn transition_raw(t: &Option<TransitionPlan>) -> Option<RawTransition> {
    t.as_ref().map(|x| {
        let (rhai, plugin) = match &x.source {
            CodeSource::Rhai(p) => (Some(p.clone()), None),
            CodeSource::Plugin(p) => (None, Some(p.clone())),
        };
        RawTransition {
            rhai,
            plugin,
            params: Some(x.params.clone()),
            time_budget_ms: x.time_budget_ms,
            isolate: x.isolate,
            on_error: x.on_error,
        }
    })
}
