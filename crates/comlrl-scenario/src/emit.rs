//! The resolved scenario written back as a scenario file: every default explicit, every path
//! absolute, agents in list form. Stored with checkpoints and as the W&B config; loading it again
//! gives the same plan (rows of a data file are re-read from its path, not embedded).
use crate::data::{DataSource, Dataset};
use crate::plan::{CodeSource, JointMode, ModelSource, Scenario};
use crate::raw::{
    RawAgent, RawDataSource, RawDataset, RawLogging, RawTrainer, RawTransition, RawWandb,
};
use crate::spec::{ProcessorSpec, RewardSpec};
use serde::{Serialize, Serializer};
use std::path::PathBuf;

#[derive(Serialize)]
struct Emitted<'a> {
    dataset: RawDataset,
    agents: Vec<RawAgent>,
    reward: &'a [RewardSpec],
    #[serde(serialize_with = "processors_as_maps")]
    reward_processors: &'a [ProcessorSpec],
    trainer: RawTrainer,
    logging: RawLogging,
    seed: u64,
    output_dir: &'a PathBuf,
    checkpoint_every: u64,
}

/// `- scale: 100.0` rather than YAML tags (`- !scale 100.0`), as users write them.
fn processors_as_maps<S: Serializer>(p: &&[ProcessorSpec], s: S) -> Result<S::Ok, S::Error> {
    let maps: Vec<serde_json::Value> = p
        .iter()
        .map(|x| serde_json::to_value(x).unwrap_or(serde_json::Value::Null))
        .collect();
    maps.serialize(s)
}

fn source(ds: &Dataset) -> RawDataSource {
    match &ds.source {
        DataSource::Inline => RawDataSource {
            prompts: Some(ds.rows.iter().map(|r| r.prompt.clone()).collect()),
            ..Default::default()
        },
        DataSource::File { path, format } => RawDataSource {
            path: Some(path.clone()),
            format: Some(*format),
            prompt_field: Some(ds.prompt_field.clone()),
            ..Default::default()
        },
        DataSource::Hub {
            repo,
            config,
            split,
            ..
        } => RawDataSource {
            hub: Some(repo.clone()),
            config: Some(config.clone()),
            split: Some(split.clone()),
            prompt_field: Some(ds.prompt_field.clone()),
            ..Default::default()
        },
    }
}

pub(crate) fn to_yaml(s: &Scenario) -> String {
    let train = source(&s.dataset.train);
    let dataset = RawDataset {
        prompts: train.prompts,
        path: train.path,
        format: train.format,
        prompt_field: train.prompt_field,
        hub: train.hub,
        config: train.config,
        split: train.split,
        eval: s.dataset.eval.as_ref().map(source),
    };
    let agents = s
        .agents
        .iter()
        .map(|a| RawAgent {
            model: match &a.model.source {
                ModelSource::Local(p) => p.display().to_string(),
                _ => a.model.spec.clone(),
            },
            dtype: Some(a.dtype),
            sampling_dtype: Some(a.sampling_dtype),
            temperature: Some(a.sampling.temperature),
            top_p: Some(a.sampling.top_p),
            top_k: Some(a.sampling.top_k),
            max_new_tokens: Some(a.sampling.max_new_tokens),
            learning_rate: Some(a.learning_rate),
            template: Some(a.template.as_str().to_string()),
            chat_template: Some(a.chat_template.as_setting()),
            system_prompt: a.system_prompt.clone(),
        })
        .collect();
    let t = &s.trainer;
    // Settings that are moot in this run (multi-turn ones with one turn, eval ones without an
    // eval set) are left out: reloading gives the same plan, without "no effect" warnings.
    let multi = t.num_turns > 1;
    let eval = s.dataset.eval.is_some();
    let trainer = RawTrainer {
        num_train_epochs: Some(t.num_train_epochs),
        agent_learning_rate: Some(t.agent_learning_rate),
        num_generations: Some(t.num_generations),
        joint_mode: Some(t.joint_mode),
        advantage_mode: Some(t.advantage_mode),
        advantage_normalization: Some(t.advantage_normalization),
        rollout_buffer_size: Some(t.rollout_buffer_size),
        train_batch_size: Some(t.train_batch_size),
        num_turns: Some(t.num_turns),
        discount: multi.then_some(t.discount),
        early_termination_threshold: multi.then_some(t.early_termination_threshold),
        external_transition: t.external_transition.as_ref().map(|x| {
            let (rhai, plugin) = match &x.source {
                CodeSource::Rhai(p) => (Some(p.clone()), None),
                CodeSource::Plugin(p) => (None, Some(p.clone())),
            };
            RawTransition {
                rhai,
                plugin,
                params: Some(x.params.clone()),
            }
        }),
        external_prompt_passthrough: multi.then_some(t.external_prompt_passthrough),
        eval_interval: eval.then_some(t.eval_interval),
        eval_num_samples: eval.then_some(t.eval_num_samples),
        eval_batch_size: eval.then_some(t.eval_batch_size),
        max_grad_norm: t.max_grad_norm,
        warmup_steps: Some(t.warmup_steps),
        lr_scheduler: Some(t.lr_scheduler),
        kl_coef: Some(t.kl_coef),
        adam_beta1: Some(t.adam_beta1),
        adam_beta2: Some(t.adam_beta2),
        adam_epsilon: Some(t.adam_epsilon),
        weight_decay: Some(t.weight_decay),
        parallel_sampling: Some(t.parallel_sampling),
        batch_buffer_sampling: Some(t.batch_buffer_sampling),
        parallel_updates: Some(t.parallel_updates),
        micro_batch_size: Some(t.micro_batch_size),
        gradient_checkpointing: Some(t.gradient_checkpointing),
        max_joint_actions: (t.joint_mode == JointMode::Cross).then_some(t.max_joint_actions),
    };
    let logging = RawLogging {
        steps: Some(s.logging.steps),
        wandb: s.logging.wandb.as_ref().map(|w| RawWandb {
            project: Some(w.project.clone()),
            entity: w.entity.clone(),
            name: Some(w.name.clone()),
            tags: Some(w.tags.clone()),
        }),
        tensorboard: Some(s.logging.tensorboard),
    };
    let doc = Emitted {
        dataset,
        agents,
        reward: &s.reward.terms,
        reward_processors: &s.reward.processors,
        trainer,
        logging,
        seed: s.seed,
        output_dir: &s.output_dir,
        checkpoint_every: s.checkpoint_every,
    };
    let mut out = format!(
        "# Resolved comlrl scenario `{}` (from {}).\n",
        s.name,
        s.source.display()
    );
    for o in &s.overrides {
        out.push_str(&format!("# --set {o}\n"));
    }
    match serde_norway::to_string(&doc) {
        Ok(body) => out.push_str(&body),
        Err(e) => out.push_str(&format!("# could not serialize the scenario: {e}\n")),
    }
    out
}
