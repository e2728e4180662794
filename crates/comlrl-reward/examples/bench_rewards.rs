//! Throughput of the length-ratio reward, Rhai script vs native plugin (in-process and
//! isolated in a child process), and the cost of isolation per 1k joint samples at several
//! batch sizes, printed as JSON.
//!
//! ```text
//! cargo build --release -p comlrl-len-ratio -p comlrl-reward
//! cargo run --release -p comlrl-reward --example bench_rewards -- [N_SAMPLES] [PLUGIN_PATH]
//! ```
//! The plugin defaults to `comlrl_len_ratio` in `$CARGO_TARGET_DIR/release` or
//! `<workspace>/target/release` (platform file names are resolved); the plugin host to
//! `comlrl-plugin-host` next to it (or `$COMLRL_PLUGIN_HOST`).
use comlrl_reward::bench::{synthetic_batch, throughput_on};
use comlrl_reward::{HostCommand, IsolatedReward, JointSample, NativeReward, RewardFn, RhaiReward};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn release_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("release")
}

fn default_plugin() -> PathBuf {
    release_dir().join("comlrl_len_ratio")
}

fn host() -> HostCommand {
    match std::env::var_os(comlrl_reward::isolate::HOST_ENV) {
        Some(p) => HostCommand::comlrl(p),
        None => HostCommand::comlrl(release_dir().join("comlrl-plugin-host")),
    }
}

/// Median over `reps` runs of the milliseconds to score `batch` in chunks of `chunk`,
/// scaled to 1,000 joint samples.
fn ms_per_1k(reward: &dyn RewardFn, batch: &[JointSample], chunk: usize, reps: usize) -> f64 {
    let mut runs: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            for c in batch.chunks(chunk) {
                reward.score(c).expect("scores");
            }
            t.elapsed().as_secs_f64() * 1e3 * 1000.0 / batch.len() as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next() {
        Some(a) => a.parse()?,
        None => 10_000,
    };
    let plugin = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(default_plugin);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rewards/len_ratio.rhai");
    let params = serde_json::json!({});

    let batch = synthetic_batch(n, 2);
    let rhai = RhaiReward::load(&script, &params)?;
    let native = NativeReward::load(&plugin, &params)?;
    let isolated = IsolatedReward::load(&plugin, &params, host(), Duration::from_secs(60))?;
    let overhead: Vec<serde_json::Value> = [8, 64, 512, n]
        .into_iter()
        .map(|chunk| {
            let chunk = chunk.min(n).max(1);
            let in_process = ms_per_1k(&native, &batch, chunk, 7);
            let child = ms_per_1k(&isolated, &batch, chunk, 7);
            serde_json::json!({
                "batch_size": chunk,
                "in_process_ms_per_1k": in_process,
                "isolated_ms_per_1k": child,
                "overhead_ms_per_1k": child - in_process,
            })
        })
        .collect();
    let results = serde_json::json!({
        "threads": rayon::current_num_threads(),
        "rhai": throughput_on(&rhai, &batch)?,
        "native": throughput_on(&native, &batch)?,
        "native_isolated": throughput_on(&isolated, &batch)?,
        "isolation_overhead": overhead,
    });
    println!("{}", serde_json::to_string_pretty(&results)?);
    Ok(())
}
