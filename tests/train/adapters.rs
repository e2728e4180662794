//! Training LoRA adapters on a frozen base (issue 43): the optimizer holds only the adapters,
//! the base stays bit for bit after 10 AdamW steps, agents on one base share its tensors and
//! training one never changes another's outputs; a run writes each agent as a PEFT adapter
//! directory and resumes exactly; a base held in bf16 or as Q8_0 blocks likewise.
use crate::common;
use candle_core::{DType, Device, Storage, Tensor, Var};
use comlrl::model::decoder::adapted::projection_weights;
use comlrl::model::decoder::lora::{LoraSpec, PROJECTIONS};
use comlrl::model::grad::recompute::weighted_logprob_grads;
use comlrl::model::io::peft::Adapter;
use comlrl::model::{completion_logprobs, LoadOptions, Mode, ModelSource, Policy, ScoreLayout};
use comlrl::train::optim::{AdamW, AdamWConfig};
use common::tiny_run::StopAt;
use common::tiny_run::*;
use common::*;

fn spec() -> LoraSpec {
    LoraSpec {
        rank: 4,
        alpha: 8.0,
        rslora: false,
        targets: PROJECTIONS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Where a CPU tensor's elements start in memory.
fn data_ptr(t: &Tensor) -> usize {
    let (st, l) = t.storage_and_layout();
    match &*st {
        Storage::Cpu(c) => c.as_slice::<f32>().unwrap()[l.start_offset()..].as_ptr() as usize,
        _ => panic!("not a CPU tensor"),
    }
}

fn logprobs(p: &Policy) -> Vec<f32> {
    let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
    let lay = ScoreLayout::new(&p.model, &[&ids[..2]], &[&ids[2..]], p.pad_id).unwrap();
    f32s(&completion_logprobs(&p.model, &lay, Mode::Train).unwrap())
}

#[test]
fn ten_adamw_steps_train_only_the_adapter_on_a_shared_base() {
    let base = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let init =
        |seed| Adapter::init(spec(), 0.0, &base.config, seed, DType::F32, &Device::Cpu).unwrap();
    let (a1, a2) = (init(1), init(2));
    let p1 = base.with_adapter(a1).unwrap();
    let p2 = p1.share_base(a2).unwrap();
    // One base in memory: every base tensor of both agents is the same storage.
    let w = |p: &Policy| {
        let mut w = projection_weights(&p.model);
        w.push(p.model.lm_head().clone());
        w
    };
    for (x, y) in w(&p1).iter().zip(w(&p2)) {
        assert_eq!(data_ptr(x), data_ptr(&y), "the base is not shared");
    }
    let base_before: Vec<(String, Vec<f32>)> = p1
        .base_vars()
        .into_iter()
        .map(|(n, v)| (n, f32s(v.as_tensor())))
        .collect();
    let other_before = logprobs(&p2);
    let first_before = logprobs(&p1);
    let vars = p1.vars();
    assert_eq!(vars.len(), 2 * 7 * p1.config.num_hidden_layers);
    let mut opt = AdamW::new(
        vars.clone(),
        AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        },
    );
    assert_eq!(
        opt.params.len(),
        vars.len(),
        "AdamW holds the adapters only"
    );
    let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
    let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
    let lay = ScoreLayout::new(&p1.model, &[&ids[..2]], &[&ids[2..]], p1.pad_id).unwrap();
    for _ in 0..10 {
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        weighted_logprob_grads(&p1.model, &lay, &[-1.0], &vs, &mut acc).unwrap();
        opt.step_grads(&acc, 1e-2, None).unwrap();
        p1.weights_changed().unwrap();
    }
    assert_ne!(logprobs(&p1), first_before, "the adapter trained");
    for ((n, before), (_, v)) in base_before.iter().zip(p1.base_vars()) {
        assert!(before == &f32s(v.as_tensor()), "{n} changed");
    }
    assert!(
        logprobs(&p2) == other_before,
        "agent 2 changed with agent 1's training"
    );
}

/// Agents on one base also share its sampling copies (built once, by whichever agent asks
/// first; released and rebuilt together): each samples exactly what the same adapter on a base
/// of its own samples, with the transposed f32 copies and with bf16 copies, before and after
/// the copies are released for an update round.
#[test]
fn agents_on_one_base_sample_as_agents_alone_with_shared_copies() {
    use comlrl::model::{generate, SamplingParams};
    let src = ModelSource::Local(fixtures().join("tiny-qwen2"));
    let init = |p: &Policy, seed| {
        let a = Adapter::init(spec(), 0.0, &p.config, seed, DType::F32, &Device::Cpu).unwrap();
        // A non-zero B, so each agent's term shows in its samples.
        for (n, v) in a.vars() {
            if n.contains("lora_B") {
                let t = (Tensor::randn(0f32, 0.05, v.dims(), &Device::Cpu).unwrap()
                    + Tensor::ones(v.dims(), DType::F32, &Device::Cpu).unwrap() * 0.01)
                    .unwrap();
                v.set(&t).unwrap();
            }
        }
        a
    };
    let sample = |p: &Policy| {
        let params = SamplingParams {
            max_new_tokens: 12,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            greedy: false,
            ignore_eos: true,
        };
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(7);
        let prompt: Vec<u32> = vec![5, 17, 230, 41];
        generate(
            p.sampler(),
            &[prompt.as_slice()],
            3,
            &params,
            &p.eos_ids,
            p.pad_id,
            &mut rng,
        )
        .unwrap()
    };
    for sampling_dtype in [DType::F32, DType::BF16] {
        let opts = LoadOptions {
            sampling_dtype,
            copies_now: false,
            ..LoadOptions::default()
        };
        let base = Policy::load(&src, &opts).unwrap();
        let (a1, a2) = (init(&base, 1), init(&base, 2));
        let p1 = base.with_adapter(a1).unwrap();
        let p2 = p1.share_base(a2.clone()).unwrap();
        let alone = Policy::load(&src, &opts).unwrap().with_adapter(a2).unwrap();
        alone.weights_changed().unwrap();
        // Agent 2 builds the shared copies; agent 1 then finds them built.
        p2.weights_changed().unwrap();
        p1.weights_changed().unwrap();
        let want = sample(&alone);
        assert_eq!(sample(&p2), want, "{sampling_dtype:?}: shared copies");
        assert_ne!(
            sample(&p1),
            want,
            "{sampling_dtype:?}: agent 1's own adapter"
        );
        // An update round frees them (for every agent on the base); the first agent to sample
        // again rebuilds them for both.
        p1.release_sampling_copies().unwrap();
        p1.weights_changed().unwrap();
        p2.weights_changed().unwrap();
        assert_eq!(sample(&p2), want, "{sampling_dtype:?}: after a release");
    }
}

/// A run with adapters writes each agent as a PEFT adapter directory that reads back, and an
/// interrupted run resumed from its checkpoint (adapters and their moments) ends bit for bit
/// where the uninterrupted one does.
#[test]
fn an_adapter_run_saves_peft_directories_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let extra = [
        "checkpoint_every=4",
        "agents.adapter.rank=4",
        "agents.adapter.alpha=16",
        "trainer.agent_learning_rate=1e-3",
    ];
    let s = load_small(&a, &extra);
    assert_eq!(s.agents[0].adapter.as_ref().map(|x| x.rank), Some(4));
    let seed = s.seed;
    let sa = comlrl::train::Trainer::new(s)
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(sa.steps_done, 20);
    let mut t = comlrl::train::Trainer::new(load_small(&b, &extra)).unwrap();
    let flag = t.interrupt_flag();
    let sb = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(sb.interrupted && sb.steps_done == 7);
    let done = comlrl::train::Trainer::new(load_small(&b, &extra))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(&a), metrics_without_timing(&b));
    let base = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions::default(),
    )
    .unwrap();
    for i in 0..2 {
        let dir = a.join(format!("models/agent_{i}"));
        assert!(
            !dir.join("model.safetensors").exists(),
            "only the adapter is saved"
        );
        let file = format!("models/agent_{i}/adapter_model.safetensors");
        let (wa, wb) = (std::fs::read(a.join(&file)), std::fs::read(b.join(&file)));
        assert!(
            wa.unwrap() == wb.unwrap(),
            "agent {i}: resumed adapter differs"
        );
        let ad = Adapter::load(&dir, &base.config, DType::F32, &Device::Cpu).unwrap();
        assert_eq!((ad.spec.rank, ad.spec.alpha), (4, 16.0));
        // Trained: B is no longer PEFT's zero init.
        let b_sum: f32 = ad
            .vars()
            .iter()
            .filter(|(n, _)| n.contains("lora_B"))
            .map(|(_, v)| f32s(v.as_tensor()).iter().map(|x| x.abs()).sum::<f32>())
            .sum();
        assert!(b_sum > 0.0, "agent {i}: B did not train");
    }
    // A trained agent's directory merges into the run's base (the built-in model, seeded by the
    // scenario's seed): the merged model scores as the base with the adapter does.
    let merged = tmp.path().join("merged");
    let seed_arg = seed.to_string();
    let agent = a.join("models/agent_1");
    let (ok, _, err) = comlrl(&[
        "export",
        "--merge",
        "--model",
        "builtin:tiny",
        "--model-seed",
        &seed_arg,
        "--adapter",
        agent.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ])
    .output()
    .parts();
    assert!(ok, "{err}");
    let opts = LoadOptions {
        seed,
        ..LoadOptions::default()
    };
    let base = Policy::load(&ModelSource::Builtin("tiny".into()), &opts).unwrap();
    let ad = Adapter::load(&agent, &base.config, DType::F32, &Device::Cpu).unwrap();
    // Byte-level ids (the built-in model's vocabulary is 259).
    let score = |p: &Policy| {
        let ids: Vec<u32> = b"def f(x): return".iter().map(|&b| b as u32).collect();
        let lay = ScoreLayout::new(&p.model, &[&ids[..4]], &[&ids[4..]], p.pad_id).unwrap();
        f32s(&completion_logprobs(&p.model, &lay, Mode::Train).unwrap())
    };
    let plain = score(&base);
    let adapted = score(&base.with_adapter(ad).unwrap());
    let m = score(&Policy::load(&ModelSource::Local(merged), &LoadOptions::default()).unwrap());
    for (x, y) in m.iter().zip(&adapted) {
        assert!((x - y).abs() < 1e-5, "merged {x} vs adapted {y}");
    }
    assert_ne!(adapted, plain, "the trained adapter changes the outputs");
}

/// A resume must train what the checkpoint trained: an adapter of the same shape loads under
/// another α or onto a base held in another dtype, so the state records each agent's and the
/// resume names what changed.
#[test]
fn a_resume_with_another_adapter_scaling_or_base_dtype_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let extra = [
        "checkpoint_every=4",
        "agents.adapter.rank=4",
        "agents.adapter.alpha=16",
    ];
    let mut t = comlrl::train::Trainer::new(load_small(&out, &extra)).unwrap();
    let flag = t.interrupt_flag();
    assert!(t.run(false, &mut StopAt(5, flag)).unwrap().interrupted);
    let resume = |changed: &str| {
        let set: Vec<&str> = extra.iter().copied().chain([changed]).collect();
        match comlrl::train::Trainer::new(load_small(&out, &set))
            .unwrap()
            .run(true, &mut ())
        {
            Ok(_) => panic!("{changed}: resumed"),
            Err(e) => e.to_string(),
        }
    };
    let e = resume("agents.adapter.alpha=32");
    assert!(
        e.contains("trained[0]") && e.contains("alpha 16") && e.contains("alpha 32"),
        "{e}"
    );
    let e = resume("agents.base_dtype=bf16");
    assert!(
        e.contains("on a f32 base") && e.contains("on a bf16 base") && e.contains("--overwrite"),
        "{e}"
    );
    // Unchanged, it resumes.
    let done = comlrl::train::Trainer::new(load_small(&out, &extra))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
}

/// With a KL penalty, an adapted agent's reference is its own base (the same tensors: no second
/// copy of the model) with a fresh copy of its initial adapter: it scores exactly as the
/// untrained policy does, and training the policy's adapter leaves it unchanged.
#[test]
fn the_kl_reference_of_an_adapted_agent_is_its_base_with_the_initial_adapter() {
    use comlrl::dist::Placement;
    use comlrl::train::setup::Agents;
    let dir = tempfile::tempdir().unwrap();
    let model = format!("agents.model={}", fixtures().join("tiny-qwen2").display());
    let s = load_small(
        dir.path(),
        &[
            model.as_str(),
            "agents.adapter.rank=4",
            "agents.adapter.alpha=8",
            "trainer.kl_coef=0.1",
        ],
    );
    let agents = Agents::load(&s, &Placement::all_local(s.agents.len())).unwrap();
    let refs = agents
        .references
        .as_ref()
        .expect("kl_coef keeps references");
    for (p, r) in agents.policies.iter().zip(refs) {
        let (p, r) = (p.as_ref().unwrap(), r.as_ref().unwrap());
        for (x, y) in projection_weights(&p.model)
            .iter()
            .zip(projection_weights(&r.model))
        {
            assert_eq!(data_ptr(x), data_ptr(&y), "the reference copied the base");
        }
        assert!(
            logprobs(p) == logprobs(r),
            "the reference is not the initial policy"
        );
        // Train the policy's adapter: the reference stays where it was.
        let before = logprobs(r);
        let vars = p.vars();
        let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
        let mut opt = AdamW::new(
            vars.clone(),
            AdamWConfig {
                lr: 1e-2,
                ..AdamWConfig::default()
            },
        );
        let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
        let lay = ScoreLayout::new(&p.model, &[&ids[..2]], &[&ids[2..]], p.pad_id).unwrap();
        for _ in 0..3 {
            let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
            weighted_logprob_grads(&p.model, &lay, &[-1.0], &vs, &mut acc).unwrap();
            opt.step_grads(&acc, 1e-2, None).unwrap();
            p.weights_changed().unwrap();
        }
        assert!(logprobs(p) != before, "the adapter trained");
        assert!(logprobs(r) == before, "the reference moved with the policy");
    }
}

/// Where a bf16 CPU tensor's elements start in memory.
fn bf16_ptr(t: &Tensor) -> usize {
    let (st, l) = t.storage_and_layout();
    match &*st {
        Storage::Cpu(c) => {
            c.as_slice::<half::bf16>().unwrap()[l.start_offset()..].as_ptr() as usize
        }
        _ => panic!("not a CPU tensor"),
    }
}

/// A base held in bf16 (`agents.base_dtype: bf16`): shared by two agents (one bf16 copy in
/// memory), bit for bit the same after 10 AdamW steps of one agent's adapter, which trains,
/// while the other agent's outputs stay as they were.
#[test]
fn ten_adamw_steps_on_a_bf16_base_leave_it_bit_for_bit() {
    let opts = LoadOptions {
        base_dtype: Some(DType::BF16),
        ..LoadOptions::default()
    };
    let base = Policy::load(&ModelSource::Local(fixtures().join("tiny-qwen2")), &opts).unwrap();
    let init =
        |seed| Adapter::init(spec(), 0.0, &base.config, seed, DType::F32, &Device::Cpu).unwrap();
    let (a1, a2) = (init(1), init(2));
    let p1 = base.with_adapter(a1).unwrap();
    let p2 = p1.share_base(a2).unwrap();
    for (x, y) in projection_weights(&p1.model)
        .iter()
        .zip(projection_weights(&p2.model))
    {
        assert_eq!(x.dtype(), DType::BF16);
        assert_eq!(bf16_ptr(x), bf16_ptr(&y), "the bf16 base is not shared");
    }
    let bits = |p: &Policy| -> Vec<(String, Vec<u16>)> {
        p.base_vars()
            .into_iter()
            .map(|(n, v)| {
                let t = v.as_tensor().to_dtype(DType::BF16).unwrap();
                let b = t.flatten_all().unwrap().to_vec1::<half::bf16>().unwrap();
                (n, b.iter().map(|x| x.to_bits()).collect())
            })
            .collect()
    };
    let before = bits(&p1);
    let f32_before: Vec<Vec<f32>> = p1
        .base_vars()
        .iter()
        .filter(|(_, v)| v.dtype() == DType::F32)
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    let (first_before, other_before) = (logprobs(&p1), logprobs(&p2));
    let vars = p1.vars();
    let mut opt = AdamW::new(
        vars.clone(),
        AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        },
    );
    let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
    let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
    let lay = ScoreLayout::new(&p1.model, &[&ids[..2]], &[&ids[2..]], p1.pad_id).unwrap();
    for _ in 0..10 {
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        weighted_logprob_grads(&p1.model, &lay, &[-1.0], &vs, &mut acc).unwrap();
        opt.step_grads(&acc, 1e-2, None).unwrap();
        p1.weights_changed().unwrap();
    }
    assert_ne!(logprobs(&p1), first_before, "the adapter trained");
    assert!(bits(&p1) == before, "the bf16 base changed");
    let f32_after: Vec<Vec<f32>> = p1
        .base_vars()
        .iter()
        .filter(|(_, v)| v.dtype() == DType::F32)
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    assert!(f32_after == f32_before, "the base's f32 tensors changed");
    assert!(logprobs(&p2) == other_before, "agent 2 changed");
}

/// Tiny runs on a bf16 and on a Q8_0 base, in f32 products and in bf16 products with bf16
/// sampling: every step runs, and each agent's adapter trains.
#[test]
fn a_run_on_a_bf16_or_q8_0_base_trains_the_adapters() {
    let extras = [
        &[][..],
        &["trainer.compute_dtype=bf16", "agents.sampling_dtype=bf16"][..],
    ];
    for (base_dtype, extra) in ["agents.base_dtype=bf16", "agents.base_dtype=q8_0"]
        .into_iter()
        .flat_map(|b| extras.map(|e| (b, e)))
    {
        let extra: Vec<&str> = std::iter::once(base_dtype)
            .chain(extra.iter().copied())
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let mut sets = vec![
            "agents.adapter.rank=4",
            "agents.adapter.alpha=16",
            "trainer.agent_learning_rate=1e-3",
        ];
        sets.extend(&extra);
        let s = load_small(tmp.path(), &sets);
        let done = comlrl::train::Trainer::new(s)
            .unwrap()
            .run(false, &mut ())
            .unwrap();
        assert_eq!(done.steps_done, 20, "{extra:?}");
        let base = Policy::load(
            &ModelSource::Builtin("tiny".into()),
            &LoadOptions::default(),
        )
        .unwrap();
        for i in 0..2 {
            let dir = tmp.path().join(format!("models/agent_{i}"));
            let ad = Adapter::load(&dir, &base.config, DType::F32, &Device::Cpu).unwrap();
            let b_sum: f32 = ad
                .vars()
                .iter()
                .filter(|(n, _)| n.contains("lora_B"))
                .map(|(_, v)| f32s(v.as_tensor()).iter().map(|x| x.abs()).sum::<f32>())
                .sum();
            assert!(b_sum > 0.0, "{extra:?} agent {i}: B did not train");
        }
    }
}

/// Where a Q8_0 matrix's bytes start in memory.
fn u8_ptr(t: &Tensor) -> usize {
    let (st, l) = t.storage_and_layout();
    match &*st {
        Storage::Cpu(c) => c.as_slice::<u8>().unwrap()[l.start_offset()..].as_ptr() as usize,
        _ => panic!("not a CPU tensor"),
    }
}

/// A base held as Q8_0 blocks (`agents.base_dtype: q8_0`): shared by two agents (one copy of
/// the blocks in memory), byte for byte the same after 10 AdamW steps of one agent's adapter,
/// which trains, while the other agent's outputs stay as they were.
#[test]
fn ten_adamw_steps_on_a_q8_0_base_leave_it_bit_for_bit() {
    use comlrl::model::kernels::q8_weight;
    let opts = LoadOptions {
        base_dtype: Some(q8_weight::HELD),
        ..LoadOptions::default()
    };
    let base = Policy::load(&ModelSource::Local(fixtures().join("tiny-qwen2")), &opts).unwrap();
    let init =
        |seed| Adapter::init(spec(), 0.0, &base.config, seed, DType::F32, &Device::Cpu).unwrap();
    let (a1, a2) = (init(1), init(2));
    let p1 = base.with_adapter(a1).unwrap();
    let p2 = p1.share_base(a2).unwrap();
    for (x, y) in projection_weights(&p1.model)
        .iter()
        .zip(projection_weights(&p2.model))
    {
        assert!(q8_weight::is_q8_weight(x));
        assert_eq!(u8_ptr(x), u8_ptr(&y), "the Q8_0 base is not shared");
    }
    let state = |p: &Policy| -> Vec<(String, Vec<u8>)> {
        p.base_vars()
            .into_iter()
            .map(|(n, v)| {
                let t = v.as_tensor();
                let b = match t.dtype() {
                    DType::U8 => t.flatten_all().unwrap().to_vec1::<u8>().unwrap(),
                    _ => f32s(t).iter().flat_map(|x| x.to_le_bytes()).collect(),
                };
                (n, b)
            })
            .collect()
    };
    let before = state(&p1);
    let (first_before, other_before) = (logprobs(&p1), logprobs(&p2));
    let vars = p1.vars();
    let mut opt = AdamW::new(
        vars.clone(),
        AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        },
    );
    let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
    let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
    let lay = ScoreLayout::new(&p1.model, &[&ids[..2]], &[&ids[2..]], p1.pad_id).unwrap();
    for _ in 0..10 {
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        weighted_logprob_grads(&p1.model, &lay, &[-1.0], &vs, &mut acc).unwrap();
        opt.step_grads(&acc, 1e-2, None).unwrap();
        p1.weights_changed().unwrap();
    }
    assert_ne!(logprobs(&p1), first_before, "the adapter trained");
    assert!(
        state(&p1) == before,
        "the Q8_0 base or its f32 tensors changed"
    );
    assert!(logprobs(&p2) == other_before, "agent 2 changed");
}

/// LoRA dropout in a run (`agents.adapter.dropout: 0.1`): every step's rewards are finite, the
/// adapters train and differ from a run without dropout (the masks are applied), the saved
/// directories record `lora_dropout` 0.1, and an interrupted run resumed from its checkpoint
/// draws the same masks: it ends bit for bit where the uninterrupted one does. The same with
/// the autograd path (`gradient_checkpointing: false`), whose masks are the recomputed path's.
#[test]
fn a_run_with_adapter_dropout_trains_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = ["a", "b", "none", "autograd"].map(|d| tmp.path().join(d));
    let [a, b, none, autograd] = &dirs;
    let extra = [
        "checkpoint_every=4",
        "agents.adapter.rank=4",
        "agents.adapter.alpha=16",
        "agents.adapter.dropout=0.1",
        "trainer.agent_learning_rate=1e-3",
    ];
    let run = |dir: &std::path::Path, sets: &[&str]| {
        comlrl::train::Trainer::new(load_small(dir, sets))
            .unwrap()
            .run(false, &mut ())
            .unwrap()
    };
    assert_eq!(run(a, &extra).steps_done, 20);
    let mut t = comlrl::train::Trainer::new(load_small(b, &extra)).unwrap();
    let flag = t.interrupt_flag();
    assert!(t.run(false, &mut StopAt(7, flag)).unwrap().interrupted);
    let done = comlrl::train::Trainer::new(load_small(b, &extra))
        .unwrap()
        .run(true, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 20);
    assert_eq!(metrics_without_timing(a), metrics_without_timing(b));
    let rows = metrics(a);
    assert!(!rows.is_empty());
    for r in &rows {
        let reward = r["reward_mean"]
            .as_f64()
            .or_else(|| r["rewards/mean"].as_f64());
        if let Some(x) = reward {
            assert!(x.is_finite(), "reward {x}");
        }
        for (k, v) in r.as_object().unwrap() {
            if let Some(x) = v.as_f64() {
                assert!(x.is_finite(), "{k} = {x}");
            }
        }
    }
    let no_dropout: Vec<&str> = extra
        .iter()
        .copied()
        .filter(|s| !s.contains("dropout"))
        .collect();
    run(none, &no_dropout);
    let ckpt_off: Vec<&str> = extra
        .iter()
        .copied()
        .chain(["trainer.gradient_checkpointing=false"])
        .collect();
    run(autograd, &ckpt_off);
    let base = Policy::load(
        &ModelSource::Builtin("tiny".into()),
        &LoadOptions::default(),
    )
    .unwrap();
    for i in 0..2 {
        let file = format!("models/agent_{i}/adapter_model.safetensors");
        let read = |d: &std::path::Path| std::fs::read(d.join(&file)).unwrap();
        assert!(read(a) == read(b), "agent {i}: resumed adapter differs");
        assert!(read(a) != read(none), "agent {i}: dropout changed nothing");
        let dir = a.join(format!("models/agent_{i}"));
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("adapter_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(cfg["lora_dropout"], 0.1);
        let ad = Adapter::load(&dir, &base.config, DType::F32, &Device::Cpu).unwrap();
        assert_eq!(ad.dropout, 0.1);
        let b_sum: f32 = ad
            .vars()
            .iter()
            .filter(|(n, _)| n.contains("lora_B"))
            .map(|(_, v)| f32s(v.as_tensor()).iter().map(|x| x.abs()).sum::<f32>())
            .sum();
        assert!(b_sum > 0.0, "agent {i}: B did not train");
        // The autograd path drew the same masks: its adapters are the recomputed run's up to
        // float rounding (20 steps of it), far closer than to the run without dropout.
        let load = |d: &std::path::Path| {
            let ad = Adapter::load(
                &d.join(format!("models/agent_{i}")),
                &base.config,
                DType::F32,
                &Device::Cpu,
            )
            .unwrap();
            ad.vars()
                .iter()
                .flat_map(|(_, v)| f32s(v.as_tensor()))
                .collect::<Vec<f32>>()
        };
        let (x, y, z) = (load(a), load(autograd), load(none));
        let dist = |p: &[f32], q: &[f32]| {
            p.iter()
                .zip(q)
                .map(|(u, v)| (u - v).abs())
                .fold(0f32, f32::max)
        };
        assert!(
            dist(&x, &y) < 0.1 * dist(&x, &z),
            "agent {i}: autograd {} vs no dropout {}",
            dist(&x, &y),
            dist(&x, &z)
        );
    }
}

/// A fresh agent's adapter with dropout 0.1 on a shared base: 10 AdamW steps on gradients with
/// the masks of each step leave the base bit for bit and train the adapter.
#[test]
fn ten_adamw_steps_with_dropout_leave_the_base_bit_for_bit() {
    let base = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let mut ad = Adapter::init(spec(), 0.1, &base.config, 1, DType::F32, &Device::Cpu).unwrap();
    ad.dropout_key = 5;
    let p = base.with_adapter(ad).unwrap();
    let base_before: Vec<Vec<f32>> = p
        .base_vars()
        .iter()
        .map(|(_, v)| f32s(v.as_tensor()))
        .collect();
    let before = logprobs(&p);
    let vars = p.vars();
    let mut opt = AdamW::new(
        vars.clone(),
        AdamWConfig {
            lr: 1e-2,
            ..AdamWConfig::default()
        },
    );
    let vs: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
    let ids: Vec<u32> = vec![5, 17, 230, 41, 999, 3, 77];
    let mut lay = ScoreLayout::new(&p.model, &[&ids[..2]], &[&ids[2..]], p.pad_id).unwrap();
    let width = lay.ids.dim(1).unwrap();
    for step in 0..10 {
        p.set_update_step(step);
        lay.dropout = p.lora_dropout(vec![0], width);
        let mut acc: Vec<Option<Tensor>> = vec![None; vs.len()];
        weighted_logprob_grads(&p.model, &lay, &[-1.0], &vs, &mut acc).unwrap();
        opt.step_grads(&acc, 1e-2, None).unwrap();
    }
    assert_ne!(logprobs(&p), before, "the adapter trained");
    for (b, (n, v)) in base_before.iter().zip(p.base_vars()) {
        assert!(b == &f32s(v.as_tensor()), "{n} changed");
    }
}

/// An `init` adapter directory with `lora_dropout` 0.2 trains with it unless the scenario sets
/// `dropout`, which replaces it (0 included); every agent's masks have a key of their own.
#[test]
fn an_init_adapter_keeps_its_dropout_unless_the_scenario_sets_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("adapter");
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("lora/tiny-qwen2/adapter");
    std::fs::copy(
        src.join("adapter_model.safetensors"),
        dir.join("adapter_model.safetensors"),
    )
    .unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("adapter_config.json")).unwrap())
            .unwrap();
    cfg["lora_dropout"] = serde_json::json!(0.2);
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).unwrap();
    let base = Policy::load(
        &ModelSource::Local(fixtures().join("tiny-qwen2")),
        &LoadOptions::default(),
    )
    .unwrap();
    let model = format!("agents.model={}", fixtures().join("tiny-qwen2").display());
    let init = format!("agents.adapter.init={}", dir.display());
    for (set, want) in [
        (None, 0.2),
        (Some("agents.adapter.dropout=0"), 0.0),
        (Some("agents.adapter.dropout=0.05"), 0.05),
    ] {
        let mut sets = vec![model.as_str(), init.as_str()];
        sets.extend(set);
        let s = load_small(&tmp.path().join("run"), &sets);
        let keys: Vec<u64> = s
            .agents
            .iter()
            .map(|a| {
                let ad = comlrl::train::setup::models::agent_adapter(&s, a, &base)
                    .unwrap()
                    .expect("an adapter");
                assert_eq!(ad.dropout, want, "{set:?}");
                ad.dropout_key
            })
            .collect();
        assert_ne!(keys[0], keys[1], "two agents draw the same masks");
    }
}
