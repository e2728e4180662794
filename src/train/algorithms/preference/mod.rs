//! Not an algorithm: what the iterative preference trainers (`madpo_iter`, `marlhf_iter`) share,
//! which either may import and which imports no algorithm: the comparator a round's candidates
//! are compared with (`comparator`, its `api` endpoint in `api`) and the replay of earlier rounds'
//! pairs (`replay`), and the check of a saved state's rounds.
pub mod api;
pub mod comparator;
pub mod replay;

use crate::error::{Error, Result};
use std::ops::Range;
use std::path::Path;

/// An error unless `shards` (each finished round's range of a set of `pairs` pairs, as a state
/// file at `path` records them) tile the set from its start, one range per finished round.
pub fn check_round_shards(
    path: &Path,
    shards: &[Range<usize>],
    finished: usize,
    pairs: usize,
) -> Result<()> {
    let mut end = 0;
    for r in shards {
        if r.start != end || r.end < r.start || r.end > pairs {
            return Err(Error::checkpoint(
                path,
                format!("its rounds' ranges of pairs do not tile the set ({r:?} of {pairs} pairs)"),
            ));
        }
        end = r.end;
    }
    if shards.len() != finished {
        return Err(Error::checkpoint(
            path,
            format!(
                "it records {finished} finished rounds but {} rounds of pairs",
                shards.len()
            ),
        ));
    }
    Ok(())
}
