//! The world a run is part of: this process's rank among `size` processes and the few
//! collectives the trainer needs (all-gather, broadcast and gather of bytes, an f32 sum, a
//! barrier). A plain launch is a world of one ([`Single`]), which behaves exactly as a run
//! without any of this; with the `mpi` feature the world is MPI's (see `docs/distributed.md`).
//!
//! MPI collectives cannot be cancelled or bounded by a timeout: a rank that dies makes the
//! others' next collective fail, and MPI's default error handler (`MPI_ERRORS_ARE_FATAL`)
//! then ends the whole job with a message naming the failed rank. A rank that hits an error of
//! its own calls [`World::abort`] with a message naming itself, so the others never wait on it.
pub mod codec;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod placement;

pub use placement::Placement;
use std::sync::Arc;

/// This process's view of the run's processes. Every method except `rank`, `size` and `abort`
/// is a collective: every rank must call it, in the same order.
pub trait World: Send + Sync + std::fmt::Debug {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;
    /// Processes in the run.
    fn size(&self) -> usize;
    /// Every rank's `mine`, in rank order.
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>>;
    /// `root`'s `data` on every rank (the others' `data` is ignored).
    fn broadcast(&self, root: usize, data: Vec<u8>) -> Vec<u8>;
    /// On `root`, every rank's `mine` in rank order; `None` elsewhere.
    fn gather(&self, root: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>>;
    /// Element-wise sum of `buf` over all ranks, written back into every rank's `buf`.
    fn all_reduce_sum(&self, buf: &mut [f32]);
    /// Returns once every rank has called it.
    fn barrier(&self);
    /// The ranks that pass `Some(key)` form a new world of their own, ranked by `key` (e.g. an
    /// agent's replicas); the others get `None`.
    fn split(&self, key: Option<usize>) -> Option<Arc<dyn World>>;
    /// Ends the whole run (every rank) after printing `msg`; used when this rank cannot go on.
    fn abort(&self, msg: &str) -> !;
    /// `true` on rank 0, the rank that scores, logs and writes manifests.
    fn is_root(&self) -> bool {
        self.rank() == 0
    }
}

/// A world of one process: every collective is the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl World for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        vec![mine.to_vec()]
    }
    fn broadcast(&self, _root: usize, data: Vec<u8>) -> Vec<u8> {
        data
    }
    fn gather(&self, _root: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
        Some(vec![mine.to_vec()])
    }
    fn all_reduce_sum(&self, _buf: &mut [f32]) {}
    fn barrier(&self) {}
    fn split(&self, key: Option<usize>) -> Option<Arc<dyn World>> {
        key.map(|_| Arc::new(Single) as Arc<dyn World>)
    }
    fn abort(&self, msg: &str) -> ! {
        eprintln!("error: {msg}");
        std::process::exit(1)
    }
}

/// Keeps the process's MPI environment alive (it is finalized when this is dropped); holds
/// nothing for a single-process run. Keep it in `main` for the whole run.
pub struct Session {
    #[cfg(feature = "mpi")]
    _universe: Option<::mpi::environment::Universe>,
}

/// The world this process was started in: MPI's when built with the `mpi` feature (a plain
/// launch is then an MPI world of one), else [`Single`].
pub fn init() -> (Arc<dyn World>, Session) {
    #[cfg(feature = "mpi")]
    {
        if let Some((world, universe)) = mpi::MpiWorld::init() {
            return (
                Arc::new(world),
                Session {
                    _universe: Some(universe),
                },
            );
        }
    }
    (
        Arc::new(Single),
        Session {
            #[cfg(feature = "mpi")]
            _universe: None,
        },
    )
}

/// The size-1 world, for library users and tests.
pub fn single() -> Arc<dyn World> {
    Arc::new(Single)
}
