//! Shared helpers of the integration tests: locating built plugins and writing scripts.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The built library of the plugin whose lib name is `lib` (e.g. `comlrl_len_ratio`), built
/// first when missing (see `comlrl_testutil`).
pub fn plugin(lib: &str) -> PathBuf {
    comlrl_testutil::plugin(lib)
}

/// Write `source` to a fresh script file named `<name>.rhai` and return its path.
pub fn script(name: &str, source: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reward-tests");
    std::fs::create_dir_all(&dir).expect("create test dir");
    let path = dir.join(format!("{name}.rhai"));
    std::fs::write(&path, source).expect("write test script");
    path
}

/// The shipped `rewards/len_ratio.rhai`.
pub fn len_ratio_script() -> PathBuf {
    workspace_root().join("rewards/len_ratio.rhai")
}

/// A string of exactly `n` characters mixing 1-, 2-, 3- and 4-byte UTF-8.
pub fn text(n: usize, salt: usize) -> String {
    const CHARS: [char; 6] = ['a', 'é', '日', '本', '🙂', ' '];
    (0..n).map(|i| CHARS[(i + salt) % CHARS.len()]).collect()
}

/// Three joint samples of two agents (`ab` and `日本語`), for the plugin tests.
pub fn batch() -> Vec<comlrl_reward::JointSample> {
    vec![comlrl_reward::JointSample::new("p", vec!["ab".into(), "日本語".into()]); 3]
}

/// A plugin error's kind and text, after checking that it names the plugin at `path` and says
/// what to do.
pub fn plugin_error(
    err: &comlrl_reward::RewardError,
    path: &Path,
) -> (comlrl_reward::PluginFailure, String) {
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "names the plugin: {text}"
    );
    assert!(text.contains("hint:"), "says what to do: {text}");
    match err {
        comlrl_reward::RewardError::Plugin { kind, .. } => (*kind, text),
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

/// [`plugin_error`], expecting `kind` and every one of `needles` in the text.
pub fn assert_plugin_error(
    err: &comlrl_reward::RewardError,
    path: &Path,
    kind: comlrl_reward::PluginFailure,
    needles: &[&str],
) {
    let (k, text) = plugin_error(err, path);
    assert_eq!(k, kind, "{text}");
    for n in needles {
        assert!(text.contains(n), "mentions {n:?}: {text}");
    }
}

/// A two-agent branch after turn 1 (prompt `p`, completions `a` and `b`), for transitions.
pub struct Branch {
    fields: serde_json::Map<String, serde_json::Value>,
    completions: Vec<String>,
    history: Vec<Vec<String>>,
}

impl Branch {
    pub fn after_turn_one() -> Self {
        Branch {
            fields: serde_json::Map::new(),
            completions: vec!["a".to_string(), "b".to_string()],
            history: vec![vec!["p".to_string()], vec!["p".to_string()]],
        }
    }

    /// What the transition sees: the branch's prompt and response histories are both `[p]`.
    pub fn input(&self) -> comlrl_reward::TransitionInput<'_> {
        comlrl_reward::TransitionInput {
            prompt: "p",
            fields: &self.fields,
            turn: 1,
            completions: &self.completions,
            prompt_history: &self.history,
            response_history: &self.history,
        }
    }
}

/// The live (not zombie) processes of the process group `pgid`, read from `/proc`; `None`
/// where there is no `/proc` to read (not Linux).
pub fn live_group_members(pgid: i32) -> Option<Vec<i32>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    let mut out = vec![];
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // Gone meanwhile: not a member any more.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let in_group = fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid);
        let dead = matches!(fields.first(), Some(&"Z") | Some(&"X"));
        if in_group && !dead {
            out.push(pid);
        }
    }
    Some(out)
}

/// Waits up to `limit` for the process group `pgid` to have no live process and returns the
/// ones still alive then (empty: the group is gone); `None` without `/proc`.
pub fn live_group_members_after(pgid: i32, limit: std::time::Duration) -> Option<Vec<i32>> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let live = live_group_members(pgid)?;
        if live.is_empty() || std::time::Instant::now() >= deadline {
            return Some(live);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
