//! Advantages and AdamW against the MAGRPO fixtures (`tests/fixtures/magrpo`).
use crate::common;
use candle_core::{Device, Tensor, Var};
use comlrl::train::algorithms::magrpo::advantage::{advantages, Baseline};
use comlrl::train::optim::{AdamW, AdamWConfig};
use common::*;

fn f32v(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn advantages_match_fixture_for_every_mode() {
    let a = json(&fixtures().join("magrpo/advantages.json"));
    let cases = a["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for c in cases {
        let r = f32v(&c["rewards"]);
        for (key, base) in [
            ("mean", Baseline::Mean),
            ("raw", Baseline::Raw),
            ("max", Baseline::Max),
            ("rloo", Baseline::Rloo),
        ] {
            for norm in [false, true] {
                let k = if norm {
                    format!("{key}_norm")
                } else {
                    key.to_string()
                };
                let want = f32v(&c["advantages_f32"][&k]);
                let got = advantages(&r, base, norm);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-6,
                        "{} {k}: {got:?} vs {want:?}",
                        c["name"]
                    );
                }
            }
        }
    }
}

#[test]
fn adamw_matches_torch_three_steps() {
    let a = json(&fixtures().join("magrpo/adamw_step.json"));
    let hp = &a["hyperparameters"];
    let cfg = AdamWConfig {
        lr: hp["lr"].as_f64().unwrap(),
        beta1: hp["beta1"].as_f64().unwrap(),
        beta2: hp["beta2"].as_f64().unwrap(),
        eps: hp["eps"].as_f64().unwrap(),
        weight_decay: hp["weight_decay"].as_f64().unwrap(),
    };
    for c in a["cases"].as_array().unwrap() {
        let p0 = f32v(&c["params0"]);
        let var = Var::from_tensor(&Tensor::new(p0.as_slice(), &Device::Cpu).unwrap()).unwrap();
        let mut opt = AdamW::new(vec![("p".into(), var.clone())], cfg);
        for (i, g) in c["grads"].as_array().unwrap().iter().enumerate() {
            // A loss whose gradient w.r.t. p is exactly g: sum(p * g).
            let g = Tensor::new(f32v(g).as_slice(), &Device::Cpu).unwrap();
            let grads = (var.as_tensor() * &g)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            opt.step(&grads, cfg.lr, None).unwrap();
            let want = &c["steps_f32"][i];
            let got = var.as_tensor().to_vec1::<f32>().unwrap();
            for (j, (g, w)) in got.iter().zip(f32v(&want["params"])).enumerate() {
                assert!(
                    (g - w).abs() <= 2e-6,
                    "{} step {} param {j}: {g} vs {w}",
                    c["name"],
                    i + 1
                );
            }
            let m = opt.params[0].m.lock().unwrap().to_f32();
            for (g, w) in m.iter().zip(f32v(&want["exp_avg"])) {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "exp_avg {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn clipping_scales_the_update() {
    let var = Var::from_tensor(&Tensor::new(&[1f32, 1.0], &Device::Cpu).unwrap()).unwrap();
    let mut opt = AdamW::new(
        vec![("p".into(), var.clone())],
        AdamWConfig {
            weight_decay: 0.0,
            ..Default::default()
        },
    );
    let g = Tensor::new(&[30f32, 40.0], &Device::Cpu).unwrap();
    let grads = (var.as_tensor() * &g)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let norm = opt.step(&grads, 0.1, Some(1.0)).unwrap();
    assert!((norm - 50.0).abs() < 1e-9);
    let m = opt.params[0].m.lock().unwrap().to_f32();
    // m = (1 - b1) * g * (1/50)
    assert!(
        (m[0] - 0.1 * 30.0 / 50.0).abs() < 1e-6 && (m[1] - 0.1 * 40.0 / 50.0).abs() < 1e-6,
        "{m:?}"
    );
}
