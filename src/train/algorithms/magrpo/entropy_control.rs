//! `trainer.use_adaptive_entropy` (TRL 1.16's adaptive entropy control, from Skywork-OR1, arXiv
//! 2505.22312): the entropy bonus's coefficient of one agent, changed after each of its
//! optimizer steps by the step's mean entropy over the tokens the bonus acts on (every
//! replica's, summed before the mean): up by `entropy_coef_delta` when it was at most
//! `entropy_target`, else down, within [`entropy_coef_min`, `entropy_coef_max`]. A step applies
//! the coefficient only when the previous step's entropy was at most the target (TRL starts
//! from an infinite entropy: no bonus before the first measurement). The state is the run's, so
//! checkpoints keep it (one small JSON file per agent).
use crate::error::{Error, Result};
use crate::train::update::LossGrads;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The controller's settings (the scenario's `trainer.entropy_*` keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControlSettings {
    /// `entropy_coef_min`.
    pub min: f64,
    /// `entropy_coef_max`.
    pub max: f64,
    /// `entropy_coef_delta`.
    pub delta: f64,
    /// `entropy_target`.
    pub target: f64,
}

/// One agent's controller state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EntropyControl {
    /// The coefficient (TRL's `entropy_coef` as it mutates).
    pub coef: f64,
    /// The last step's measured entropy; `None` before the first step (TRL's infinity).
    pub last_entropy: Option<f64>,
}

/// The entropy a step's controller update reads from its mini-batch (summed over the agent's
/// replicas): the mean over the tokens the bonus acts on, the high-entropy mask's subset
/// when it is on, else every computed (all counted) completion token; 0 without tokens (TRL's
/// Σ(H · mask) / max(Σ mask, 1)).
pub fn measured_entropy(lg: &LossGrads) -> f64 {
    lg.bonus_entropy.or(lg.entropy_mean()).unwrap_or(0.0)
}

/// The most bytes a controller file may hold (a few numbers).
const FILE_CAP: u64 = 4096;

impl EntropyControl {
    /// The state before the first step: the coefficient `entropy_coef`, no entropy measured.
    pub fn new(coef: f64) -> Self {
        EntropyControl {
            coef,
            last_entropy: None,
        }
    }

    /// The coefficient this step applies: the current one when the previous step's entropy
    /// was at most the target, else 0.
    pub fn applied(&self, s: &ControlSettings) -> f64 {
        match self.last_entropy {
            Some(h) if h <= s.target => self.coef,
            _ => 0.0,
        }
    }

    /// After a step whose mean entropy was `entropy`: the coefficient one delta up (at or
    /// below the target) or down, within the bounds.
    pub fn update(&mut self, s: &ControlSettings, entropy: f64) {
        self.coef = if entropy <= s.target {
            (self.coef + s.delta).min(s.max)
        } else {
            (self.coef - s.delta).max(s.min)
        };
        self.last_entropy = Some(entropy);
    }

    /// The checkpoint file of agent `agent`.
    pub fn file(agent: usize) -> String {
        format!("entropy_control.agent{agent}.json")
    }

    /// Writes the state into `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(self)
            .map_err(|e| Error::serialize("the entropy controller's state", e))?;
        std::fs::write(path, text).map_err(|e| Error::io(path, e))
    }

    /// Reads a state [`EntropyControl::save`] wrote, refusing one whose numbers are not a
    /// controller's (not finite, a negative coefficient).
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            comlrl_scenario::files::read_text(path, FILE_CAP, "it is not a file comlrl wrote")
                .map_err(|e| Error::io(path, e))?;
        let s: EntropyControl = serde_json::from_str(&text)
            .map_err(|e| Error::checkpoint_by(path, "not an entropy controller's state", e))?;
        let finite = s.last_entropy.is_none_or(|h| h.is_finite() && h >= 0.0);
        if !(s.coef.is_finite() && s.coef >= 0.0 && finite) {
            return Err(Error::checkpoint(
                path,
                format!(
                    "its coefficient {} or entropy {:?} is not a finite number ≥ 0",
                    s.coef, s.last_entropy
                ),
            ));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TRL's rule: no bonus before the first measurement; up by delta at or below the target
    /// (capped), down above it (floored); applied only after a step at or below the target.
    #[test]
    fn the_coefficient_follows_the_entropy() {
        let s = ControlSettings {
            min: 0.002,
            max: 0.0175,
            delta: 0.005,
            target: 1.0,
        };
        let mut c = EntropyControl::new(0.01);
        assert_eq!(c.applied(&s), 0.0);
        c.update(&s, 0.9);
        assert!((c.coef - 0.015).abs() < 1e-15);
        assert_eq!(c.applied(&s), c.coef);
        c.update(&s, 1.0);
        assert_eq!(c.coef, 0.0175);
        c.update(&s, 1.2);
        assert!((c.coef - 0.0125).abs() < 1e-15);
        assert_eq!(c.applied(&s), 0.0);
        c.update(&s, 3.0);
        c.update(&s, 3.0);
        c.update(&s, 3.0);
        assert_eq!(c.coef, 0.002);
    }

    /// A saved state loads back; a damaged one is refused with the file named.
    #[test]
    fn the_state_round_trips_and_bad_numbers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(EntropyControl::file(1));
        let mut c = EntropyControl::new(0.01);
        c.update(
            &ControlSettings {
                min: 0.0,
                max: 1.0,
                delta: 0.005,
                target: 0.2,
            },
            0.1,
        );
        c.save(&path).unwrap();
        assert_eq!(EntropyControl::load(&path).unwrap(), c);
        std::fs::write(&path, r#"{"coef":-1.0,"last_entropy":null}"#).unwrap();
        let err = EntropyControl::load(&path).unwrap_err().to_string();
        assert!(err.contains("entropy_control.agent1.json"), "{err}");
        assert!(err.contains("not a finite number"), "{err}");
        std::fs::write(&path, "[1]").unwrap();
        let err = EntropyControl::load(&path).unwrap_err().to_string();
        assert!(err.contains("not an entropy controller's state"), "{err}");
    }
}
