//! MARLHF (CoMLRL 1.4.3's `MARLHFTrainer`): a joint reward model learnt from preference pairs,
//! then online MARL against it. This landing holds the reward model's core (`reward_model`: the
//! joint text layout, the scores, the Bradley–Terry loss and its gradients through the value
//! head's backward), checked against CoMLRL's `JointRewardModel`
//! (`tests/train/marlhf_reward.rs`). Not yet selectable as `trainer.algorithm` (its keys, the
//! reward-model phase over the preference set and the RL phase against the frozen model come
//! next).
pub mod reward_model;
