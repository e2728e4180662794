//! Process measurements for benchmark reports: peak resident memory and CPU facts.

/// Peak resident set size of this process in bytes (`VmHWM`), if the OS reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Current resident set size of this process in bytes (`VmRSS`), if the OS reports it.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// "rss X MB, peak Y MB" for debug logs.
pub fn memory_line() -> String {
    let mb = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.0} MB", b as f64 / 1e6));
    format!("rss {}, peak {}", mb(rss_bytes()), mb(peak_rss_bytes()))
}

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
