//! Memory around an update round, kept apart from the optimizer: the round never samples, so
//! each agent's sampling copies of its weights are freed for its length (their pages serve the
//! gradients) and rebuilt once at its end; what the round freed and the copies did not take
//! back goes back to the operating system before sampling starts again, so it does not add to
//! sampling's peak.
use crate::error::Result;
use crate::model::Policy;

/// Which agents' sampling copies an update round freed (only those rebuild at its end; the
/// others follow each optimizer step, see `Learner::step`).
#[derive(Debug, Clone, Default)]
pub struct Freed(Vec<bool>);

impl Freed {
    /// Whether agent `i`'s sampling copies are freed for the round.
    pub fn released(&self, i: usize) -> bool {
        self.0.get(i).copied().unwrap_or(false)
    }
}

/// Before a round: returns free heap pages to the OS and frees each held agent's sampling
/// copies where it has any.
pub fn before_update(policies: &[Option<Policy>]) -> Result<Freed> {
    crate::runtime::release_free_memory();
    log::debug!("update round starts; {}", crate::runtime::memory_line());
    let released = policies
        .iter()
        .map(|p| {
            p.as_ref()
                .map_or(Ok(false), |p| p.release_sampling_copies())
        })
        .collect::<std::result::Result<Vec<bool>, _>>()?;
    Ok(Freed(released))
}

/// After a round, also one that failed (so no later sampling runs without them): rebuilds the
/// freed sampling copies from the updated weights, then returns what the round freed to the OS
/// where the process holds much (for small models the pages sampling would fault back in cost
/// more than the trim saves).
pub fn after_update(policies: &[Option<Policy>], freed: &Freed) -> Result<()> {
    for (p, released) in policies.iter().zip(&freed.0) {
        if let (Some(p), true) = (p, released) {
            p.weights_changed()?;
        }
    }
    crate::runtime::release_free_memory_above(crate::runtime::TRIM_AFTER_UPDATE_ABOVE_BYTES);
    Ok(())
}
