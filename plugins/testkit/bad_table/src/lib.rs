//! Test-only reward plugin with a broken function table. The entry point returns the table
//! named by the environment variable `COMLRL_TESTKIT_BAD_TABLE` when it is called (the host
//! calls it once per load): `null_create`, `null_score`, `null_destroy`, `null_name` (a null
//! name pointer with a non-zero length), `bad_utf8_name`, `long_name` (a garbage length);
//! anything else gets a valid table. Every function aborts the process if called, so a test
//! that passes proves the host refused the table before calling into it.
use comlrl_plugin_api::{ErrBuf, RewardPluginV1, SampleRef, StrRef, ABI_VERSION};
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

const fn table(name: StrRef) -> RewardPluginV1 {
    RewardPluginV1 {
        abi_version: ABI_VERSION,
        size: std::mem::size_of::<RewardPluginV1>() as u32,
        name,
        create: Some(create),
        score: Some(score),
        destroy: Some(destroy),
    }
}

const NAME: StrRef = StrRef::new("bad_table");

/// A `Sync` wrapper: `StrRef` holds a raw pointer.
struct Table(RewardPluginV1);
// SAFETY: immutable static data.
unsafe impl Sync for Table {}

static NULL_CREATE: Table = Table(RewardPluginV1 {
    create: None,
    ..table(NAME)
});
static NULL_SCORE: Table = Table(RewardPluginV1 {
    score: None,
    ..table(NAME)
});
static NULL_DESTROY: Table = Table(RewardPluginV1 {
    destroy: None,
    ..table(NAME)
});
static NULL_NAME: Table = Table(table(StrRef {
    ptr: std::ptr::null(),
    len: 9,
}));
static BAD_UTF8: [u8; 4] = [b'b', 0xff, 0xfe, b'd'];
static BAD_UTF8_NAME: Table = Table(table(StrRef {
    ptr: BAD_UTF8.as_ptr(),
    len: 4,
}));
static LONG_NAME: Table = Table(table(StrRef {
    ptr: BAD_UTF8.as_ptr(),
    len: usize::MAX / 2,
}));

/// Entry point: the table the environment variable asks for.
#[unsafe(no_mangle)]
pub extern "C" fn comlrl_reward_v1() -> *const RewardPluginV1 {
    let t = match std::env::var("COMLRL_TESTKIT_BAD_TABLE").as_deref() {
        Ok("null_create") => &NULL_CREATE,
        Ok("null_score") => &NULL_SCORE,
        Ok("null_destroy") => &NULL_DESTROY,
        Ok("null_name") => &NULL_NAME,
        Ok("bad_utf8_name") => &BAD_UTF8_NAME,
        Ok("long_name") => &LONG_NAME,
        _ => return &VALID.0,
    };
    &t.0
}

static VALID: Table = Table(table(NAME));
