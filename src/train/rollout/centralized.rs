//! CoMLRL 1.4.3's centralized protocol (`TaggedCentralizedComparatorAdapter`, and
//! `CentralizedCollaboration.split`): one policy asked for every agent's output in one answer,
//! which is then split into the agents' outputs. CoMLRL uses it for a centralized comparator
//! (`comparator_generation_mode: centralized`) and a centralized actor (`collaboration_mode:
//! centralized`); this is its deterministic part, the prompt and the split, checked against
//! CoMLRL's own adapter (`tests/train/centralized_protocol.rs`). The centralized actor's prompt
//! is [`joint_template`]: the agents' templates inside the tagged prompt, one template that
//! renders what [`build_prompt`] makes of the rendered ones.
//!
//! The prompt numbers agents from 0 and asks for one `<agent_i>…</agent_i>` section each. The
//! split reads agent i's output as Python's `re.search(r"<\s*agent_i\s*>(.*?)<\s*/\s*agent_i\s*>",
//! completion, IGNORECASE | DOTALL)` does (the first opening tag, then the first closing tag
//! after it), stripped of surrounding whitespace; an agent without a section gets `""`, and an
//! answer with no section at all is every agent's `""` (CoMLRL's parse error, caught).

use comlrl_scenario::Template;

/// The one prompt asking for every agent's output, from each agent's own prompt (its template,
/// no chat template).
pub fn build_prompt(agent_prompts: &[&str]) -> String {
    let n = agent_prompts.len();
    let prompts = agent_prompts
        .iter()
        .enumerate()
        .map(|(i, p)| format!("Agent {i} original prompt:\n{p}"))
        .collect::<Vec<_>>()
        .join("\n\n");
    let outputs = (0..n)
        .map(|i| format!("<agent_{i}>\n...\n</agent_{i}>"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "You are a centralized coordinator producing the separate outputs of {n} agents.\n\n\
         Each output must satisfy its corresponding original prompt. Keep the outputs separate;\n\
         do not merge them or add commentary outside the required tags.\n\n\
         {prompts}\n\n\
         Return exactly one section for each agent in this format:\n\
         {outputs}\n"
    )
}

/// The one template of a centralized actor: [`build_prompt`] around the agents' templates as
/// written, so that rendering it for a row gives `build_prompt` of each agent's rendered prompt
/// (the tagged prompt's own text has no brace for the template to read).
pub fn joint_template(templates: &[Template]) -> std::result::Result<Template, String> {
    let texts: Vec<&str> = templates.iter().map(Template::as_str).collect();
    Template::parse(&build_prompt(&texts))
}

/// The `agents` outputs of one centralized answer; `None` when it has no agent's section
/// (CoMLRL's `CentralizedComparatorParseError`).
pub fn parse(completion: &str, agents: usize) -> Option<Vec<String>> {
    let outputs: Vec<Option<String>> = (0..agents).map(|i| section(completion, i)).collect();
    if outputs.iter().all(Option::is_none) {
        return None;
    }
    Some(outputs.into_iter().map(Option::unwrap_or_default).collect())
}

/// [`parse`] as CoMLRL's `CentralizedCollaboration.split` uses it: no section at all is every
/// agent's empty output.
pub fn split(completion: &str, agents: usize) -> Vec<String> {
    parse(completion, agents).unwrap_or_else(|| vec![String::new(); agents])
}

/// A centralized comparator's answers split into the agents' outputs, by agent (CoMLRL's
/// `_split_centralized_comparator_outputs`: answer k gives agent i's candidate k), each as
/// [`split`] splits it.
pub fn split_by_agent(answers: &[String], agents: usize) -> Vec<Vec<String>> {
    let mut out = vec![Vec::with_capacity(answers.len()); agents];
    for answer in answers {
        for (agent, text) in split(answer, agents).into_iter().enumerate() {
            out[agent].push(text);
        }
    }
    out
}

/// Python's `\s` and `str.strip()` whitespace: Unicode's, and the separators U+001C–U+001F.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Where the tag `<agent_i>` (`closing`: `</agent_i>`) that starts at byte `at` of `s` ends.
fn tag_end(s: &str, at: usize, i: usize, closing: bool) -> Option<usize> {
    let rest = s[at..].strip_prefix('<')?;
    let mut rest = rest.trim_start_matches(py_space);
    if closing {
        rest = rest.strip_prefix('/')?.trim_start_matches(py_space);
    }
    let name = format!("agent_{i}");
    let head = rest.get(..name.len())?;
    if !head.eq_ignore_ascii_case(&name) {
        return None;
    }
    let rest = rest[name.len()..].trim_start_matches(py_space);
    let rest = rest.strip_prefix('>')?;
    Some(s.len() - rest.len())
}

/// Agent `i`'s section of `s`: between the first opening tag and the first closing tag after
/// it, stripped.
fn section(s: &str, i: usize) -> Option<String> {
    let lts = || s.match_indices('<').map(|(at, _)| at);
    let start = lts().find_map(|at| tag_end(s, at, i, false))?;
    let end = lts()
        .filter(|&at| at >= start)
        .find(|&at| tag_end(s, at, i, true).is_some())?;
    Some(s[start..end].trim_matches(py_space).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_as_pythons_regex_finds_them() {
        let s = "x < Agent_0 >\n a \n</ agent_0>< agent_1>b<agent_1>c</AGENT_1 >";
        assert_eq!(parse(s, 2).unwrap(), ["a", "b<agent_1>c"]);
        // agent_1 does not match agent_12; a missing section is empty.
        assert_eq!(
            parse("<agent_12>x</agent_12><agent_0>y</agent_0>", 2).unwrap(),
            ["y", ""]
        );
        assert_eq!(parse("no tags", 2), None);
        assert_eq!(split("<agent_0>open only", 2), ["", ""]);
    }

    #[test]
    fn the_joint_template_renders_the_joint_prompt() {
        let t: Vec<Template> = ["Say {prompt} {{x}}", "{topic}: {prompt}!"]
            .iter()
            .map(|t| Template::parse(t).unwrap())
            .collect();
        let mut fields = serde_json::Map::new();
        fields.insert("topic".into(), "cats".into());
        let row = comlrl_scenario::Row {
            prompt: "hi {y}".into(),
            fields,
        };
        let rendered: Vec<String> = t.iter().map(|t| t.render(&row)).collect();
        let refs: Vec<&str> = rendered.iter().map(String::as_str).collect();
        assert_eq!(
            joint_template(&t).unwrap().render(&row),
            build_prompt(&refs)
        );
    }
}
