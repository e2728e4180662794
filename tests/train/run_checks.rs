//! Checks before and at resume, on the real binary: damaged or edited checkpoints are errors
//! naming file and field (never a panic), `check` rejects what `run` would, checkpoints that do
//! not match their config, and the cross joint-action limit.
use crate::common;
use common::tiny_run::*;
use common::*;
use std::path::{Path, PathBuf};

#[test]
fn cross_joint_actions_beyond_the_limit_are_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let cases = [
        ("22", "4", "17592186044416"),
        ("21", "4", "4398046511104"),
        ("13", "4", "67108864"),
        ("22", "8", "more than"),
    ];
    for (count, g, shown) in cases {
        let c = format!("agents.count={count}");
        let g = format!("trainer.num_generations={g}");
        let (code, err) = run(&out, &[&c, &g, "trainer.joint_mode=cross"], &[]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("max_joint_actions") && err.contains(shown),
            "{count}: {err}"
        );
    }
    assert!(!out.join("metrics.jsonl").exists(), "nothing trained");
    let (code, err) = run(
        &out,
        &[
            "trainer.joint_mode=cross",
            "trainer.max_joint_actions=8",
            "trainer.num_train_epochs=1",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "4^2 = 16 > 8: {err}");
    assert!(err.contains("16"), "{err}");
}

struct StopAt(usize, std::sync::Arc<std::sync::atomic::AtomicBool>);

impl comlrl::train::Observer for StopAt {
    fn step(&mut self, step: usize, _: f64, _: f64) {
        if step == self.0 {
            self.1.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Resumes with the binary; it must fail (exit 1, no panic) with every piece of `want` in the
/// message.
fn resume_fails(out: &Path, extra: &[&str], want: &[&str]) {
    let (code, err) = run(out, extra, &["--resume"]);
    assert_eq!(code, Some(1), "{want:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "`{w}` missing: {err}");
    }
}

/// Edits `state.json` with `f` and re-seals the manifest (as a careful hand edit would).
fn edit_state(ck: &Path, f: impl Fn(&mut serde_json::Value)) {
    let p = ck.join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("manifest.json")).unwrap()).unwrap();
    comlrl::train::run::manifest::write(
        ck,
        m["run_id"].as_str().unwrap(),
        v["step"].as_u64().unwrap() as usize,
    )
    .unwrap();
}

#[test]
fn damaged_or_edited_checkpoints_are_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let sets = tiny(&out, &[], &[]).overrides();
    let sc = comlrl_scenario::load(&scenario(), &sets).unwrap();
    let mut t = comlrl::train::Trainer::new(sc).unwrap();
    let flag = t.interrupt_flag();
    let s = t.run(false, &mut StopAt(7, flag)).unwrap();
    assert!(s.interrupted && s.steps_done == 7);
    drop(t);
    let ck = out.join("checkpoints/step-00000007");
    let backup = tmp.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    let save = |restore: bool| {
        for f in std::fs::read_dir(if restore { &backup } else { &ck }).unwrap() {
            let f = f.unwrap();
            let dst = if restore { &ck } else { &backup };
            std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
        }
    };
    save(false);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("state.json")).unwrap()).unwrap();
    assert!(
        !state["buffer"].as_array().unwrap().is_empty(),
        "step 7 is mid-buffer"
    );

    edit_state(&ck, |v| v["opt_steps"] = serde_json::json!([7]));
    resume_fails(
        &out,
        &[],
        &["state.json", "`opt_steps`", "1 entries for 2 agents"],
    );
    save(true);
    edit_state(&ck, |v| {
        v["buffer"][0]["agents"].as_array_mut().unwrap().pop();
    });
    resume_fails(&out, &[], &["`buffer[0].agents`"]);
    save(true);
    edit_state(&ck, |v| {
        v["window"]["agents"].as_array_mut().unwrap().pop();
    });
    resume_fails(&out, &[], &["`window.agents`"]);
    save(true);
    edit_state(&ck, |v| {
        v["buffer"][0]["agents"][1]["completions"][0][0] = 999_999.into()
    });
    resume_fails(&out, &[], &["`buffer[0].agents[1]`", "token id 999999"]);
    save(true);
    edit_state(&ck, |v| v["step"] = 0.into());
    resume_fails(&out, &[], &["metrics.jsonl", "`step` is 7", "step 0"]);
    save(true);
    // An unsealed edit and flipped bytes: the manifest catches them.
    let p = ck.join("state.json");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replacen("\"step\":7", "\"step\":0", 1);
    std::fs::write(&p, text).unwrap();
    resume_fails(&out, &[], &["state.json", "SHA-256"]);
    save(true);
    for f in ["agent_1.safetensors", "optimizer_0.safetensors"] {
        let p = ck.join(f);
        let mut bytes = std::fs::read(&p).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x10;
        std::fs::write(&p, bytes).unwrap();
        resume_fails(&out, &[], &[f, "SHA-256"]);
        save(true);
    }
    std::fs::remove_file(ck.join("manifest.json")).unwrap();
    resume_fails(&out, &[], &["manifest.json"]);
    save(true);
    let ptr = out.join("checkpoints/latest");
    for bad in ["../../backup", "/tmp", "step-7/../../x"] {
        std::fs::write(&ptr, bad).unwrap();
        resume_fails(&out, &[], &["latest", "refusing"]);
    }
    std::fs::write(&ptr, "step-00000007").unwrap();
    let run_json = out.join("run.json");
    let original = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(&run_json, "{\"run_id\": \"someone-else\"}").unwrap();
    resume_fails(&out, &[], &["another run", "someone-else"]);
    std::fs::write(&run_json, original).unwrap();
    resume_fails(&out, &["agents.count=3"], &["agent_2.safetensors"]);
    resume_fails(&out, &["trainer.num_generations=2"], &["`buffer[0]"]);
    // Intact again: the resume finishes the run.
    let (code, err) = run(&out, &[], &["--resume"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(steps(&out), (1..=20).collect::<Vec<_>>());
}

/// `comlrl check <scenario>` with `--set` overrides: exit code and stderr.
fn check(scen: &Path, sets: &[String]) -> (Option<i32>, String) {
    on_scenario("check", scen)
        .sets(sets)
        .output()
        .code_and_stderr()
}

#[test]
fn check_rejects_what_run_would_reject() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, err) = check(&scenario(), &["agents.max_new_tokens=100000000".into()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("max_new_tokens (100000000)"), "{err}");
    // A 1 MB prompt.
    let yaml = std::fs::read_to_string(scenario())
        .unwrap()
        .replace("Describe a city in the clouds:", &"cloud ".repeat(170_000))
        .replace(
            "../rewards/",
            &format!("{}/rewards/", env!("CARGO_MANIFEST_DIR")),
        )
        .replace(
            "../models/",
            &format!("{}/models/", env!("CARGO_MANIFEST_DIR")),
        );
    let big = tmp.path().join("big.yaml");
    std::fs::write(&big, &yaml).unwrap();
    let (code, err) = check(&big, &[]);
    assert_eq!(code, Some(1), "{err}");
    // Refused by its length in bytes, before it is encoded.
    assert!(
        err.contains("training prompt 1 is 1020000 bytes") && err.contains("at most"),
        "{err}"
    );
    // Short enough in bytes to be encoded, too long in tokens.
    let long = yaml.replace(&"cloud ".repeat(170_000), &"cloud ".repeat(2500));
    std::fs::write(&big, long).unwrap();
    let (code, err) = check(&big, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("training prompt 1 encodes to"), "{err}");
    // The prompt as the model sees it: the chat template and the system prompt count.
    let jinja = tmp.path().join("chat.jinja");
    std::fs::write(
        &jinja,
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
    )
    .unwrap();
    let chat = [
        format!("agents.chat_template={}", jinja.display()),
        format!("agents.system_prompt={}", "Answer kindly. ".repeat(700)),
    ];
    let (code, err) = check(&scenario(), &chat[..1]);
    assert_eq!(code, Some(0), "the chat template alone fits: {err}");
    let (code, err) = check(&scenario(), &chat);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("training prompt 1 encodes to"), "{err}");
    let (code, err) = run(&tmp.path().join("run"), &[], &[]);
    assert_eq!(code, Some(0), "the tiny scenario itself passes: {err}");
    let (code, err) = check(&scenario(), &[]);
    assert_eq!(code, Some(0), "{err}");
}

/// A copy of the tiny-qwen2 fixture with `edit` applied to its config.json.
fn model_copy(tmp: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let src = fixtures().join("tiny-qwen2");
    let dst = tmp.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dst.join(f.file_name())).unwrap();
    }
    let p = dst.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
    dst
}

#[test]
fn checkpoints_that_do_not_match_their_config_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let ok = model_copy(tmp.path(), "ok", |_| {});
    let (code, err) = check(&scenario(), &[format!("agents.model={}", ok.display())]);
    assert_eq!(code, Some(0), "the fixture itself loads: {err}");
    let one = model_copy(tmp.path(), "one-layer", |v| {
        v["num_hidden_layers"] = 1.into()
    });
    let (code, err) = check(&scenario(), &[format!("agents.model={}", one.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("does not use")
            && err.contains("model.layers.1.")
            && err.contains("num_hidden_layers 1"),
        "{err}"
    );
    let eos = model_copy(tmp.path(), "eos", |v| v["eos_token_id"] = 5000.into());
    std::fs::remove_file(eos.join("generation_config.json")).unwrap();
    let (code, err) = check(&scenario(), &[format!("agents.model={}", eos.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("eos_token_id 5000 is outside the vocabulary"),
        "{err}"
    );
}
