//! Critics with LoRA adapters (`trainer.critic.adapter`): a separate critic on an adapted
//! agent's model shares that agent's base (the same tensors; critics on one model share one
//! base among themselves), trains only its adapters and value head, and leaves the base bit for
//! bit after 10 AdamW steps; IAC and MAAC runs with adapted critics learn their values, save
//! each critic as a PEFT adapter directory with its `value_head.safetensors`, and an
//! interrupted run resumed from its checkpoint (adapters, head, moments) ends as an
//! uninterrupted one. A head on the agent's backbone (`separate: false`) trains on the agent's
//! adapted backbone.
use crate::common;
use candle_core::{Storage, Tensor};
use comlrl::model::decoder::adapted::projection_weights;
use comlrl::model::grad::recompute::PassPlan;
use comlrl::model::grad::value::ValueAt;
use comlrl::model::{ComputeDtype, Policy, ValueHead};
use comlrl::train::algorithms::actor_critic::critic::{Critic, Row};
use comlrl::train::optim::{AdamW, AdamWConfig};
use comlrl::train::setup::critics::{load_critic, CriticId};
use comlrl::train::setup::models::load_placed;
use comlrl::train::Trainer;
use common::tiny_run::{load_small, StopAt};
use common::{f32s, metrics, metrics_without_timing};
use std::path::Path;

/// Where a CPU tensor's elements start in memory.
fn data_ptr(t: &Tensor) -> usize {
    let (st, l) = t.storage_and_layout();
    match &*st {
        Storage::Cpu(c) => c.as_slice::<f32>().unwrap()[l.start_offset()..].as_ptr() as usize,
        _ => panic!("not a CPU tensor"),
    }
}

fn base_ptrs(p: &Policy) -> Vec<usize> {
    projection_weights(&p.model).iter().map(data_ptr).collect()
}

const ADAPTED: [&str; 3] = [
    "agents.adapter.rank=4",
    "trainer.critic.adapter.rank=4",
    "trainer.critic.adapter.alpha=8",
];

#[test]
fn a_critic_on_an_adapted_agents_base_shares_it_and_leaves_it_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sets = vec!["trainer.algorithm=iac"];
    sets.extend(ADAPTED);
    let s = load_small(&tmp.path().join("run"), &sets);
    let c = s.trainer.critic.clone().unwrap();
    let agents = load_placed(&s, |_| true, false).unwrap();
    let model = &s.agents[0].model;
    let critic = load_critic(&s, &c, CriticId::Agent(0), model, &agents, &[]).unwrap();
    let agent = agents[0].as_ref().unwrap();
    assert_eq!(
        base_ptrs(&critic),
        base_ptrs(agent),
        "the agent's base is not shared"
    );
    // Its trainable tensors are its adapter's alone (two per projection and layer).
    let layers = critic.config.num_hidden_layers;
    assert_eq!(critic.vars().len(), 2 * 7 * layers);
    assert!(critic.vars().iter().all(|(n, _)| n.contains("lora_")));
    // A critic base of another dtype is not the agent's: loaded on its own.
    let mut bf16 = c.clone();
    bf16.base_dtype = comlrl_scenario::BaseDtype::Bf16;
    let other = load_critic(&s, &bf16, CriticId::Agent(1), model, &agents, &[]).unwrap();
    let held = projection_weights(&other.model);
    assert!(held.iter().all(|w| w.dtype() == candle_core::DType::BF16));
    // Without adapted agents, a second critic on the same model shares the first critic's base.
    let plain: Vec<Option<Policy>> = vec![None, None];
    let first = load_critic(&s, &c, CriticId::Agent(0), model, &plain, &[]).unwrap();
    let second = load_critic(&s, &c, CriticId::Agent(1), model, &plain, &[&first]).unwrap();
    assert_eq!(base_ptrs(&first), base_ptrs(&second));
    assert_ne!(base_ptrs(&first), base_ptrs(agent));

    // 10 AdamW steps of the critic's adapters and head on fixed targets: the value loss falls,
    // the shared base and the agent's outputs stay bit for bit.
    let before: Vec<(String, Vec<f32>)> = agent
        .base_vars()
        .into_iter()
        .map(|(n, v)| (n, f32s(v.as_tensor())))
        .collect();
    let agent_adapter: Vec<Vec<f32>> = agent
        .vars()
        .iter()
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    let dev = critic.model.device().clone();
    let head = ValueHead::init(
        critic.config.hidden_size,
        None,
        3,
        candle_core::DType::F32,
        &dev,
    )
    .unwrap();
    let critic = Critic {
        policy: critic,
        head,
        at: ValueAt::SequenceEnd,
    };
    let initial: Vec<Vec<f32>> = critic
        .policy
        .vars()
        .iter()
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    let mut opt = AdamW::new(
        critic.vars(),
        AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        },
    );
    assert_eq!(
        opt.params.len(),
        2 * 7 * layers + 2,
        "the adapters and the head only"
    );
    let vars: Vec<candle_core::Var> = opt.params.iter().map(|p| p.var.clone()).collect();
    let prompts: [&[u32]; 3] = [&[5, 17, 30], &[8, 2, 44, 9], &[61, 3]];
    let answers: [&[u32]; 3] = [&[70, 71], &[12], &[40, 41, 42]];
    let rows: Vec<Row> = prompts.iter().copied().zip(answers).collect();
    let targets = [0.5f32, -0.25, 1.0];
    let plan = PassPlan::rerun_all(ComputeDtype::F32);
    let mut losses = Vec::new();
    for _ in 0..10 {
        let g = critic
            .loss_and_grads(&rows, &targets, 0.6, &vars, plan)
            .unwrap();
        assert!(
            g.grads.iter().all(Option::is_some),
            "every adapter tensor has a gradient"
        );
        losses.push(g.loss);
        opt.step_grads(&g.grads, 1e-2, None).unwrap();
    }
    assert!(
        losses[9] < 0.5 * losses[0],
        "the value loss did not fall: {losses:?}"
    );
    let after: Vec<(String, Vec<f32>)> = agent
        .base_vars()
        .into_iter()
        .map(|(n, v)| (n, f32s(v.as_tensor())))
        .collect();
    assert!(before == after, "the shared base changed");
    assert_eq!(base_ptrs(&critic.policy), base_ptrs(agent));
    let trained: Vec<Vec<f32>> = (critic.policy.vars().iter())
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    assert!(trained != initial, "the critic's adapters trained");
    let agent_after: Vec<Vec<f32>> = (agent.vars().iter())
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    assert!(agent_after == agent_adapter, "the agent's adapter changed");
}

/// The run settings of `iac_run.rs`: a buffer of 3 in mini-batches of 2, a checkpoint every 4.
const RUN: [&str; 6] = [
    "trainer.num_generations=2",
    "trainer.rollout_buffer_size=3",
    "trainer.train_batch_size=2",
    "trainer.agent_learning_rate=1e-3",
    "trainer.critic.learning_rate=1e-2",
    "checkpoint_every=4",
];

fn sets(algorithm: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec![algorithm];
    v.extend(RUN);
    v.extend(ADAPTED);
    v.extend(extra);
    v
}

fn read(out: &Path, file: &str) -> Vec<u8> {
    std::fs::read(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The mean of metric `name` over the rows `rows` of a run's metrics.
fn mean(out: &Path, name: &str, rows: std::ops::Range<usize>) -> f64 {
    let m = metrics(out);
    let n = rows.len() as f64;
    m[rows]
        .iter()
        .map(|r| r[name].as_f64().unwrap_or_else(|| panic!("{name} in {r}")))
        .sum::<f64>()
        / n
}

/// A run of `sets` in `a` straight through, and in `b` stopped after step 7 and resumed: the
/// same metrics, and the same `files` at the end.
fn straight_and_resumed(a: &Path, b: &Path, sets: &[&str], files: &[String]) {
    let done = Trainer::new(load_small(a, sets))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    let mut t = Trainer::new(load_small(b, sets)).unwrap();
    let flag = t.interrupt_flag();
    assert!(t.run(false, &mut StopAt(7, flag)).unwrap().interrupted);
    let done = Trainer::new(load_small(b, sets))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(a), metrics_without_timing(b));
    for f in files {
        assert!(read(a, f) == read(b, f), "{f} differs after the resume");
    }
}

#[test]
fn iac_with_adapted_critics_learns_saves_peft_critics_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    // The critics' adapters with a dropout: the resumed run must draw the same masks.
    let sets = sets(
        "trainer.algorithm=iac",
        &["trainer.critic.adapter.dropout=0.1"],
    );
    let mut files = Vec::new();
    for i in 0..2 {
        files.extend([
            format!("models/agent_{i}/adapter_model.safetensors"),
            format!("models/critic_{i}/adapter_model.safetensors"),
            format!("models/critic_{i}/value_head.safetensors"),
            format!("checkpoints/step-00000020/critic_{i}.safetensors"),
            format!("checkpoints/step-00000020/critic_optimizer_{i}.safetensors"),
        ]);
    }
    straight_and_resumed(&a, &b, &sets, &files);
    // The dropout is applied: without it the critics end elsewhere.
    let c = tmp.path().join("no-dropout");
    let no_dropout: Vec<&str> = sets
        .iter()
        .copied()
        .filter(|x| !x.contains("dropout"))
        .collect();
    Trainer::new(load_small(&c, &no_dropout))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    let f = "models/critic_0/adapter_model.safetensors";
    assert!(
        read(&a, f) != read(&c, f),
        "the critic's dropout changed nothing"
    );
    for i in 0..2 {
        // The value loss falls from the first logging window to the last.
        let name = format!("agent_{i}/value_loss");
        let (first, last) = (mean(&a, &name, 0..1), mean(&a, &name, 5..7));
        assert!(last < first, "agent {i}: value loss {first} -> {last}");
        // The critic is a PEFT adapter directory (no base weights) with its head.
        let dir = a.join(format!("models/critic_{i}"));
        assert!(dir.join("adapter_config.json").is_file());
        assert!(
            !dir.join("model.safetensors").exists(),
            "the base is not saved"
        );
        let cfg: serde_json::Value =
            serde_json::from_slice(&read(&dir, "adapter_config.json")).unwrap();
        assert_eq!(cfg["r"], 4);
        assert_eq!(cfg["lora_dropout"], 0.1);
        assert!(dir.join("value_head.safetensors").is_file());
        // The checkpoint holds the adapters and the head, nothing of the base.
        let t = candle_core::safetensors::load(
            a.join(format!("checkpoints/step-00000020/critic_{i}.safetensors")),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        assert!(t
            .keys()
            .all(|k| k.contains("lora_") || k.starts_with("value_head.")));
        assert!(t.keys().any(|k| k.starts_with("value_head.")));
    }
}

#[test]
fn maac_with_an_adapted_critic_learns_saves_it_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let sets = sets("trainer.algorithm=maac", &[]);
    let files = [
        "models/critic/adapter_model.safetensors",
        "models/critic/value_head.safetensors",
        "models/agent_1/adapter_model.safetensors",
        "checkpoints/step-00000020/critic.safetensors",
        "checkpoints/step-00000020/critic_optimizer.safetensors",
    ]
    .map(String::from);
    straight_and_resumed(&a, &b, &sets, &files);
    let (first, last) = (
        mean(&a, "agent_0/value_loss", 0..1),
        mean(&a, "agent_0/value_loss", 5..7),
    );
    assert!(last < first, "value loss {first} -> {last}");
    let dir = a.join("models/critic");
    assert!(dir.join("adapter_config.json").is_file());
    assert!(!dir.join("model.safetensors").exists());
}

/// `separate: false` with adapted agents: the head reads the agent's adapted backbone, its
/// value gradient joining the adapters' (no critic adapter of its own; that is refused by the
/// scenario).
#[test]
fn a_shared_head_trains_on_the_agents_adapted_backbone() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = [
        "trainer.algorithm=iac",
        "trainer.num_generations=2",
        "trainer.rollout_buffer_size=3",
        "trainer.train_batch_size=2",
        "trainer.agent_learning_rate=1e-2",
        "agents.adapter.rank=4",
        "trainer.critic.separate=false",
    ];
    let done = Trainer::new(load_small(&out, &sets))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    for i in 0..2 {
        let name = format!("agent_{i}/value_loss");
        let (first, last) = (mean(&out, &name, 0..1), mean(&out, &name, 5..7));
        assert!(
            last.is_finite() && last < first,
            "agent {i}: {first} -> {last}"
        );
        let dir = out.join(format!("models/agent_{i}"));
        assert!(dir.join("adapter_model.safetensors").is_file());
        assert!(dir.join("value_head.safetensors").is_file());
        assert!(!out.join(format!("models/critic_{i}")).exists());
    }
}

/// A critic adapter of the same shape would load under another scaling or base dtype: a resume
/// with another `trainer.critic.adapter` or `base_dtype` is refused, naming what each trained.
#[test]
fn a_resume_with_another_critic_adapter_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let base = sets("trainer.algorithm=iac", &[]);
    let mut t = Trainer::new(load_small(&out, &base)).unwrap();
    let flag = t.interrupt_flag();
    assert!(t.run(false, &mut StopAt(5, flag)).unwrap().interrupted);
    let resume = |extra: &'static str| {
        let mut s = base.clone();
        s.push(extra);
        let err = match Trainer::new(load_small(&out, &s)) {
            Ok(mut t) => match t.run(true, &mut ()) {
                Ok(_) => panic!("the resume is not refused"),
                Err(e) => e,
            },
            Err(e) => e,
        };
        err.chain()
    };
    let e = resume("trainer.critic.adapter.alpha=16");
    assert!(
        e.contains("critics: a LoRA adapter (r 4, alpha 8")
            && e.contains("alpha 16")
            && e.contains("trainer.critic"),
        "{e}"
    );
    let e = resume("trainer.critic.base_dtype=bf16");
    assert!(
        e.contains("on a bf16 base") && e.contains("--overwrite"),
        "{e}"
    );
    // As the run had it, the resume goes on to the end.
    let done = Trainer::new(load_small(&out, &base))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
}
