//! Prompt templates: `"Summarize: {prompt}\nAudience: {audience}"` with `{field}` filled from a
//! dataset row (`{prompt}` is the prompt, `{meta.topic}` a nested field; `{{` and `}}` are
//! literal braces).
use crate::data::Row;
use serde_json::Value as Json;

/// A compiled template. The default, `{prompt}`, passes the prompt through unchanged (CoMLRL's
/// default formatter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Prompt,
    Field(String),
}

impl Default for Template {
    fn default() -> Self {
        Template {
            text: "{prompt}".into(),
            parts: vec![Part::Prompt],
        }
    }
}

impl Template {
    /// Compiles `text`; fails on an unclosed `{`, a stray `}` or an empty `{}`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|p| p.1) == Some('{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek().map(|p| p.1) == Some('}') => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let rest = &text[i + 1..];
                    let Some(end) = rest.find('}') else {
                        return Err(format!(
                            "unclosed `{{` at character {}; write `{{{{` for a literal brace",
                            i + 1
                        ));
                    };
                    let name = rest[..end].trim();
                    if name.is_empty() || name.contains('{') {
                        return Err(format!(
                            "bad placeholder `{{{}}}`; placeholders look like `{{prompt}}`",
                            &rest[..end]
                        ));
                    }
                    if !lit.is_empty() {
                        parts.push(Part::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(if name == "prompt" {
                        Part::Prompt
                    } else {
                        Part::Field(name.to_string())
                    });
                    for _ in 0..rest[..=end].chars().count() {
                        chars.next();
                    }
                }
                '}' => {
                    return Err(format!(
                        "stray `}}` at character {}; write `}}}}` for a literal brace",
                        i + 1
                    ))
                }
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template {
            text: text.to_string(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The row fields the template uses (not counting `prompt`).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f.as_str()),
            _ => None,
        })
    }

    /// The prompt for `row`. String fields are inserted as they are, other JSON values in their
    /// compact JSON form, null as nothing.
    pub fn render(&self, row: &Row) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Prompt => out.push_str(&row.prompt),
                Part::Field(f) => match row.field(f) {
                    Some(Json::String(s)) => out.push_str(s),
                    Some(Json::Null) | None => {}
                    Some(other) => out.push_str(&other.to_string()),
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_fields_and_escapes() {
        let t = Template::parse("{{x}} Q: {prompt} ({lang}, {n})").expect("template");
        let mut fields = serde_json::Map::new();
        fields.insert("lang".into(), Json::String("en".into()));
        fields.insert("n".into(), Json::from(3));
        let row = Row {
            prompt: "hi".into(),
            fields,
        };
        assert_eq!(t.render(&row), "{x} Q: hi (en, 3)");
        assert_eq!(t.fields().collect::<Vec<_>>(), vec!["lang", "n"]);
    }

    #[test]
    fn rejects_malformed() {
        assert!(Template::parse("{prompt").is_err());
        assert!(Template::parse("a } b").is_err());
        assert!(Template::parse("{}").is_err());
    }
}
