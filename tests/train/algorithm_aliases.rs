//! `trainer.algorithm: mareinforce | marloo | maremax` train exactly as `magrpo` with their
//! `advantage_mode` (CoMLRL's trainers of those names are its MAGRPO with another default):
//! the same metrics and final weights, and not those of the `mean` baseline.
use crate::common;
use comlrl::train::Trainer;
use common::metrics_without_timing;
use common::tiny_run::load_small;
use std::path::Path;

/// A 10-step run of the small tiny-model scenario with normalization off (under it every
/// baseline gives the same advantages), plus `sets`.
fn train(out: &Path, sets: &[&str]) {
    let mut all = vec![
        "trainer.num_train_epochs=1",
        "trainer.advantage_normalization=false",
        "trainer.agent_learning_rate=1e-3",
    ];
    all.extend_from_slice(sets);
    let done = Trainer::new(load_small(out, &all))
        .unwrap()
        .run(false, &mut ())
        .unwrap();
    assert_eq!(done.steps_done, 10);
}

fn weights(out: &Path) -> Vec<Vec<u8>> {
    (0..2)
        .map(|i| std::fs::read(out.join(format!("models/agent_{i}/model.safetensors"))).unwrap())
        .collect()
}

#[test]
fn each_alias_trains_as_magrpo_with_its_advantage_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let mean = tmp.path().join("mean");
    train(&mean, &[]);
    for (alg, mode) in [
        ("mareinforce", "raw"),
        ("marloo", "rloo"),
        ("maremax", "max"),
    ] {
        let (a, m) = (tmp.path().join(alg), tmp.path().join(mode));
        let set_alg = format!("trainer.algorithm={alg}");
        let set_mode = format!("trainer.advantage_mode={mode}");
        train(&a, &[set_alg.as_str()]);
        train(&m, &[set_mode.as_str()]);
        let (ra, rm) = (metrics_without_timing(&a), metrics_without_timing(&m));
        assert!(!ra.is_empty());
        assert_eq!(ra, rm, "{alg} vs magrpo with advantage_mode {mode}");
        assert!(
            weights(&a) == weights(&m),
            "{alg}: final weights differ from magrpo's with advantage_mode {mode}"
        );
        // The baseline matters here (normalization is off): the alias is not plain MAGRPO.
        assert!(
            weights(&a) != weights(&mean),
            "{alg} trained the same weights as the mean baseline"
        );
    }
}
