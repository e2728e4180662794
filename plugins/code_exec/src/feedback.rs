//! The `level_feedback` external transition of OpenMLRL/LLM_Collab_Code_Generation
//! (`external/level_feedback.py`) at [`FEEDBACK_COMMIT`], for two agents: after a turn, each
//! agent's next prompt is a diagnosis of the joint program its branch wrote — which functions
//! are defined, whether the program parses (with the `SyntaxError`), how many of the problem's
//! sandbox tests pass and why each failing one failed, and for the main agent how it uses aux —
//! closed by an instruction to revise.
//!
//! The text checks are Rust ([`crate::level`], shared with the reward); the parse, the aux
//! misuse analysis (an `ast` walk) and the tests run in the sandboxed Python, whose harness
//! reports each test's exception type and text ([`Report::parse`]).
//!
//! The environment repository's trainer hands the transition the problem's tests cut down to
//! their first assert (`external.sandbox_slice: 1` in its configs, `_make_sliced_assert_tests`
//! in `train_magrpo.py`); [`slice_tests`] does the same.
use crate::level::{self, py_strip};
use regex::Regex;
use std::sync::OnceLock;

/// The commit of `external/level_feedback.py` that is ported: the only one of that file the
/// public index holds by name (the reward's commit, [`crate::PINNED_COMMIT`], is not among its
/// stored versions). Its helpers (`rewards/code_utils.py`) are those the reward port uses, plus
/// `check_aux_call_without_usage`, whose stored version is at [`UTILS_COMMIT`].
pub const FEEDBACK_COMMIT: &str = "3618829923c8de53462a20ff107afce09a06ce63";

/// The commit of `rewards/code_utils.py` whose `check_aux_call_without_usage` (and the
/// `AuxUsageAnalyzer` behind it) the harness reproduces.
pub const UTILS_COMMIT: &str = "11f24c3f1a191e6a7906d6810b580a1ff4725c10";

/// Python's `str.splitlines()` (no `keepends`): the line boundaries Python recognises.
pub fn py_splitlines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let end = match c {
            '\r' => {
                if let Some(&(_, '\n')) = it.peek() {
                    it.next();
                    i + 2
                } else {
                    i + 1
                }
            }
            '\n' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => i + c.len_utf8(),
            _ => continue,
        };
        out.push(&s[start..i]);
        start = end;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

fn re_check_line() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        let s = r"\s\x1C-\x1F";
        Regex::new(&format!(r"^[{s}]*def[{s}]+check[{s}]*\(candidate\)[{s}]*:"))
            .unwrap_or_else(|e| panic!("built-in pattern: {e}"))
    })
}

/// `_make_sliced_assert_tests(test_code, n)`: the test code rebuilt as its preamble and a
/// `check(candidate)` holding only the first `n` asserts that mention `candidate` (`n < 0`: the
/// last `|n|`; `0`: the code unchanged, as is code without such asserts or only whitespace).
pub fn slice_tests(test_code: &str, n: i64) -> String {
    if py_strip(test_code).is_empty() || n == 0 {
        return test_code.to_string();
    }
    let lines = py_splitlines(test_code);
    let check = lines.iter().position(|l| re_check_line().is_match(l));
    let preamble = &lines[..check.unwrap_or(lines.len())];
    let asserts: Vec<&str> = lines[check.map_or(0, |c| c + 1)..]
        .iter()
        .map(|l| py_strip(l))
        .filter(|s| s.starts_with("assert") && s.contains("candidate"))
        .collect();
    if asserts.is_empty() {
        return test_code.to_string();
    }
    let keep = n.unsigned_abs().min(asserts.len() as u64) as usize;
    let selected = if n > 0 {
        &asserts[..keep]
    } else {
        &asserts[asserts.len() - keep..]
    };
    let preamble = preamble.join("\n");
    let preamble = py_strip(&preamble);
    let mut parts: Vec<String> = Vec::new();
    if !preamble.is_empty() {
        parts.push(preamble.to_string());
    }
    parts.push("def check(candidate):".into());
    parts.extend(selected.iter().map(|a| format!("    {a}")));
    parts.join("\n") + "\n"
}

/// `check_function_definition(code, name, description)`: defined with a `return`, and the
/// reference's message.
pub fn definition(code: &str, name: &str, description: &str) -> (bool, String) {
    let f = level::extract_function(code, name);
    if f.is_empty() {
        (false, format!("{description} not defined"))
    } else if level::defines_with_return(code, name) {
        (
            true,
            format!("{description} properly defined with return statement"),
        )
    } else {
        (false, format!("{description} missing return statement"))
    }
}

/// One extracted test as the analysis saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDetail {
    /// The assert, with the entry point in place of `candidate`.
    pub case: String,
    /// `None`: passed; else the exception's type name and text.
    pub error: Option<(String, String)>,
}

/// A `SyntaxError`'s position and message; `None` fields are Python's `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyntaxErrorAt {
    /// `lineno`.
    pub line: Option<i64>,
    /// `offset`.
    pub offset: Option<i64>,
    /// `msg`.
    pub msg: String,
}

/// What the sandboxed harness reported for one feedback job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// `check_aux_call_without_usage`'s list (`Line N: reason`).
    pub misuse: Vec<String>,
    /// `None`: the harness never said; `Some(Ok)`: parses; `Some(Err)`: `str(e)` and where.
    pub syntax: Option<Result<(), (String, SyntaxErrorAt)>>,
    /// Defining the program raised this (type, text): every test fails with it.
    pub load_error: Option<(String, String)>,
    /// Per reported test: its index and `None` (passed) or the error.
    pub tests: Vec<(usize, Option<(String, String)>)>,
    /// The harness reached its end.
    pub done: bool,
}

impl Report {
    /// Parses the harness's JSON-lines report; lines that are not events are skipped.
    pub fn parse(text: &str) -> Report {
        let mut r = Report::default();
        let pair = |v: &serde_json::Value| -> Option<(String, String)> {
            Some((v[0].as_str()?.to_string(), v[1].as_str()?.to_string()))
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some(m) = v.get("misuse").and_then(|m| m.as_array()) {
                r.misuse = m
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect();
            } else if let Some(ok) = v.get("syntax").and_then(|s| s.as_bool()) {
                r.syntax = Some(if ok {
                    Ok(())
                } else {
                    Err((
                        v["text"].as_str().unwrap_or_default().to_string(),
                        SyntaxErrorAt {
                            line: v["line"].as_i64(),
                            offset: v["offset"].as_i64(),
                            msg: v["msg"].as_str().unwrap_or_default().to_string(),
                        },
                    ))
                });
            } else if let Some(l) = v.get("load") {
                r.load_error = pair(l);
            } else if let Some(i) = v.get("test").and_then(|t| t.as_u64()) {
                let error = if v["ok"].as_bool() == Some(true) {
                    None
                } else {
                    Some(pair(&v["error"]).unwrap_or_default())
                };
                r.tests.push((i as usize, error));
            } else if v.get("done").is_some() {
                r.done = true;
            }
        }
        r
    }
}

/// The job the harness runs for a feedback analysis (mode `feedback`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The joint program (imports, aux, main).
    pub code: String,
    /// The extracted asserts.
    pub tests: Vec<String>,
    /// The main function's text, for the misuse analysis.
    pub main_func: String,
}

/// `analyze_code` (two agents): the report the prompts are written from.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// The extracted aux function.
    pub aux_func: String,
    /// The extracted main function.
    pub main_func: String,
    /// Aux defined with a return, and the message.
    pub aux_defined: (bool, String),
    /// Main defined with a return, and the message.
    pub main_defined: (bool, String),
    /// The joint program parses.
    pub syntax_ok: bool,
    /// `check_syntax`'s message.
    pub syntax_message: String,
    /// The `SyntaxError`'s position when it does not parse.
    pub syntax_error: Option<SyntaxErrorAt>,
    /// Main calls aux.
    pub aux_called: bool,
    /// Aux calls whose result main drops (`Line N: reason`).
    pub misuse: Vec<String>,
    /// Main is a thin wrapper over aux.
    pub wrapper: bool,
    /// Tests passed.
    pub tests_passed: usize,
    /// Tests extracted (0 when the tests did not run).
    pub tests_total: usize,
    /// The tests that ran, in order.
    pub details: Vec<TestDetail>,
}

/// Analyses one joint action: `run(job)` runs the harness in the sandbox and returns its report.
/// A harness that ended early (the program exited, or the wall-clock limit) leaves the tests
/// it reported; the reference, running in the trainer's process, would have ended the run.
pub fn analyze<E>(
    original_prompt: &str,
    aux: &str,
    main: &str,
    test_code: &str,
    entry_point: &str,
    run: impl FnOnce(&Job) -> Result<Report, E>,
) -> Result<Analysis, E> {
    let aux_func = level::extract_function(aux, "aux");
    let main_func = level::extract_function(main, entry_point);
    let aux_defined = definition(aux, "aux", "Aux function");
    let main_defined = definition(main, entry_point, &format!("Main function ({entry_point})"));
    let imports = level::extract_imports(original_prompt);
    let code = level::concatenate(&aux_func, &main_func, &imports);
    let tests = if test_code.is_empty() || entry_point.is_empty() {
        Vec::new()
    } else {
        level::extract_tests(test_code, entry_point)
    };
    let report = run(&Job {
        code,
        tests: tests.clone(),
        main_func: main_func.clone(),
    })?;
    let (syntax_ok, syntax_message, syntax_error) = match &report.syntax {
        Some(Ok(())) => (true, "Combined code syntax OK".to_string(), None),
        Some(Err((text, at))) => (
            false,
            format!("Combined code has syntax error: {text}"),
            Some(at.clone()),
        ),
        None => (false, "Combined code has syntax error: ".to_string(), None),
    };
    let mut details = Vec::new();
    if syntax_ok && !tests.is_empty() {
        if let Some(err) = &report.load_error {
            details = tests
                .iter()
                .map(|t| TestDetail {
                    case: t.clone(),
                    error: Some(err.clone()),
                })
                .collect();
        } else {
            for (i, error) in &report.tests {
                if let Some(case) = tests.get(*i) {
                    details.push(TestDetail {
                        case: case.clone(),
                        error: error.clone(),
                    });
                }
            }
        }
    }
    let aux_called = level::uses_aux(&main_func);
    let wrapper = level::is_wrapper(&main_func);
    Ok(Analysis {
        aux_func,
        aux_defined,
        main_defined,
        syntax_ok,
        syntax_message,
        syntax_error,
        aux_called,
        misuse: if main_func.is_empty() {
            Vec::new()
        } else {
            report.misuse
        },
        wrapper,
        tests_passed: details.iter().filter(|d| d.error.is_none()).count(),
        tests_total: if syntax_ok { tests.len() } else { 0 },
        details,
        main_func,
    })
}

fn py_opt(v: Option<i64>) -> String {
    v.map_or_else(|| "None".to_string(), |x| x.to_string())
}

fn found(defined: &(bool, String)) -> String {
    format!(
        "{} ({})",
        if defined.0 { "FOUND" } else { "MISSING" },
        defined.1
    )
}

/// The diagnostics lines shared by both prompts after the definition lines.
fn diagnostics(a: &Analysis, lines: &mut Vec<String>) {
    lines.push(format!(
        "- Syntax: {} ({})",
        if a.syntax_ok { "OK" } else { "ERROR" },
        a.syntax_message
    ));
    if let Some(se) = &a.syntax_error {
        lines.push(format!(
            "  SyntaxError at line {}, col {}: {}",
            py_opt(se.line),
            py_opt(se.offset),
            se.msg
        ));
    }
    if a.tests_total > 0 {
        lines.push(format!(
            "- Tests: {}/{} passed",
            a.tests_passed, a.tests_total
        ));
        for d in &a.details {
            if let Some((ty, msg)) = &d.error {
                lines.push(format!("  Failed case: {} -> {ty}: {msg}", d.case));
            }
        }
    } else {
        lines.push("- Tests: no test cases found".into());
    }
}

/// An agent's history block: its previous prompts, then its previous responses (`label` names
/// them: `aux(...)` or `main`).
fn history(lines: &mut Vec<String>, prompts: &[String], responses: &[String], label: &str) {
    if !prompts.is_empty() {
        lines.push("History: previous prompts:".into());
        for (t, p) in prompts.iter().enumerate() {
            lines.push(format!("- Turn {} prompt:\n{p}", t + 1));
        }
        lines.push(String::new());
    }
    if !responses.is_empty() {
        lines.push(format!("History: your previous {label} responses:"));
        for (t, r) in responses.iter().enumerate() {
            lines.push(format!("- Turn {} response:\n{r}", t + 1));
        }
        lines.push(String::new());
    }
}

/// `format_followup_prompts` for two agents: the aux agent's and the main agent's next prompts.
/// `prompt_history` / `response_history` are each agent's, agent 0 (aux) first; empty slices
/// (what the repository's transition wrapper passes) leave the history blocks out.
pub fn followup_prompts(
    a: &Analysis,
    entry_point: &str,
    prompt_history: &[Vec<String>],
    response_history: &[Vec<String>],
) -> (String, String) {
    let mut aux: Vec<String> = Vec::new();
    let mut main: Vec<String> = Vec::new();
    // Histories count only when both agents have one (the reference's `len(...) >= 2`).
    let agent = |h: &[Vec<String>], i: usize| -> Vec<String> {
        if h.len() >= 2 {
            h[i].clone()
        } else {
            Vec::new()
        }
    };
    history(
        &mut aux,
        &agent(prompt_history, 0),
        &agent(response_history, 0),
        "aux(...)",
    );
    history(
        &mut main,
        &agent(prompt_history, 1),
        &agent(response_history, 1),
        "main",
    );

    aux.push("Static and execution diagnostics:".into());
    aux.push(format!("- Aux definition: {}", found(&a.aux_defined)));
    aux.push(format!("- Main definition: {}", found(&a.main_defined)));
    diagnostics(a, &mut aux);

    main.push("Static and execution diagnostics:".into());
    main.push(format!("- Main definition: {}", found(&a.main_defined)));
    main.push(format!("- Aux definition: {}", found(&a.aux_defined)));
    diagnostics(a, &mut main);
    if a.main_defined.0 {
        if !a.aux_called {
            main.push("- Aux usage: main does NOT call aux".into());
        } else if !a.misuse.is_empty() {
            let reasons: Vec<&str> = a.misuse.iter().take(2).map(String::as_str).collect();
            main.push(format!(
                "- Aux usage: called but misused ({})",
                reasons.join(", ")
            ));
        } else {
            main.push("- Aux usage: main calls aux and uses its result".into());
        }
        if a.wrapper {
            main.push("- Warning: main appears to be a thin wrapper over aux".into());
        }
    }
    aux.push(
        "\nRevise your aux(...) accordingly. Output ONLY the function code with no extra text."
            .into(),
    );
    main.push(format!(
        "\nRevise your {entry_point}(...) accordingly. Output ONLY the function code with no extra text."
    ));
    (aux.join("\n"), main.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitlines_like_python() {
        assert_eq!(py_splitlines("a\r\nb\rc\n"), vec!["a", "b", "c"]);
        assert_eq!(py_splitlines("a\u{2028}b\x0c"), vec!["a", "b"]);
        assert_eq!(py_splitlines(""), Vec::<&str>::new());
        assert_eq!(py_splitlines("\n"), vec![""]);
    }

    #[test]
    fn slicing_keeps_the_preamble_and_the_first_asserts() {
        let t = "\n\nMETA = {}\n\n\ndef check(candidate):\n    assert candidate(1) == 2\n    assert True\n    assert candidate(2) == 3\n";
        assert_eq!(
            slice_tests(t, 1),
            "META = {}\ndef check(candidate):\n    assert candidate(1) == 2\n"
        );
        assert_eq!(
            slice_tests(t, -1),
            "META = {}\ndef check(candidate):\n    assert candidate(2) == 3\n"
        );
        assert_eq!(slice_tests(t, 0), t);
        assert_eq!(slice_tests("  ", 1), "  ");
    }

    #[test]
    fn definition_messages() {
        assert_eq!(
            definition("def aux(x):\n    return x", "aux", "Aux function").1,
            "Aux function properly defined with return statement"
        );
        assert_eq!(
            definition("def aux(x):\n    pass", "aux", "Aux function").1,
            "Aux function missing return statement"
        );
        assert_eq!(
            definition("", "aux", "Aux function").1,
            "Aux function not defined"
        );
    }
}
