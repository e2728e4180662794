//! `trainer.algorithm`: CoMLRL's MAREINFORCE, MARLOO and MAReMax as MAGRPO with their
//! `advantage_mode`, resolved into the plan and its YAML; a contradicting `advantage_mode` is
//! an error naming both keys; under normalization the alias warns that it trains as MAGRPO.
use crate::common;

use comlrl_scenario::ErrorKind::*;
use comlrl_scenario::{load_str, AdvantageMode, Algorithm};
use common::{check, Fixture, BASE};

const ALIASES: [(&str, Algorithm, AdvantageMode, &str); 3] = [
    (
        "mareinforce",
        Algorithm::Mareinforce,
        AdvantageMode::Raw,
        "raw",
    ),
    ("marloo", Algorithm::Marloo, AdvantageMode::Rloo, "rloo"),
    ("maremax", Algorithm::Maremax, AdvantageMode::Max, "max"),
];

#[test]
fn each_alias_resolves_to_its_advantage_mode() {
    let f = Fixture::new();
    let s = f.ok(BASE, &[]);
    assert_eq!(s.trainer.algorithm, Algorithm::Magrpo);
    assert_eq!(s.trainer.advantage_mode, AdvantageMode::Mean);
    for (name, alg, mode, mode_name) in ALIASES {
        assert_eq!(alg.name(), name);
        assert_eq!(alg.fixed_advantage_mode(), Some(mode));
        let text = format!("{BASE}  algorithm: {name}\n  advantage_normalization: false\n");
        let s = f.ok(&text, &[]);
        assert_eq!(s.trainer.algorithm, alg, "{name}");
        assert_eq!(s.trainer.advantage_mode, mode, "{name}");
        assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
        // The resolved YAML names both, and reads back to the same plan without a word.
        let yaml = s.to_yaml();
        assert!(yaml.contains(&format!("  algorithm: {name}\n")), "{yaml}");
        assert!(
            yaml.contains(&format!("  advantage_mode: {mode_name}\n")),
            "{yaml}"
        );
        let again = load_str(&yaml, &f.origin(), &[]).expect("reload the resolved scenario");
        assert_eq!(again.trainer, s.trainer, "{name}");
        assert!(again.warnings.is_empty(), "{name}: {:?}", again.warnings);
        // Writing the alias's own mode beside it is allowed, and the same plan.
        let same = f.ok(&format!("{text}  advantage_mode: {mode_name}\n"), &[]);
        assert_eq!(same.trainer, s.trainer, "{name}");
        // So is the override form.
        let set_alg = format!("trainer.algorithm={name}");
        let set = f.ok(
            BASE,
            &[set_alg.as_str(), "trainer.advantage_normalization=false"],
        );
        assert_eq!(set.trainer, s.trainer, "{name}");
    }
}

#[test]
fn a_contradicting_advantage_mode_is_an_error_naming_both_keys() {
    let f = Fixture::new();
    for (name, _, _, mode_name) in ALIASES {
        let other = if mode_name == "raw" { "max" } else { "raw" };
        for written in ["mean", other] {
            let (msg, d) = f.one(
                &format!("{BASE}  algorithm: {name}\n  advantage_mode: {written}\n"),
                &[],
            );
            let parts = [
                format!("`{written}` contradicts `trainer.algorithm: {name}`"),
                format!("MAGRPO with `advantage_mode: {mode_name}`"),
                format!("remove `advantage_mode` ({name} sets `{mode_name}`)"),
                format!("`algorithm: magrpo` with `advantage_mode: {written}`"),
            ];
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            check(&d, InvalidValue, "trainer.advantage_mode", 11, 3, &parts);
            assert!(msg.contains("trainer.advantage_mode"), "{msg}");
        }
    }
    // An override contradicting the file's algorithm is the same error.
    let (_, ds) = f.errs(
        &format!("{BASE}  algorithm: marloo\n"),
        &["trainer.advantage_mode=max"],
    );
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].key, "trainer.advantage_mode");
    assert_eq!(ds[0].kind, InvalidValue);
}

#[test]
fn under_normalization_an_alias_warns_once_that_it_trains_as_magrpo() {
    let f = Fixture::new();
    for (name, _, _, mode_name) in ALIASES {
        for extra in [String::new(), format!("  advantage_mode: {mode_name}\n")] {
            let s = f.ok(&format!("{BASE}  algorithm: {name}\n{extra}"), &[]);
            assert_eq!(s.warnings.len(), 1, "{name}: {:?}", s.warnings);
            let w = &s.warnings[0];
            assert!(
                w.starts_with(&format!(
                    "`trainer.algorithm`: `{name}` trains exactly as `magrpo` while advantage_normalization is true"
                )),
                "{w}"
            );
            assert!(w.contains(&format!("the `{mode_name}` baseline")), "{w}");
        }
    }
}

#[test]
fn unknown_algorithm_lists_the_values() {
    let f = Fixture::new();
    let (_, d) = f.one(&format!("{BASE}  algorithm: marlo\n"), &[]);
    check(
        &d,
        InvalidValue,
        "trainer.algorithm",
        10,
        3,
        &["did you mean `marloo`?", "`mareinforce`", "`maremax`"],
    );
}
