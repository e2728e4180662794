//! Throughput of the length-ratio reward, Rhai script vs native plugin, printed as JSON.
//!
//! ```text
//! cargo build --release -p comlrl-len-ratio
//! cargo run --release -p comlrl-reward --example bench_rewards -- [N_SAMPLES] [PLUGIN_PATH]
//! ```
//! The plugin defaults to `comlrl_len_ratio` in `$CARGO_TARGET_DIR/release` or
//! `<workspace>/target/release` (platform file names are resolved).
use comlrl_reward::bench::{synthetic_batch, throughput_on};
use comlrl_reward::{NativeReward, RhaiReward};
use std::path::{Path, PathBuf};

fn default_plugin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("release/comlrl_len_ratio")
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
    let results = serde_json::json!({
        "threads": rayon::current_num_threads(),
        "rhai": throughput_on(&rhai, &batch)?,
        "native": throughput_on(&native, &batch)?,
    });
    println!("{}", serde_json::to_string_pretty(&results)?);
    Ok(())
}
