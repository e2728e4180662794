//! The MPI world (feature `mpi`): rsmpi over the system's MPI. Only the thread that
//! initialized MPI calls into it (the trainer's loop); sampling and update threads never do.
//! [`MpiGroup`] is a sub-communicator (an agent's replicas) with the same collectives.
use super::World;
use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::PartitionMut;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::Count;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// This process's rank and size in `MPI_COMM_WORLD` (the communicator is fetched per call: it
/// is a constant handle, and this keeps the world `Send + Sync`).
#[derive(Debug, Clone, Copy)]
pub struct MpiWorld {
    rank: usize,
    size: usize,
}

impl MpiWorld {
    /// Initializes MPI; `None` when it was already initialized.
    pub fn init() -> Option<(Self, mpi::environment::Universe)> {
        let universe = mpi::initialize()?;
        let w = universe.world();
        let me = MpiWorld {
            rank: w.rank() as usize,
            size: w.size() as usize,
        };
        Some((me, universe))
    }

    fn comm(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }
}

/// Byte counts as MPI counts; a message over 2 GiB is beyond one MPI call.
fn count(n: usize) -> Count {
    Count::try_from(n).unwrap_or_else(|_| {
        let w = SimpleCommunicator::world();
        eprintln!(
            "error: rank {}: a message of {n} bytes exceeds MPI's 2 GiB count limit",
            w.rank()
        );
        w.abort(1)
    })
}

fn displs(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect()
}

fn split(buf: &[u8], counts: &[Count]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for &c in counts {
        out.push(buf[at..at + c as usize].to_vec());
        at += c as usize;
    }
    out
}

fn all_gather_on<C: Communicator>(comm: &C, size: usize, mine: &[u8]) -> Vec<Vec<u8>> {
    let mut counts = vec![0 as Count; size];
    comm.all_gather_into(&count(mine.len()), &mut counts[..]);
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    let mut buf = vec![0u8; total];
    let d = displs(&counts);
    {
        let mut part = PartitionMut::new(&mut buf[..], &counts[..], &d[..]);
        comm.all_gather_varcount_into(mine, &mut part);
    }
    split(&buf, &counts)
}

fn broadcast_on<C: Communicator>(comm: &C, me: usize, root: usize, data: Vec<u8>) -> Vec<u8> {
    let proc = comm.process_at_rank(root as i32);
    let mut len = data.len() as u64;
    proc.broadcast_into(&mut len);
    let mut buf = if me == root {
        data
    } else {
        vec![0u8; len as usize]
    };
    count(buf.len());
    proc.broadcast_into(&mut buf[..]);
    buf
}

fn gather_on<C: Communicator>(
    comm: &C,
    me: usize,
    size: usize,
    root: usize,
    mine: &[u8],
) -> Option<Vec<Vec<u8>>> {
    let proc = comm.process_at_rank(root as i32);
    let n = count(mine.len());
    if me == root {
        let mut counts = vec![0 as Count; size];
        proc.gather_into_root(&n, &mut counts[..]);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut buf = vec![0u8; total];
        let d = displs(&counts);
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &d[..]);
            proc.gather_varcount_into_root(mine, &mut part);
        }
        Some(split(&buf, &counts))
    } else {
        proc.gather_into(&n);
        proc.gather_varcount_into(mine);
        None
    }
}

fn all_reduce_sum_on<C: Communicator>(comm: &C, buf: &mut [f32]) {
    let send = buf.to_vec();
    count(buf.len());
    comm.all_reduce_into(&send[..], buf, SystemOperation::sum());
}

/// The ranks with `key` set form a new communicator, ordered by `key`; `None` elsewhere.
fn split_on<C: Communicator>(comm: &C, key: Option<usize>) -> Option<Arc<dyn World>> {
    let color = match key {
        Some(_) => Color::with_value(0),
        None => Color::undefined(),
    };
    let k = key.unwrap_or(0) as mpi::topology::Key;
    let sub = comm.split_by_color_with_key(color, k)?;
    Some(Arc::new(MpiGroup {
        rank: sub.rank() as usize,
        size: sub.size() as usize,
        // Never freed: MPI_Finalize releases it, and dropping it after finalize would fail.
        comm: ManuallyDrop::new(sub),
    }))
}

impl World for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        all_gather_on(&self.comm(), self.size, mine)
    }

    fn broadcast(&self, root: usize, data: Vec<u8>) -> Vec<u8> {
        broadcast_on(&self.comm(), self.rank, root, data)
    }

    fn gather(&self, root: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
        gather_on(&self.comm(), self.rank, self.size, root, mine)
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) {
        all_reduce_sum_on(&self.comm(), buf)
    }

    fn barrier(&self) {
        self.comm().barrier();
    }

    fn split(&self, key: Option<usize>) -> Option<Arc<dyn World>> {
        split_on(&self.comm(), key)
    }

    fn abort(&self, msg: &str) -> ! {
        eprintln!("error: rank {} of {}: {msg}", self.rank, self.size);
        self.comm().abort(1)
    }
}

/// A sub-communicator of the world (one agent's replicas); `rank` and `size` are within it.
pub struct MpiGroup {
    rank: usize,
    size: usize,
    comm: ManuallyDrop<SimpleCommunicator>,
}

// SAFETY: the communicator is an opaque MPI handle; like the world's, it is only used by the
// thread that initialized MPI (the trainer's loop), never concurrently.
unsafe impl Send for MpiGroup {}
// SAFETY: as for `Send`: no two threads call into it at once.
unsafe impl Sync for MpiGroup {}

impl std::fmt::Debug for MpiGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MpiGroup {{ rank: {}, size: {} }}", self.rank, self.size)
    }
}

impl World for MpiGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        all_gather_on(&*self.comm, self.size, mine)
    }

    fn broadcast(&self, root: usize, data: Vec<u8>) -> Vec<u8> {
        broadcast_on(&*self.comm, self.rank, root, data)
    }

    fn gather(&self, root: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
        gather_on(&*self.comm, self.rank, self.size, root, mine)
    }

    fn all_reduce_sum(&self, buf: &mut [f32]) {
        all_reduce_sum_on(&*self.comm, buf)
    }

    fn barrier(&self) {
        self.comm.barrier();
    }

    fn split(&self, key: Option<usize>) -> Option<Arc<dyn World>> {
        split_on(&*self.comm, key)
    }

    fn abort(&self, msg: &str) -> ! {
        let w = SimpleCommunicator::world();
        eprintln!("error: rank {} of {}: {msg}", w.rank(), w.size());
        w.abort(1)
    }
}
