//! Tests of the code_exec plugin: the level reward against the Python reference on recorded
//! cases (`fixtures`), the level_feedback transition's prompts against the original's
//! (`feedback`), the prompts and data splits (`prompts`), and the sandbox against hostile
//! completions (`security`). Tests that run Python skip without a `python3`
//! (`$COMLRL_PYTHON` picks another interpreter).
mod common;
mod feedback;
mod fixtures;
mod prompts;
mod security;
