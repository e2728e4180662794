//! Test-only cdylib that exports a function, but not `comlrl_reward_v1`.

/// Some unrelated exported function.
#[unsafe(no_mangle)]
pub extern "C" fn comlrl_not_a_reward() -> i32 {
    42
}
