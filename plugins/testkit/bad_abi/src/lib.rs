//! Test-only plugin whose table claims ABI version 999: the host must refuse it after reading
//! the header, before calling anything else (every function here panics if called).
use comlrl_plugin_api::{ErrBuf, RewardPluginV1, SampleRef, StrRef};
use std::ffi::c_void;

extern "C" fn create(_params: StrRef, _err: *mut ErrBuf) -> *mut c_void {
    std::process::abort()
}

extern "C" fn score(
    _s: *const c_void,
    _p: *const SampleRef,
    _n: usize,
    _o: *mut f32,
    _e: *mut ErrBuf,
) -> i32 {
    std::process::abort()
}

extern "C" fn destroy(_s: *mut c_void) {
    std::process::abort()
}

static TABLE: RewardPluginV1 = RewardPluginV1 {
    abi_version: 999,
    size: std::mem::size_of::<RewardPluginV1>() as u32,
    name: StrRef::new("bad_abi"),
    create: Some(create),
    score: Some(score),
    destroy: Some(destroy),
};

/// Entry point with the right name but an incompatible table.
#[unsafe(no_mangle)]
pub extern "C" fn comlrl_reward_v1() -> *const RewardPluginV1 {
    &TABLE
}
