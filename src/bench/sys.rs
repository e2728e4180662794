//! Machine facts for benchmark reports (CPU model, instruction sets, the f32 matmul rate);
//! process memory readings live in `runtime`.

/// A short description of the machine: logical CPUs and whether AVX-512F is available.
pub fn machine() -> serde_json::Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    #[cfg(target_arch = "x86_64")]
    let bf16 = std::arch::is_x86_feature_detected!("avx512bf16");
    #[cfg(not(target_arch = "x86_64"))]
    let bf16 = false;
    // AMX detection is not stable in std: read the kernel's flags.
    let amx = cpu_flags().iter().any(|f| f == "amx_bf16");
    serde_json::json!({
        "cpu_model": cpu_model(),
        "logical_cpus": cpus,
        "avx512f": avx512,
        "avx512_bf16": bf16,
        "amx_bf16": amx,
        "f32_matmul_gflops_per_s": f32_rate(),
        "bf16_gemm_backend": crate::model::kernels::bf16_gemm::backend(),
        "bf16_matmul_gflops_per_s": bf16_rate(),
        "gemm_avx512_kernels": cfg!(feature = "avx512"),
        "candle_num_threads": std::env::var("CANDLE_NUM_THREADS").ok(),
        "comlrl_no_tuning": std::env::var_os("COMLRL_NO_TUNING").is_some(),
        "rayon_threads": rayon::current_num_threads(),
    })
}

/// The CPU flags /proc/cpuinfo lists (empty where there is none).
fn cpu_flags() -> Vec<String> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("flags"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.split_whitespace().map(str::to_string).collect())
        })
        .unwrap_or_default()
}

/// The CPU's model name (`model name` in /proc/cpuinfo), where the platform has one.
pub fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The machine's f32 matmul rate now (a 1024³ product, median of 5, about a second), measured
/// once per process: the yardstick printed next to every benchmark result.
pub fn f32_rate() -> Option<f64> {
    static RATE: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        super::matmul::run(1024, 5)
            .ok()
            .map(|r| (r.gflops_per_s * 10.0).round() / 10.0)
    })
}

/// The same for the bf16 GEMM (`trainer.compute_dtype: bf16`; its backend is in the machine line).
pub fn bf16_rate() -> Option<f64> {
    static RATE: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        super::matmul::run_bf16(1024, 5)
            .ok()
            .map(|r| (r.gflops_per_s * 10.0).round() / 10.0)
    })
}

/// One line for the console: CPU model, threads, bf16 support, the f32 and bf16 matmul rates.
pub fn machine_line() -> String {
    let m = machine();
    format!(
        "machine: {} ({} logical CPUs, {} rayon threads, avx512_bf16 {}, amx_bf16 {}), f32 matmul 1024³ {} GFLOP/s, bf16 ({}) {} GFLOP/s",
        m["cpu_model"].as_str().unwrap_or("unknown CPU"),
        m["logical_cpus"],
        m["rayon_threads"],
        m["avx512_bf16"],
        m["amx_bf16"],
        m["f32_matmul_gflops_per_s"],
        m["bf16_gemm_backend"].as_str().unwrap_or("?"),
        m["bf16_matmul_gflops_per_s"],
    )
}
