//! Agents on their own MPI ranks (feature `mpi`, docs/distributed.md): run with
//! `cargo test --release --features mpi --test mpi`. Built without the feature, this binary holds
//! one test, which skips saying so (a failure under `COMLRL_REQUIRE_ALL=1`).
#[cfg(feature = "mpi")]
#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "mpi")]
mod preference;
#[cfg(feature = "mpi")]
mod ranks;

#[cfg(not(feature = "mpi"))]
#[test]
fn built_with_the_mpi_feature() {
    comlrl_testutil::skip(
        "the MPI tests need the `mpi` feature: cargo test --release --features mpi --test mpi",
    );
}
