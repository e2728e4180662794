//! Not an algorithm: what the iterative preference trainers (`madpo_iter`, `marlhf_iter`) share,
//! which either may import and which imports no algorithm: the comparator a round's candidates
//! are compared with (`comparator`, its `api` endpoint in `api`) and the replay of earlier rounds'
//! pairs (`replay`).
pub mod api;
pub mod centralized;
pub mod comparator;
pub mod replay;
