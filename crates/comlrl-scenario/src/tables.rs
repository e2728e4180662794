//! Every section's key table, in the order docs/scenario.md shows them: the docs test
//! (`tests/scenario/key_tables.rs`) regenerates the tables between the doc's
//! `<!-- keys:<section>:begin ... -->` and `<!-- keys:<section>:end -->` markers from these.
use crate::agent_keys::AgentPlan;
use crate::critic_keys::CriticPlan;
use crate::dataset_keys::RawDataset;
use crate::keys::KeyDoc;
use crate::logging_keys::LoggingPlan;
use crate::preference_keys::PreferencePlan;
use crate::top_keys::RawTop;
use crate::trainer_keys::TrainerPlan;

/// One section's key table.
#[derive(Debug, Clone)]
pub struct KeyTable {
    /// The section's name in the docs markers (`top` for the top level).
    pub section: &'static str,
    /// The file under `crates/comlrl-scenario/src/` that declares it.
    pub file: &'static str,
    /// Its keys, in table order.
    pub keys: Vec<KeyDoc>,
}

/// The key tables of the top level, `dataset`, `agents`, `trainer`, `trainer.critic`, `logging`
/// and `preference`.
pub fn all() -> Vec<KeyTable> {
    let table = |section, file, keys| KeyTable {
        section,
        file,
        keys,
    };
    vec![
        table("top", "top_keys.rs", RawTop::keys()),
        table("dataset", "dataset_keys.rs", RawDataset::keys()),
        table("agents", "agent_keys.rs", AgentPlan::keys()),
        table("trainer", "trainer_keys.rs", TrainerPlan::keys()),
        table("critic", "critic_keys.rs", CriticPlan::keys()),
        table("logging", "logging_keys.rs", LoggingPlan::keys()),
        table("preference", "preference_keys.rs", PreferencePlan::keys()),
    ]
}
