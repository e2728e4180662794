//! comlrl scenario files: raw YAML mirror, validation and the resolved plan.
