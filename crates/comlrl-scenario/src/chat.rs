//! Chat templates: a model's Jinja chat template (from `tokenizer_config.json`, a
//! `chat_template.jinja` file, a user's `.jinja` file, or a string a GGUF loader hands over)
//! rendered with minijinja as transformers' `apply_chat_template(messages,
//! add_generation_prompt=True, tokenize=False)` renders it: `trim_blocks`, `lstrip_blocks`, loop
//! controls, `raise_exception`, a Python-style `tojson`, `strftime_now`, Python string and dict
//! methods, and the named special tokens (`bos_token`, `eos_token`, ...) as variables.
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error as JinjaError, ErrorKind as JinjaKind};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The special-token variables transformers passes to a chat template (`special_tokens_map`).
pub const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A tokenizer config is not valid JSON or has no usable `chat_template`.
    #[error("{}: {msg}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The template does not compile.
    #[error("chat template {name} does not compile: {}", detail(source))]
    Syntax {
        /// The template's name (its file or origin).
        name: String,
        /// The compiler's error.
        #[source]
        source: JinjaError,
    },
    /// The template failed to render a prompt.
    #[error(
        "chat template {name} failed to render the prompt {prompt:?}: {}",
        detail(source)
    )]
    Render {
        /// The template's name (its file or origin).
        name: String,
        /// The prompt being wrapped.
        prompt: String,
        /// The renderer's error.
        #[source]
        source: JinjaError,
    },
}

fn detail(e: &JinjaError) -> String {
    match e.line() {
        Some(line) => format!("{e} (template line {line})"),
        None => e.to_string(),
    }
}

/// A compiled chat template plus the special tokens it sees.
#[derive(Debug)]
pub struct ChatTemplate {
    name: String,
    env: Environment<'static>,
    specials: BTreeMap<String, String>,
}

const MAIN: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`; `name` (a file path, or `<model>'s chat template`) names it in errors.
    pub fn new(
        name: impl Into<String>,
        source: impl Into<String>,
    ) -> Result<Self, ChatTemplateError> {
        let name = name.into();
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|source| ChatTemplateError::Syntax {
                name: name.clone(),
                source,
            })?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(MAIN, source.into())
            .map_err(|source| ChatTemplateError::Syntax {
                name: name.clone(),
                source,
            })?;
        Ok(ChatTemplate {
            name,
            env,
            specials: BTreeMap::new(),
        })
    }

    /// Adds special-token variables (`bos_token` = `<|begin_of_text|>`, ...).
    pub fn with_special_tokens<I, K, V>(mut self, tokens: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.specials
            .extend(tokens.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The template of a Hugging Face model directory: `chat_template.jinja` if present, else
    /// `tokenizer_config.json`'s `chat_template` (a string, or a list of named templates of which
    /// `default` is taken), with the special tokens of `tokenizer_config.json`. `Ok(None)`: the
    /// directory has no chat template.
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>, ChatTemplateError> {
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Json = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ChatTemplateError::Config {
                path: cfg_path.clone(),
                msg: format!("invalid JSON: {e}"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Json::Null,
            Err(source) => {
                return Err(ChatTemplateError::Read {
                    path: cfg_path,
                    source,
                })
            }
        };
        let jinja = dir.join("chat_template.jinja");
        let (name, source) = if jinja.is_file() {
            let text =
                std::fs::read_to_string(&jinja).map_err(|source| ChatTemplateError::Read {
                    path: jinja.clone(),
                    source,
                })?;
            (jinja.display().to_string(), text)
        } else {
            match template_in_config(&cfg, &cfg_path)? {
                Some(t) => (format!("{} (chat_template)", cfg_path.display()), t),
                None => return Ok(None),
            }
        };
        Ok(Some(
            Self::new(name, source)?.with_special_tokens(special_tokens(&cfg)),
        ))
    }

    /// The template of a `tokenizer_config.json` value (`chat_template` and the special tokens),
    /// e.g. one built from GGUF metadata; `name` names it in errors. `Ok(None)`: no template.
    pub fn from_tokenizer_config(
        name: &str,
        cfg: &Json,
    ) -> Result<Option<Self>, ChatTemplateError> {
        match template_in_config(cfg, Path::new(name))? {
            Some(t) => Ok(Some(
                Self::new(name, t)?.with_special_tokens(special_tokens(cfg)),
            )),
            None => Ok(None),
        }
    }

    /// The name used in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `[system?, user(prompt)]` rendered with `add_generation_prompt=True`.
    pub fn render(&self, system: Option<&str>, prompt: &str) -> Result<String, ChatTemplateError> {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(message("system", s));
        }
        messages.push(message("user", prompt));
        let mut ctx: BTreeMap<String, Value> = self
            .specials
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        ctx.insert("messages".into(), Value::from(messages));
        ctx.insert("add_generation_prompt".into(), Value::from(true));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        let err = |source| ChatTemplateError::Render {
            name: self.name.clone(),
            prompt: prompt.to_string(),
            source,
        };
        self.env
            .get_template(MAIN)
            .and_then(|t| t.render(Value::from(ctx)))
            .map_err(err)
    }
}

fn message(role: &str, content: &str) -> Value {
    let mut m = BTreeMap::new();
    m.insert("role".to_string(), Value::from(role));
    m.insert("content".to_string(), Value::from(content));
    Value::from(m)
}

fn template_in_config(cfg: &Json, path: &Path) -> Result<Option<String>, ChatTemplateError> {
    match cfg.get("chat_template") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Array(list)) => {
            let named = list.iter().find_map(|t| {
                (t.get("name")?.as_str()? == "default").then(|| t.get("template")?.as_str())?
            });
            named
                .map(|s| Some(s.to_string()))
                .ok_or_else(|| ChatTemplateError::Config {
                    path: path.to_path_buf(),
                    msg: "`chat_template` is a list without a template named `default`".into(),
                })
        }
        Some(other) => Err(ChatTemplateError::Config {
            path: path.to_path_buf(),
            msg: format!("`chat_template` must be a string, found {other}"),
        }),
    }
}

/// The named special tokens of a `tokenizer_config.json` (strings, or `{"content": ...}`).
pub fn special_tokens(cfg: &Json) -> Vec<(String, String)> {
    SPECIAL_TOKENS
        .iter()
        .filter_map(|k| {
            let v = cfg.get(*k)?;
            let s = v
                .as_str()
                .or_else(|| v.get("content").and_then(Json::as_str))?;
            Some((k.to_string(), s.to_string()))
        })
        .collect()
}

fn raise_exception(msg: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(JinjaKind::InvalidOperation, msg))
}

/// Local time in a Python `strftime` format.
fn strftime_now(format: String) -> Result<String, JinjaError> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        JinjaError::new(
            JinjaKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(out)
}

/// Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`,
/// as transformers' `tojson` filter (no HTML escaping, `", "` / `": "` separators).
fn tojson(v: Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<usize> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&v)
        .map_err(|e| JinjaError::new(JinjaKind::InvalidOperation, format!("tojson: {e}")))?;
    let (item, key) = match separators.as_deref() {
        Some([a, b]) => (a.clone(), b.clone()),
        Some(_) => {
            return Err(JinjaError::new(
                JinjaKind::InvalidOperation,
                "tojson: separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = PyJson {
        indent,
        item,
        key,
        sort: sort_keys.unwrap_or(false),
        ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&json, 0, &mut out);
    Ok(Value::from(out))
}

struct PyJson {
    indent: Option<usize>,
    item: String,
    key: String,
    sort: bool,
    ascii: bool,
}

impl PyJson {
    fn write(&self, v: &Json, level: usize, out: &mut String) {
        match v {
            Json::String(s) => self.string(s, out),
            Json::Array(a) if !a.is_empty() => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    self.sep(i, level + 1, out);
                    self.write(x, level + 1, out);
                }
                self.close(level, out);
                out.push(']');
            }
            Json::Object(m) if !m.is_empty() => {
                out.push('{');
                let mut entries: Vec<(&String, &Json)> = m.iter().collect();
                if self.sort {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                for (i, (k, x)) in entries.into_iter().enumerate() {
                    self.sep(i, level + 1, out);
                    self.string(k, out);
                    out.push_str(&self.key);
                    self.write(x, level + 1, out);
                }
                self.close(level, out);
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    fn sep(&self, i: usize, level: usize, out: &mut String) {
        if i > 0 {
            out.push_str(&self.item);
        }
        if let Some(n) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    }

    fn close(&self, level: usize, out: &mut String) {
        if let Some(n) = self.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    }

    fn string(&self, s: &str, out: &mut String) {
        let quoted = Json::String(s.to_string()).to_string();
        if !self.ascii {
            out.push_str(&quoted);
            return;
        }
        for c in quoted.chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str) -> String {
        ChatTemplate::new("t", src)
            .expect("compiles")
            .render(None, "x")
            .expect("renders")
    }

    #[test]
    fn tojson_is_python_json_dumps() {
        let t = r#"{{ {"b": [1, 2.5, "é<>"], "a": none} | tojson }}|{{ [1, {"k": true}] | tojson(indent=2) }}|{{ {"b": 1, "a": 2} | tojson(sort_keys=true, separators=[",", ":"]) }}|{{ "é" | tojson(ensure_ascii=true) }}"#;
        assert_eq!(
            render(t),
            "{\"a\": null, \"b\": [1, 2.5, \"é<>\"]}|[\n  1,\n  {\n    \"k\": true\n  }\n]|{\"a\":2,\"b\":1}|\"\\u00e9\""
        );
    }

    #[test]
    fn strftime_now_formats_local_time() {
        let year = chrono::Local::now().format("%Y").to_string();
        let got = render("{{ strftime_now('%Y') }}");
        // Around midnight on New Year's Eve the year may just have turned.
        let next = (year.parse::<i32>().expect("year") + 1).to_string();
        assert!(got == year || got == next, "{got}");
        let e = ChatTemplate::new("t", "{{ strftime_now('%Q%') }}")
            .expect("compiles")
            .render(None, "p")
            .unwrap_err()
            .to_string();
        assert!(e.contains("strftime_now: bad format"), "{e}");
    }

    #[test]
    fn python_methods_and_raise() {
        assert_eq!(
            render("{{ ' a '.strip() }}{{ 'abc'.startswith('a') }}{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{% endfor %}"),
            "aTrue"
        );
        let e = ChatTemplate::new("t", "{{ raise_exception('no system role') }}")
            .expect("compiles")
            .render(None, "hi")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no system role") && e.contains("\"hi\""), "{e}");
        let e = ChatTemplate::new("my.jinja", "{% if %}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("my.jinja"), "{e}");
    }
}
