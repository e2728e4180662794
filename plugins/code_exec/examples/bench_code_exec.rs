//! Throughput of the code_exec reward and the cost of its sandbox: scores HumanEval's 164
//! canonical solutions (each with a helper `aux` that the main calls) with every sandbox layer
//! the machine offers and with none (only the rlimits, the empty environment and the fresh
//! directory), one sample at a time and on every core.
//!
//!     cargo run --release -p comlrl-code-exec --example bench_code_exec [-- ROUNDS]
use comlrl_code_exec::{sandbox::Layers, CodeExec, Config, Item};
use std::io::Read;
use std::time::Instant;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(1, |a| a.parse().expect("ROUNDS"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(root.join("data/humaneval/HumanEval.jsonl.gz")).expect("data"),
    )
    .read_to_string(&mut text)
    .expect("gzip");
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect();
    let mains: Vec<String> = rows
        .iter()
        .map(|r| {
            let prompt = r["prompt"].as_str().unwrap_or("");
            let body = r["canonical_solution"].as_str().unwrap_or("");
            format!("{prompt}    helper_value = aux(0)\n{body}")
        })
        .collect();
    let items: Vec<Item<'_>> = rows
        .iter()
        .zip(&mains)
        .map(|(r, m)| Item {
            prompt: r["prompt"].as_str().unwrap_or(""),
            aux: "def aux(x):\n    return x",
            main: m,
            test: r["test"].as_str().unwrap_or(""),
            entry_point: r["entry_point"].as_str().unwrap_or(""),
        })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (label, bare) in [("all layers", false), ("no layers", true)] {
        for parallelism in [1, cores] {
            let params = serde_json::json!({"parallelism": parallelism});
            let config = Config::parse(&params.to_string()).expect("params");
            let reward = if bare {
                CodeExec::with_layers(config, Layers::default())
            } else {
                CodeExec::new(config)
            }
            .expect("reward");
            let start = Instant::now();
            let mut passed = 0;
            let mut total = 0.0;
            for _ in 0..rounds {
                for o in reward.evaluate_batch(&items) {
                    let o = o.expect("scored");
                    passed += usize::from(o.all_passed());
                    total += o.reward;
                }
            }
            let s = start.elapsed().as_secs_f64();
            let n = (rounds * items.len()) as f64;
            println!(
                "{label:>10}, {parallelism} at once: {:.1} samples/s ({:.1} per core), {:.1} ms per sample; {passed} of {} pass all tests, mean reward {:.3}",
                n / s,
                n / s / parallelism as f64,
                1000.0 * s / n * parallelism as f64,
                rounds * items.len(),
                total / n
            );
        }
    }
}
