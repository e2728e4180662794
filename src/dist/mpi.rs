//! The MPI world (feature `mpi`): rsmpi over the system's MPI. Only the thread that
//! initialized MPI calls into it (the trainer's loop); sampling and update threads never do.
use super::World;
use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::PartitionMut;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Count;

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

impl World for MpiWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let comm = self.comm();
        let mut counts = vec![0 as Count; self.size];
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

    fn broadcast(&self, root: usize, data: Vec<u8>) -> Vec<u8> {
        let comm = self.comm();
        let proc = comm.process_at_rank(root as i32);
        let mut len = data.len() as u64;
        proc.broadcast_into(&mut len);
        let mut buf = if self.rank == root {
            data
        } else {
            vec![0u8; len as usize]
        };
        count(buf.len());
        proc.broadcast_into(&mut buf[..]);
        buf
    }

    fn gather(&self, root: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
        let comm = self.comm();
        let proc = comm.process_at_rank(root as i32);
        let n = count(mine.len());
        if self.rank == root {
            let mut counts = vec![0 as Count; self.size];
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

    fn all_reduce_sum(&self, buf: &mut [f32]) {
        let send = buf.to_vec();
        count(buf.len());
        self.comm()
            .all_reduce_into(&send[..], buf, SystemOperation::sum());
    }

    fn barrier(&self) {
        self.comm().barrier();
    }

    fn abort(&self, msg: &str) -> ! {
        eprintln!("error: rank {} of {}: {msg}", self.rank, self.size);
        self.comm().abort(1)
    }
}
