//! Machine facts for benchmark reports (CPUs, instruction sets); process memory readings live
//! in `runtime`.

/// A short description of the machine: logical CPUs and whether AVX-512F is available.
pub fn machine() -> serde_json::Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    serde_json::json!({
        "logical_cpus": cpus,
        "avx512f": avx512,
        "gemm_avx512_kernels": cfg!(feature = "avx512"),
        "candle_num_threads": std::env::var("CANDLE_NUM_THREADS").ok(),
        "comlrl_no_tuning": std::env::var_os("COMLRL_NO_TUNING").is_some(),
        "rayon_threads": rayon::current_num_threads(),
    })
}
