//! comlrl
