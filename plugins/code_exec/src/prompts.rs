//! The two agents' first-turn prompts as the environment repository's formatters write them
//! (`aux_function_formatter` / `main_function_formatter` in `train_magrpo.py` at
//! [`crate::PINNED_COMMIT`]), and the `params` field they need: the first `def name(…)` of the
//! problem's prompt, its parameters split on commas and stripped, joined by `", "`.
//!
//! `scenarios/humaneval_coop.yaml` renders the same text with per-agent templates over the rows
//! of `data/humaneval/{train,eval}.jsonl`, which carry `params`; the plugin's `prompts` test
//! checks both against the prompts recorded from the Python formatters for all 164 problems.
use regex::Regex;
use std::sync::OnceLock;

/// What the formatters return when the prompt has no `def name(params)` or no entry point.
pub const NO_FUNCTION: &str = "Error: Could not extract function information from prompt.";

/// `extract_function_params_from_prompt`: the parameters of the prompt's first definition.
pub fn params(prompt: &str) -> Vec<String> {
    static R: OnceLock<Regex> = OnceLock::new();
    let re = R.get_or_init(|| {
        Regex::new(r"def[\s\x1C-\x1F]+[\p{L}\p{N}_]+[\s\x1C-\x1F]*\(([^)]+)\)").expect("pattern")
    });
    re.captures(prompt)
        .map(|c| {
            c[1].split(',')
                .map(crate::level::py_strip)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The `params` row field: `", ".join(params)`, `None` when the formatters would give
/// [`NO_FUNCTION`].
pub fn params_field(prompt: &str, entry_point: &str) -> Option<String> {
    let p = params(prompt);
    (!p.is_empty() && !entry_point.is_empty()).then(|| p.join(", "))
}

/// Agent 0's prompt (the helper `aux`).
pub fn aux_prompt(prompt: &str, entry_point: &str) -> String {
    if params_field(prompt, entry_point).is_none() {
        return NO_FUNCTION.to_string();
    }
    format!(
        "Create a helper function for this coding problem.\n\nProblem:\n{prompt}\n\n\
IMPORTANT INSTRUCTIONS:\n\
- Output ONLY the function code, no explanations or examples\n\
- Do NOT include markdown code blocks (```python)\n\
- Do NOT include any text before or after the function\n\
- Do NOT include test cases or example usage\n\
- Create a helper function named 'aux' that can assist the main function\n\
- The function should return useful data for solving the problem\n\n\
Your output should follow this format:\n\n\
def aux(...):\n # your function code here\nreturn result\n"
    )
}

/// Agent 1's prompt (the entry point, which may call `aux`).
pub fn main_prompt(prompt: &str, entry_point: &str) -> String {
    let Some(params) = params_field(prompt, entry_point) else {
        return NO_FUNCTION.to_string();
    };
    format!(
        "Solve this coding problem by implementing the required function.\n\nProblem:\n{prompt}\n\n\
You have access to a helper function: aux(...)\n\n\
IMPORTANT INSTRUCTIONS:\n\
- Output ONLY the function code, no explanations or examples\n\
- Do NOT include markdown code blocks (```python)\n\
- Do NOT include any text before or after the function\n\
- Do NOT include test cases or example usage\n\
- Do NOT redefine the aux() function\n\
- Implement ONLY the '{entry_point}' function as specified\n\
- You can call aux() to assign value to a variable within your function if helpful\n\n\
Your output should follow this format:\n\n\
def {entry_point}({params}):\n # your function code here\nreturn result\n"
    )
}
