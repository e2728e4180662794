//! Seeded random weights for a `builtin:` preset with `agents.base_dtype` set never hold the
//! whole model in f32 (issue 43: a 7B-shaped preset is 30 GB in f32 on a 23 GB machine): each
//! tensor is drawn in f32 and converted before the next is drawn, so the generation's peak is
//! what it keeps plus one f32 tensor. Measured as the peak resident set of a child process
//! (this test binary, filtered to this test) that only draws the weights, against the bytes it
//! keeps; Linux only (`/proc/self/status`).
use candle_core::{DType, Device};
use comlrl::model::decoder::tensors::{expected_tensors, random_tensors};
use comlrl::model::kernels::q8_weight;
use comlrl::model::ModelConfig;
use std::process::Command;

/// Set in the child to the base dtype it draws (`q8_0` or `bf16`).
const CHILD: &str = "COMLRL_RANDOM_PEAK_CHILD";
const TEST: &str = "random_base_peak::random_base_peak_is_what_it_keeps_plus_one_f32_tensor";
/// Allocator and process noise allowed over the bound (heap arenas, the test harness).
const SLACK: u64 = 64 << 20;

/// A mid-size shape whose projections are almost all of it (121M projection weights, 0.5 GB in
/// f32), so that holding them all in f32 even once would show far above the bound.
fn shape() -> ModelConfig {
    ModelConfig::with_shape(1024, 1024, 4096, 8, 8, 2, true)
}

/// `VmRSS` / `VmHWM` of this process in bytes.
fn status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = s
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable {line:?}"));
    kb << 10
}

/// The child: draws the weights and prints its peak's growth over its start and what it keeps.
fn child(base: &str) {
    let held = match base {
        "q8_0" => q8_weight::HELD,
        "bf16" => DType::BF16,
        other => panic!("unknown base {other}"),
    };
    // Reset the high-water mark to the current resident set (Linux ≥ 4.0); where that is
    // refused, a fresh process's mark is its start-up, which `before` then is at most.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_kb("VmRSS:").max(status_kb("VmHWM:"));
    let tensors = random_tensors(&shape(), 7, DType::F32, Some(held), &Device::Cpu).unwrap();
    let peak = status_kb("VmHWM:");
    let kept: u64 = tensors
        .values()
        .map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64)
        .sum();
    println!("PEAK growth={} kept={kept}", peak.saturating_sub(before));
}

#[test]
fn random_base_peak_is_what_it_keeps_plus_one_f32_tensor() {
    if let Ok(base) = std::env::var(CHILD) {
        return child(&base);
    }
    if !std::path::Path::new("/proc/self/status").is_file() {
        comlrl_testutil::skip(
            "no /proc/self/status (not Linux): a peak resident set cannot be read",
        );
        return;
    }
    let specs = expected_tensors(&shape()).unwrap();
    let f32_bytes = |shape: &Vec<usize>| 4 * shape.iter().product::<usize>() as u64;
    let whole_f32: u64 = specs.iter().map(|(_, s, _)| f32_bytes(s)).sum();
    let largest_f32 = specs.iter().map(|(_, s, _)| f32_bytes(s)).max().unwrap();
    for base in ["q8_0", "bf16"] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, base)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child for {base} failed: {text}");
        let line = text
            .lines()
            .find_map(|l| l.split_once("PEAK ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("child for {base} printed no PEAK line: {text}"));
        let num = |key: &str| -> u64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        let (growth, kept) = (num("growth="), num("kept="));
        eprintln!(
            "{base}: peak growth {growth} B, kept {kept} B, one f32 tensor ≤ {largest_f32} B, \
             the whole model in f32 {whole_f32} B"
        );
        // The bound is below the whole model in f32 (else it would say nothing).
        assert!(
            kept + largest_f32 + SLACK < whole_f32,
            "{base}: kept {kept} of {whole_f32}"
        );
        assert!(
            growth <= kept + largest_f32 + SLACK,
            "{base}: drawing the weights grew the process by {growth} B, more than the {kept} B \
             it keeps plus one f32 tensor ({largest_f32} B) and {SLACK} B of slack: more than \
             one tensor was held in f32 at a time"
        );
    }
}
