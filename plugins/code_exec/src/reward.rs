//! The level reward of `execution_reward_aux` at the pinned commit ([`crate::PINNED_COMMIT`]),
//! for one (aux, main, problem): the text checks here, the parse and the tests in the sandbox.
//!
//! | level | what | reward |
//! | --- | --- | --- |
//! | 1 | aux (`def aux(…)`) defined with a `return` | +0.4 (optional) |
//! | 1 | main (the entry point) defined with a `return` | +0.6; else stop |
//! | 2 | imports + aux + main parse (`ast.parse`) | +0.5; else stop |
//! | 3 | fraction of the problem's asserts that pass (none extracted: stop) | +0 … +1 |
//! | bonus | ≥ 1 test passed, aux defined, main calls `aux(` | +0.5, then: |
//! | bonus | … and main is not a bare wrapper around aux | +1.0 |
//! | penalty | … and main has a bare `aux (x)` statement | −0.5 |
//!
//! The maximum is 4.0. Sums are taken in the reference's order, in `f64`, so the values are
//! bit-identical to Python's.
use crate::level;

/// What happened to one extracted test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestStatus {
    /// Not reached: the program did not load, 3 tests timed out before, or the run ended.
    NotRun,
    /// The assert held.
    Passed,
    /// An exception (an assert, an error) or a failure to format the values.
    Failed,
    /// The per-test timeout (SIGALRM) fired.
    TimedOut,
}

/// The sandbox's account of a run of the harness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Execution {
    /// Whether the joint program parsed; `None` if the harness never said.
    pub syntax_ok: Option<bool>,
    /// Whether defining the program (running its top level) succeeded.
    pub loaded: bool,
    /// One entry per test that reported, by index.
    pub tests: Vec<(usize, TestStatus)>,
    /// The test loop finished and its fraction counts.
    pub added: bool,
    /// The harness reached its end.
    pub done: bool,
}

impl Execution {
    /// Parses the harness's fd-3 report (unknown lines are ignored).
    pub fn parse(report: &str) -> Execution {
        let mut e = Execution::default();
        for line in report.lines() {
            let mut w = line.split(' ');
            let (Some(word), arg) = (w.next(), w.next()) else {
                continue;
            };
            let index = || arg.and_then(|a| a.parse::<usize>().ok());
            match word {
                "syntax" => e.syntax_ok = Some(arg == Some("1")),
                "loaded" => e.loaded = true,
                "pass" | "fail" | "timeout" => {
                    if let Some(i) = index() {
                        let s = match word {
                            "pass" => TestStatus::Passed,
                            "fail" => TestStatus::Failed,
                            _ => TestStatus::TimedOut,
                        };
                        e.tests.push((i, s));
                    }
                }
                "added" => e.added = true,
                "done" => e.done = true,
                _ => {}
            }
        }
        e
    }

    /// Tests counted as passed (the reference's `passed_tests`).
    pub fn passed(&self) -> usize {
        self.tests
            .iter()
            .filter(|(_, s)| *s == TestStatus::Passed)
            .count()
    }
}

/// The scored outcome of one joint sample, with what each level saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The level reward (0 … 4).
    pub reward: f64,
    /// Level 1: aux defined with a return.
    pub aux_defined: bool,
    /// Level 1: main defined with a return.
    pub main_defined: bool,
    /// Level 2: the joint program parsed (`None`: not reached).
    pub syntax_ok: Option<bool>,
    /// The extracted asserts (with the entry point in place of `candidate`).
    pub tests: Vec<String>,
    /// Per test, what happened.
    pub statuses: Vec<TestStatus>,
    /// Whether the test fraction was added.
    pub test_reward_added: bool,
    /// Bonus: main calls aux.
    pub uses_aux: bool,
    /// Bonus withheld: main is a bare wrapper.
    pub wrapper: bool,
    /// Penalty: a bare `aux (x)` statement.
    pub ignored_aux: bool,
    /// The joint program that was run (empty before level 2).
    pub program: String,
}

impl Outcome {
    /// Whether every test passed (the "pass" of pass@1).
    pub fn all_passed(&self) -> bool {
        !self.statuses.is_empty() && self.statuses.iter().all(|s| *s == TestStatus::Passed)
    }
}

/// Scores one joint sample. `run(program, tests)` executes the joint program in the sandbox
/// (parse, define, run the tests) and returns what it reported.
pub fn score<E>(
    prompt: &str,
    aux: &str,
    main: &str,
    test_code: &str,
    entry_point: &str,
    run: impl FnOnce(&str, &[String]) -> Result<Execution, E>,
) -> Result<Outcome, E> {
    let mut reward = 0.0f64;
    let imports = level::extract_imports(prompt);
    let aux_func = level::extract_function(aux, "aux");
    let main_func = level::extract_function(main, entry_point);
    let mut out = Outcome {
        reward,
        aux_defined: level::defines_with_return(aux, "aux"),
        main_defined: level::defines_with_return(main, entry_point),
        syntax_ok: None,
        tests: Vec::new(),
        statuses: Vec::new(),
        test_reward_added: false,
        uses_aux: false,
        wrapper: false,
        ignored_aux: false,
        program: String::new(),
    };
    if out.aux_defined {
        reward += 0.4;
    }
    if !out.main_defined {
        out.reward = reward;
        return Ok(out);
    }
    reward += 0.6;
    let program = level::concatenate(&aux_func, &main_func, &imports);
    let tests = level::extract_tests(test_code, entry_point);
    let exec = run(&program, &tests)?;
    out.program = program;
    out.syntax_ok = Some(exec.syntax_ok == Some(true));
    if exec.syntax_ok != Some(true) {
        out.reward = reward;
        out.tests = tests;
        return Ok(out);
    }
    reward += 0.5;
    if tests.is_empty() {
        out.reward = reward;
        return Ok(out);
    }
    let mut statuses = vec![TestStatus::NotRun; tests.len()];
    for &(i, s) in &exec.tests {
        if let Some(slot) = statuses.get_mut(i) {
            *slot = s;
        }
    }
    let passed = exec.passed();
    if exec.added {
        reward += (passed as f64 / tests.len() as f64) * 1.0;
    }
    out.test_reward_added = exec.added;
    if passed > 0 && !aux_func.is_empty() {
        out.uses_aux = level::uses_aux(&main_func);
        if out.uses_aux {
            reward += 0.5;
            out.wrapper = level::is_wrapper(&main_func);
            if !out.wrapper {
                reward += 1.0;
            }
            out.ignored_aux = level::ignores_aux_return(&main_func);
            if out.ignored_aux {
                reward -= 0.5;
            }
        }
    }
    out.reward = reward;
    out.tests = tests;
    out.statuses = statuses;
    Ok(out)
}
