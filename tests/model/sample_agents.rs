//! Several adapter agents on one shared base decoding together (`generate_groups`: one forward
//! per token step for all their rows, each row group with its own adapter, KV cache, settings
//! and RNG streams) against each agent decoding alone: the same tokens and the same
//! sampling-time log-probs, bit for bit, on the tiny Qwen2, Llama and Qwen3 with nonzero-B
//! adapters, for every way the base is held and sampled (f32 with transposed copies, f32 read
//! by the decode kernel, bf16 copies, a bf16 base read in place or widened, a Q8_0 base), with
//! agents stopping at different lengths and more rows than the decode kernels take at once.
use crate::common;
use candle_core::{DType, Device, Tensor};
use comlrl::model::decoder::lora::LoraSpec;
use comlrl::model::io::peft::Adapter;
use comlrl::model::kernels::q8_weight;
use comlrl::model::{
    generate_groups, generate_streams_scored, DecodeJob, LoadOptions, ModelSource, Policy,
    RolloutCopies, SamplingParams, Scored,
};
use common::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const MODELS: [&str; 3] = ["tiny-qwen2", "tiny-llama", "tiny-qwen3"];

/// How the shared base is held and sampled.
#[derive(Debug, Clone, Copy)]
struct Held {
    base: Option<DType>,
    sampling: DType,
    copies: RolloutCopies,
}

const HELD: [Held; 6] = [
    // f32, transposed copies (gemm: each agent's rows multiplied apart).
    Held {
        base: None,
        sampling: DType::F32,
        copies: RolloutCopies::Auto,
    },
    // f32 on the checkpoint layout (`f32_decode` where the CPU has AVX-512).
    Held {
        base: None,
        sampling: DType::F32,
        copies: RolloutCopies::Never,
    },
    // f32 with bf16 sampling copies.
    Held {
        base: None,
        sampling: DType::BF16,
        copies: RolloutCopies::Auto,
    },
    // A bf16 base read in place by the bf16 kernel.
    Held {
        base: Some(DType::BF16),
        sampling: DType::BF16,
        copies: RolloutCopies::Auto,
    },
    // A bf16 base widened row by row (f32 sampling).
    Held {
        base: Some(DType::BF16),
        sampling: DType::F32,
        copies: RolloutCopies::Never,
    },
    // A Q8_0 base, its fused decode.
    Held {
        base: Some(q8_weight::HELD),
        sampling: DType::F32,
        copies: RolloutCopies::Never,
    },
];

/// Three agents on one base of `name`: PEFT's fixture adapter, and two fresh adapters (one on
/// attention's q and v only) with random nonzero B.
fn agents(name: &str, held: Held) -> Vec<Policy> {
    let opts = LoadOptions {
        base_dtype: held.base,
        sampling_dtype: held.sampling,
        rollout_copies: held.copies,
        ..LoadOptions::default()
    };
    let base = Policy::load(&ModelSource::Local(fixtures().join(name)), &opts).unwrap();
    let dir = fixtures().join("lora").join(name).join("adapter");
    let first = Adapter::load(&dir, &base.config, DType::F32, &Device::Cpu).unwrap();
    let first = base.with_adapter(first).unwrap();
    let fresh = |seed: u64, targets: &[&str]| {
        let spec = LoraSpec {
            rank: 4,
            alpha: 8.0,
            rslora: false,
            targets: targets.iter().map(|t| t.to_string()).collect(),
        };
        let ad = Adapter::init(spec, 0.0, &first.config, seed, DType::F32, &Device::Cpu).unwrap();
        for (n, v) in ad.vars() {
            if n.contains("lora_B") {
                let b = Tensor::randn(0f32, 0.05, v.as_tensor().dims(), &Device::Cpu).unwrap();
                v.set(&b).unwrap();
            }
        }
        first.share_base(ad).unwrap()
    };
    let all = comlrl::model::decoder::lora::PROJECTIONS;
    let out = vec![fresh(11, &all[..]), fresh(12, &["q_proj", "v_proj"]), first];
    for p in &out {
        p.weights_changed().unwrap();
    }
    out
}

/// Each agent's prompts, settings and seeds: 3, 2 and 1 prompts of different lengths, 6
/// completions each (36 rows: more than the 32 a decode kernel takes at once); full-distribution
/// sampling to 14 tokens without EOS, the run's settings to 20 tokens with EOS, greedy to 5.
fn plan(p: &Policy) -> Vec<(Vec<Vec<u32>>, SamplingParams, u64)> {
    let enc = |t: &str| p.tokenizer.encode(t).unwrap();
    vec![
        (
            vec![
                enc("Describe a city in the clouds:"),
                enc("Tell a joke:"),
                enc("Invent a new holiday and explain why:"),
            ],
            SamplingParams {
                max_new_tokens: 14,
                temperature: 1.0,
                top_p: 1.0,
                top_k: 0,
                ignore_eos: true,
                ..Default::default()
            },
            100,
        ),
        (
            vec![enc("Write a bedtime story:"), enc("Why?")],
            SamplingParams {
                max_new_tokens: 20,
                ..Default::default()
            },
            200,
        ),
        (
            vec![enc("Design a playground on Mars:")],
            SamplingParams {
                max_new_tokens: 5,
                greedy: true,
                ..Default::default()
            },
            300,
        ),
    ]
}

const K: usize = 6;

fn streams(seed: u64, n: usize) -> Vec<ChaCha8Rng> {
    (0..n)
        .map(|i| ChaCha8Rng::seed_from_u64(seed + i as u64))
        .collect()
}

/// Each agent alone, then all together.
fn alone_and_together(ps: &[Policy]) -> (Vec<Scored>, Vec<Scored>) {
    let plans: Vec<_> = ps.iter().map(plan).collect();
    let alone = ps
        .iter()
        .zip(&plans)
        .enumerate()
        .map(|(a, (p, pl))| {
            let (prompts, params, seed) = &pl[a];
            let refs: Vec<&[u32]> = prompts.iter().map(|v| v.as_slice()).collect();
            let mut rngs = streams(*seed, refs.len());
            generate_streams_scored(
                p.sampler(),
                &refs,
                K,
                params,
                &p.eos_ids,
                p.pad_id,
                &mut rngs,
                1.0,
            )
            .unwrap()
        })
        .collect();
    let refs: Vec<Vec<&[u32]>> = plans
        .iter()
        .enumerate()
        .map(|(a, pl)| pl[a].0.iter().map(|v| v.as_slice()).collect())
        .collect();
    let jobs: Vec<DecodeJob> = ps
        .iter()
        .zip(&plans)
        .zip(&refs)
        .enumerate()
        .map(|(a, ((p, pl), prompts))| DecodeJob {
            sampler: p.sampler(),
            prompts,
            k: K,
            params: &pl[a].1,
            eos_ids: &p.eos_ids,
            pad_id: p.pad_id,
            logprob_scale: Some(1.0),
        })
        .collect();
    let mut rngs: Vec<Vec<ChaCha8Rng>> = plans
        .iter()
        .enumerate()
        .map(|(a, pl)| streams(pl[a].2, pl[a].0.len()))
        .collect();
    let mut sets: Vec<&mut [ChaCha8Rng]> = rngs.iter_mut().map(Vec::as_mut_slice).collect();
    let together = generate_groups(&jobs, &mut sets).unwrap();
    (alone, together)
}

fn bits(s: &Scored) -> Vec<Vec<Vec<u32>>> {
    s.1.iter()
        .map(|p| {
            p.iter()
                .map(|c| c.iter().map(|v| v.to_bits()).collect())
                .collect()
        })
        .collect()
}

#[test]
fn agents_on_one_base_sample_together_what_they_sample_alone() {
    for name in MODELS {
        for held in HELD {
            let ps = agents(name, held);
            assert!(ps[0].sampler().shares_base(&ps[1].sampler()));
            assert!(ps[2].sampler().shares_base(&ps[0].sampler()));
            let (alone, together) = alone_and_together(&ps);
            let what = format!("{name} {held:?}");
            for (a, (x, y)) in alone.iter().zip(&together).enumerate() {
                assert_eq!(x.0, y.0, "{what}: agent {a}'s tokens");
                assert_eq!(bits(x), bits(y), "{what}: agent {a}'s log-probs");
            }
            // Each agent stopped at its own length: 14 tokens each (no EOS), at most 20, 5.
            let lens = |s: &Scored| -> Vec<usize> { s.0.iter().flatten().map(Vec::len).collect() };
            assert!(lens(&alone[0]).iter().all(|&n| n == 14), "{what}");
            assert!(
                lens(&alone[1]).iter().all(|&n| (1..=20).contains(&n)),
                "{what}"
            );
            assert!(
                lens(&alone[2]).iter().all(|&n| (1..=5).contains(&n)),
                "{what}"
            );
            // The adapters matter: the same prompt and stream under another agent's adapter
            // draws other log-probs (so a decode that used one adapter for all would fail above).
            assert_ne!(bits(&alone[0]), bits(&alone[1]), "{what}");
        }
    }
}

/// Models that are not one base (two loads of the same files) are refused, naming the job.
#[test]
fn a_decode_on_another_base_is_refused() {
    let held = HELD[0];
    let a = agents("tiny-qwen2", held);
    let b = agents("tiny-qwen2", held);
    assert!(!a[0].sampler().shares_base(&b[0].sampler()));
    let prompt = a[0].tokenizer.encode("Tell a joke:").unwrap();
    let prompts = [prompt.as_slice()];
    let params = SamplingParams::default();
    fn job<'a>(
        p: &'a Policy,
        prompts: &'a [&'a [u32]],
        params: &'a SamplingParams,
    ) -> DecodeJob<'a> {
        DecodeJob {
            sampler: p.sampler(),
            prompts,
            k: 2,
            params,
            eos_ids: &p.eos_ids,
            pad_id: p.pad_id,
            logprob_scale: None,
        }
    }
    let jobs = [
        job(&a[0], &prompts, &params),
        job(&a[1], &prompts, &params),
        job(&b[0], &prompts, &params),
    ];
    let mut rngs: Vec<Vec<ChaCha8Rng>> = (0..3).map(|i| streams(i, 1)).collect();
    let mut sets: Vec<&mut [ChaCha8Rng]> = rngs.iter_mut().map(Vec::as_mut_slice).collect();
    let err = generate_groups(&jobs, &mut sets).unwrap_err();
    assert_eq!(err.group, Some(2), "{err}");
    assert!(err.to_string().contains("base"), "{err}");
}

/// A run of three adapter agents on one bf16 base (bf16 sampling: the in-place kernel), each
/// with its own temperature, top-p and length, is the same run with the agents decoding
/// together and each alone: the same metrics (timing aside) and the same trained adapters;
/// single-turn and with a second turn from a transition.
#[test]
fn training_run_is_the_same_with_and_without_batched_agent_sampling() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let agent = |max_new: usize, temperature: f64, top_p: f64| {
        format!(
            "  - model: {}\n    adapter: {{rank: 4, alpha: 16}}\n    base_dtype: bf16\n    \
             sampling_dtype: bf16\n    max_new_tokens: {max_new}\n    temperature: {temperature}\n    \
             top_p: {top_p}\n",
            root.join("models/tiny-story").display()
        )
    };
    let yaml = format!(
        "dataset:\n  prompts:\n    - \"Describe a city in the clouds:\"\n    - \"Tell a joke:\"\n    \
         - \"Invent a new type of fruit:\"\n    - \"Design a playground on Mars:\"\n\
         agents:\n{}{}{}\
         reward:\n  rhai: {}\n  params: {{target_min: 2, target_max: 3}}\n\
         trainer:\n  num_train_epochs: 2\n  agent_learning_rate: 1.0e-3\n  num_generations: 4\n  \
         num_turns: 1\n\
         logging:\n  steps: 1\n",
        agent(12, 0.6, 0.6),
        agent(20, 1.0, 1.0),
        agent(7, 0.8, 0.9),
        root.join("rewards/len_ratio.rhai").display()
    );
    let scenario = tmp.path().join("three.yaml");
    std::fs::write(&scenario, yaml).unwrap();
    let run = |out: &std::path::Path, on: bool, extra: &[String]| {
        let (code, err) = comlrl(&["run", &scenario.display().to_string(), "--quiet"])
            .set(format!("output_dir={}", out.display()))
            .set(format!("trainer.batch_agent_sampling={on}"))
            .sets(extra)
            .output()
            .code_and_stderr();
        assert_eq!(code, Some(0), "{err}");
    };
    // Single-turn (the buffer's prompts sampled together), then two turns, the second turn's
    // prompts from a transition (each agent its own prompt per node).
    let script = tmp.path().join("revise.rhai");
    std::fs::write(
        &script,
        "fn transition(ctx) {\n    let out = [];\n    for i in 0..ctx.agent_count {\n        \
         out.push(`Turn ${ctx.turn}: improve \"${ctx.response_history[i][-1]}\"`);\n    }\n    \
         out\n}\n",
    )
    .unwrap();
    let two_turns = [
        "trainer.num_turns=2".to_string(),
        format!("trainer.external_transition={{rhai: {}}}", script.display()),
        "trainer.num_train_epochs=1".to_string(),
        "trainer.early_termination_threshold=null".to_string(),
    ];
    for (what, extra, rows) in [("one turn", &[][..], 8), ("two turns", &two_turns[..], 4)] {
        let (a, b) = (
            tmp.path().join(format!("{what} a")),
            tmp.path().join(format!("{what} b")),
        );
        run(&a, true, extra);
        run(&b, false, extra);
        let (ma, mb) = (metrics_without_timing(&a), metrics_without_timing(&b));
        assert_eq!(ma.len(), rows, "{what}");
        assert_eq!(ma, mb, "{what}");
        for i in 0..3 {
            let file = format!("models/agent_{i}/adapter_model.safetensors");
            let (wa, wb) = (std::fs::read(a.join(&file)), std::fs::read(b.join(&file)));
            assert!(
                wa.unwrap() == wb.unwrap(),
                "{what}: agent {i}: adapters differ"
            );
        }
    }
}
