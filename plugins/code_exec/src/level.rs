//! The text side of the level reward, ported from OpenMLRL/LLM_Collab_Code_Generation at the
//! pinned commit ([`crate::PINNED_COMMIT`]), `rewards/code_utils.py`: cleaning a completion down
//! to its function definitions, extracting one function, the definition check, joining imports,
//! aux and main, extracting the test asserts, and the three collaboration checks (uses aux, is a
//! wrapper, ignores aux's return value).
//!
//! Python's `re` and `str` differ from Rust's in a few character classes; the helpers below
//! reproduce Python's: `\s` is `str.isspace` (Unicode White_Space plus U+001C..U+001F), `\w` is
//! letters, numbers and `_`, `strip()` strips `isspace` characters, and indentation is counted
//! in characters, not bytes.
use regex::Regex;
use std::sync::OnceLock;

/// Python's `\s` inside a character class (Rust's `\s` lacks U+001C..U+001F).
const S: &str = r"\s\x1C-\x1F";
/// Python's `\w` inside a character class.
const W: &str = r"\p{L}\p{N}_";

/// Python's `str.isspace`.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// Python's `str.lstrip()`.
fn py_lstrip(s: &str) -> &str {
    s.trim_start_matches(py_isspace)
}

/// `len(line) - len(line.lstrip())`: leading whitespace in characters.
fn indent_chars(line: &str) -> usize {
    line.chars().count() - py_lstrip(line).chars().count()
}

/// Compiles a pattern written with `{S}` / `{W}` placeholders for Python's classes.
fn compile(pattern: &str) -> Regex {
    let p = pattern.replace("{S}", S).replace("{W}", W);
    Regex::new(&p).unwrap_or_else(|e| panic!("built-in pattern {p:?}: {e}"))
}

macro_rules! pattern {
    ($name:ident, $p:expr) => {
        fn $name() -> &'static Regex {
            static R: OnceLock<Regex> = OnceLock::new();
            R.get_or_init(|| compile($p))
        }
    };
}

pattern!(re_def_start, r"^[{S}]*def[{S}]+[{W}]+[{S}]*\(");
pattern!(re_has_def, r"def[{S}]+[{W}]+[{S}]*\(");
pattern!(re_fence_python, r"```python[{S}]*\n?");
pattern!(re_fence, r"```[{S}]*\n?");
pattern!(re_prose, r"^[A-Z][a-z].*[.!?:]$");
pattern!(re_return, r"return[{S}]+");
pattern!(re_import_from, r"^from[{S}]+[{W}\.]+[{S}]+import[{S}]+.*$");
pattern!(re_import, r"^import[{S}]+[{W}\.,{S}]+$");
pattern!(
    re_t_direct,
    r"^assert[{S}]+candidate\([^)]*\)[{S}]*==[{S}]*[^\n]+"
);
pattern!(
    re_t_abs,
    r"^assert[{S}]+abs\(candidate\([^)]*\)[{S}]*-[{S}]*[^)]+\)[{S}]*<[{S}]*[^\n]+"
);
pattern!(
    re_t_fabs,
    r"^assert[{S}]+math\.fabs\([^)]*candidate[^)]*\)[{S}]*<[{S}]*[^\n]+"
);
pattern!(re_t_general, r"^assert[{S}]+[^\n]*candidate[^\n]*");
// `\baux\s*\(`: `aux` after a non-word character or at the start.
pattern!(re_uses_aux, r"(?:^|[^{W}])aux[{S}]*\(");
pattern!(re_assign_aux, r"=[{S}]*aux[{S}]*\(");
pattern!(re_expr_aux, r"(?:^|[^{W}])aux[{S}]*\([^)]*\)");
pattern!(re_wrapper_assign, r"([{W}]+)[{S}]*=[{S}]*aux[{S}]*\(");
// The ignored-return patterns as the pinned commit writes them: one whitespace character
// between `aux` and `(`, and exactly one argument character.
pattern!(re_ignored_call, r"aux[{S}]\([^)]\)");
pattern!(re_ignored_bad1, r"^aux[{S}]\([^)]\)$");
pattern!(re_ignored_bad2, r"^aux[{S}]\([^)]\);?[{S}]$");
pattern!(re_ignored_bad3, r"^[{S}]aux[{S}]\([^)]\)[{S}]*$");

/// `^(\s*)def\s+{name}\s*\(` for a given function name.
fn def_of(name: &str) -> Option<Regex> {
    Regex::new(&format!(r"^[{S}]*def[{S}]+{}[{S}]*\(", regex::escape(name))).ok()
}

/// `extract_imports_from_prompt`: the prompt's import lines, stripped, deduplicated in order.
pub fn extract_imports(prompt: &str) -> String {
    if prompt.is_empty() {
        return String::new();
    }
    let mut seen: Vec<&str> = Vec::new();
    for line in prompt.split('\n') {
        let line = py_strip(line);
        if (re_import_from().is_match(line) || re_import().is_match(line)) && !seen.contains(&line)
        {
            seen.push(line);
        }
    }
    seen.join("\n")
}

/// `cleanup_code`: the function definitions of a completion, markdown fences and prose lines
/// removed; empty when no `def name(` is left.
pub fn cleanup_code(code: &str) -> String {
    if code.is_empty() {
        return String::new();
    }
    let code = re_fence_python().replace_all(code, "");
    let code = re_fence().replace_all(&code, "");
    let lines: Vec<&str> = code.split('\n').collect();
    let mut blocks: Vec<String> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut in_function = false;
    let mut base_indent = 0usize;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let stripped = py_strip(line);
        if re_def_start().is_match(line) {
            if in_function && !current.is_empty() {
                blocks.push(current.join("\n"));
            }
            current = vec![line];
            in_function = true;
            base_indent = indent_chars(line);
        } else if in_function {
            // A blank line, or one indented deeper than the `def`, belongs to the function.
            if stripped.is_empty()
                || line.starts_with(&" ".repeat(base_indent + 1))
                || line.starts_with('\t')
            {
                current.push(line);
            } else if stripped.starts_with("\"\"\"") || stripped.starts_with("'''") {
                current.push(line);
                let quote = if stripped.starts_with("\"\"\"") {
                    "\"\"\""
                } else {
                    "'''"
                };
                if !(stripped.ends_with(quote) && stripped.chars().count() > 3) {
                    i += 1;
                    while i < lines.len() {
                        current.push(lines[i]);
                        if lines[i].contains(quote) {
                            break;
                        }
                        i += 1;
                    }
                }
            } else {
                if !current.is_empty() {
                    blocks.push(current.join("\n"));
                }
                current = Vec::new();
                in_function = false;
                if re_def_start().is_match(line) {
                    current = vec![line];
                    in_function = true;
                    base_indent = indent_chars(line);
                }
            }
        }
        i += 1;
    }
    if in_function && !current.is_empty() {
        blocks.push(current.join("\n"));
    }
    let result = blocks.join("\n\n");
    const KEYWORDS: [&str; 10] = [
        "def ", "return ", "if ", "for ", "while ", "=", "(", ")", "[", "]",
    ];
    let kept: Vec<&str> = result
        .split('\n')
        .filter(|line| {
            let s = py_strip(line);
            let prose = !s.is_empty()
                && !s.starts_with('#')
                && !s.starts_with("\"\"\"")
                && !s.starts_with("'''")
                && !KEYWORDS.iter().any(|k| line.contains(k))
                && re_prose().is_match(s);
            !prose
        })
        .collect();
    let result = py_strip(&kept.join("\n")).to_string();
    if !re_has_def().is_match(&result) {
        return String::new();
    }
    result
}

/// `extract_specific_function`: the definition of `name` in the cleaned code (to the first
/// line indented no deeper than its `def`), stripped; empty when absent.
pub fn extract_function(code: &str, name: &str) -> String {
    if code.is_empty() || name.is_empty() {
        return String::new();
    }
    let Some(def_re) = def_of(name) else {
        return String::new();
    };
    let cleaned = cleanup_code(code);
    let mut lines: Vec<&str> = Vec::new();
    let mut inside = false;
    let mut base_indent = 0usize;
    for line in cleaned.split('\n') {
        if def_re.is_match(line) {
            lines = vec![line];
            inside = true;
            base_indent = indent_chars(line);
        } else if inside {
            if py_strip(line).is_empty()
                || line.starts_with(&" ".repeat(base_indent + 1))
                || line.starts_with('\t')
            {
                lines.push(line);
            } else {
                break;
            }
        }
    }
    py_strip(&lines.join("\n")).to_string()
}

/// `check_function_definition`: `name` is defined and its text has `return` followed by
/// whitespace.
pub fn defines_with_return(code: &str, name: &str) -> bool {
    let f = extract_function(code, name);
    !f.is_empty() && re_return().is_match(&f)
}

/// `concatenate_functions`: imports, cleaned aux, cleaned main, joined by blank lines.
pub fn concatenate(aux: &str, main: &str, imports: &str) -> String {
    let aux = cleanup_code(aux);
    let main = cleanup_code(main);
    let parts: Vec<&str> = [imports, aux.as_str(), main.as_str()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    parts.join("\n\n")
}

/// `extract_test_cases`: the assert lines of `def check(candidate):` that mention `candidate`,
/// deduplicated in order, with `candidate` replaced by the entry point.
pub fn extract_tests(test_code: &str, entry_point: &str) -> Vec<String> {
    if test_code.is_empty() || entry_point.is_empty() {
        return Vec::new();
    }
    const HEAD: &str = "def check(candidate):";
    let Some(at) = test_code.find(HEAD) else {
        return Vec::new();
    };
    let rest = &test_code[at + HEAD.len()..];
    // `(.*?)(?=\n\ndef|\Z)` with DOTALL: up to the first "\n\ndef", else to the end.
    let body = rest.find("\n\ndef").map_or(rest, |end| &rest[..end]);
    let mut found: Vec<&str> = Vec::new();
    for line in py_strip(body).split('\n') {
        let line = py_strip(line);
        if !(line.starts_with("assert") && line.contains("candidate")) {
            continue;
        }
        let specific =
            re_t_direct().is_match(line) || re_t_abs().is_match(line) || re_t_fabs().is_match(line);
        if (specific || re_t_general().is_match(line)) && !found.contains(&line) {
            found.push(line);
        }
    }
    found
        .into_iter()
        .map(|l| l.replace("candidate", entry_point))
        .collect()
}

/// `check_aux_function_usage(main, "aux")`.
pub fn uses_aux(main: &str) -> bool {
    !main.is_empty()
        && (re_uses_aux().is_match(main)
            || re_assign_aux().is_match(main)
            || re_expr_aux().is_match(main))
}

/// `is_wrapper_function(main, "aux")`: the body (docstrings, comments, blank lines and `def`
/// lines left out) is empty, one `return …aux…` line, or `v = aux(…)` then `return v`.
pub fn is_wrapper(main: &str) -> bool {
    if main.is_empty() {
        return false;
    }
    let mut code: Vec<&str> = Vec::new();
    let mut in_doc = false;
    for line in main.split('\n') {
        let s = py_strip(line);
        if s.is_empty() {
            continue;
        }
        if s.starts_with("\"\"\"") || s.starts_with("'''") {
            let quote = if s.starts_with("\"\"\"") {
                "\"\"\""
            } else {
                "'''"
            };
            if !(s.ends_with(quote) && s.chars().count() > 3) {
                in_doc = true;
            }
            continue;
        } else if in_doc {
            if s.contains("\"\"\"") || s.contains("'''") {
                in_doc = false;
            }
            continue;
        }
        if s.starts_with('#') || s.starts_with("def ") {
            continue;
        }
        code.push(s);
    }
    match code.as_slice() {
        [] => true,
        [line] => line.starts_with("return ") && line.contains("aux"),
        [first, second] => re_wrapper_assign()
            .captures(first)
            .is_some_and(|c| *second == format!("return {}", &c[1])),
        _ => false,
    }
}

/// `check_aux_call_without_assignment(main, "aux")`: some line is a bare `aux (x)` call
/// (the pinned patterns: one whitespace, one argument character).
pub fn ignores_aux_return(main: &str) -> bool {
    if main.is_empty() || !main.contains("aux") {
        return false;
    }
    main.split('\n').map(py_strip).any(|s| {
        !s.is_empty()
            && !s.starts_with('#')
            && re_ignored_call().is_match(s)
            && (re_ignored_bad1().is_match(s)
                || re_ignored_bad2().is_match(s)
                || re_ignored_bad3().is_match(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_keeps_functions_and_drops_prose() {
        let c = "Here is the code:\n```python\ndef aux(x):\n    return x + 1\n```\nThis adds one.";
        assert_eq!(cleanup_code(c), "def aux(x):\n    return x + 1");
        assert_eq!(cleanup_code("no functions here"), "");
    }

    #[test]
    fn tests_are_extracted_up_to_the_next_def() {
        let t = "\n\nMETA = {}\n\n\ndef check(candidate):\n    assert candidate(1) == 2\n    assert candidate(1) == 2\n    assert True\n\n\ndef other():\n    assert candidate(3) == 4\n";
        assert_eq!(extract_tests(t, "f"), vec!["assert f(1) == 2"]);
    }

    #[test]
    fn collaboration_checks() {
        assert!(uses_aux("def f(x):\n    return aux(x)"));
        assert!(!uses_aux("def f(x):\n    return my_aux(x)"));
        assert!(is_wrapper("def f(x):\n    return aux(x)"));
        assert!(is_wrapper("def f(x):\n    r = aux(x)\n    return r"));
        assert!(!is_wrapper("def f(x):\n    r = aux(x)\n    return r + 1"));
        assert!(ignores_aux_return("def f(x):\n    aux (x)\n    return 1"));
        assert!(!ignores_aux_return("def f(x):\n    aux(x)\n    return 1"));
    }

    #[test]
    fn python_whitespace() {
        assert!(py_isspace('\u{1c}') && py_isspace('\u{a0}') && !py_isspace('a'));
        assert_eq!(py_strip("\u{1f} x \u{85}"), "x");
    }
}
