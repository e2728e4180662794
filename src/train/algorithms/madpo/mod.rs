//! MADPO, multi-agent direct preference optimisation (CoMLRL 1.4.3's `MADPOTrainer`): offline
//! and reference-free. The first pass over the training prompts samples K aligned joint
//! candidates per prompt and scores them; the pairs with a positive joint-reward gap that
//! `pair_selection` keeps form the preference set (`set`, `pairs`); every epoch then shuffles the
//! set and takes one AdamW step per agent per mini-batch of `train_batch_size` pairs on the
//! joint-factorised DPO loss (`loss`).
pub mod loss;
pub mod pairs;
pub mod set;
