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
        /// The prompt being wrapped (its first 80 characters, `…` marking a cut).
        prompt: String,
        /// The renderer's error.
        #[source]
        source: JinjaError,
    },
    /// The template used up its step budget ([`RENDER_FUEL`]) on one prompt.
    #[error(
        "chat template {name} used up its budget of {RENDER_FUEL} steps rendering one prompt \
         ({prompt_bytes} bytes){}: a step is one instruction or 64 bytes of text built, and a \
         chat template renders a prompt in a few thousand, so this one loops far too long \
         (nested `range` loops?) or builds too much text; fix it, or set `chat_template: none`",
        line(source)
    )]
    OutOfSteps {
        /// The template's name (its file or origin).
        name: String,
        /// The length of the prompt (and system prompt) it was rendering, in bytes.
        prompt_bytes: usize,
        /// The renderer's error.
        #[source]
        source: JinjaError,
    },
    /// The rendered prompt is longer than [`MAX_RENDERED_BYTES`].
    #[error(
        "chat template {name} rendered more than {} for one prompt ({prompt_bytes} bytes): \
         no model takes a prompt that long; fix the template's loops or what it repeats, or \
         shorten the prompt",
        crate::files::bytes(MAX_RENDERED_BYTES as u64)
    )]
    TooLong {
        /// The template's name (its file or origin).
        name: String,
        /// The length of the prompt (and system prompt) it was rendering, in bytes.
        prompt_bytes: usize,
    },
}

/// The step budget of one render (minijinja's fuel): one step per instruction and per 64 bytes
/// of text a template creates or filters (so it bounds the memory of a render too, to about 64
/// bytes a step: 256 MB). A chat template renders a prompt in a few thousand steps and copies
/// the prompt a few times; 4 million leave room for any of them on a prompt up to
/// [`MAX_RENDERED_BYTES`] and stop a runaway loop in well under a second.
pub const RENDER_FUEL: u64 = 4_000_000;

/// The most bytes one rendered prompt may have: 16 MiB, about four million tokens, beyond the
/// context window of any model, so only a runaway template (or prompt) reaches it.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// The template's line in a minijinja error, as ` (template line N)`.
fn line(e: &JinjaError) -> String {
    e.line()
        .map(|l| format!(" (template line {l})"))
        .unwrap_or_default()
}

/// The first 80 characters of `s`, `…` marking a cut (a prompt shown in an error).
fn shorten(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// An output buffer that refuses to grow past `cap` bytes.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
    over: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
        env.set_fuel(Some(RENDER_FUEL));
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
        let too_big = "it is not a tokenizer config (check the model directory)";
        let cfg_text =
            crate::files::read_text(&cfg_path, crate::files::MAX_TOKENIZER_CONFIG_BYTES, too_big);
        let cfg: Json = match cfg_text {
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
        // Present in any form (a FIFO, a device, a dangling symlink): read, so that it is refused
        // by name rather than silently passed over for tokenizer_config.json's template.
        let (name, source) = if std::fs::symlink_metadata(&jinja).is_ok() {
            let text = read_template(&jinja)?;
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
        let prompt_bytes = prompt.len() + system.map_or(0, str::len);
        let mut out = Capped {
            buf: Vec::new(),
            cap: MAX_RENDERED_BYTES,
            over: false,
        };
        let rendered = self
            .env
            .get_template(MAIN)
            .and_then(|t| t.render_captured_to(Value::from(ctx), &mut out));
        let name = self.name.clone();
        match rendered {
            Ok(_) => {}
            Err(_) if out.over => return Err(ChatTemplateError::TooLong { name, prompt_bytes }),
            Err(source) if source.kind() == JinjaKind::OutOfFuel => {
                return Err(ChatTemplateError::OutOfSteps {
                    name,
                    prompt_bytes,
                    source,
                })
            }
            Err(source) => {
                return Err(ChatTemplateError::Render {
                    name,
                    prompt: shorten(prompt),
                    source,
                })
            }
        }
        String::from_utf8(out.buf).map_err(|e| ChatTemplateError::Render {
            name: self.name.clone(),
            prompt: shorten(prompt),
            source: JinjaError::new(JinjaKind::InvalidOperation, e.to_string()),
        })
    }
}

/// A chat template file's text (a regular file of at most [`crate::files::MAX_TEMPLATE_BYTES`]).
pub(crate) fn read_template(path: &Path) -> Result<String, ChatTemplateError> {
    crate::files::read_text(
        path,
        crate::files::MAX_TEMPLATE_BYTES,
        "it is not a chat template (point to the `.jinja` file)",
    )
    .map_err(|source| ChatTemplateError::Read {
        path: path.to_path_buf(),
        source,
    })
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

    /// The model templates of the fixtures (Qwen2.5's, Llama 3.1's with tool calling) render a
    /// prompt with a system prompt in a small share of [`RENDER_FUEL`], and a prompt just under
    /// [`MAX_RENDERED_BYTES`] within it.
    #[test]
    fn real_templates_fit_the_budget_with_room() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let long = "word ".repeat((MAX_RENDERED_BYTES - 65536) / 5);
        for dir in ["qwen25-tokenizer", "chat_templates/llama31"] {
            let mut t = ChatTemplate::from_model_dir(&fixtures.join(dir))
                .expect("reads")
                .expect("has a template");
            let rendered = t
                .render(Some(&long[..4000]), &long)
                .expect("a long prompt renders");
            assert!(rendered.len() > long.len(), "{dir}");
            t.env.set_fuel(Some(RENDER_FUEL / 1000));
            t.render(
                Some("You are a helpful assistant."),
                "Describe a city in the clouds:",
            )
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        }
    }

    #[test]
    fn runaway_templates_stop_with_their_name() {
        let started = std::time::Instant::now();
        let loops = "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}";
        let e = ChatTemplate::new("loops.jinja", loops)
            .expect("compiles")
            .render(None, "p")
            .unwrap_err();
        assert!(matches!(e, ChatTemplateError::OutOfSteps { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("chat template loops.jinja used up its budget"),
            "{e}"
        );
        // Text doubled 40 times: few steps, but each byte built is charged.
        let doubling = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
        let e = ChatTemplate::new("dbl.jinja", doubling)
            .expect("compiles")
            .render(None, "p")
            .unwrap_err();
        assert!(matches!(e, ChatTemplateError::OutOfSteps { .. }), "{e}");
        let big = "{{ 'x' * 100000000 }}{{ messages[0].content }}";
        let e = ChatTemplate::new("big.jinja", big)
            .expect("compiles")
            .render(None, "p")
            .unwrap_err();
        assert!(matches!(e, ChatTemplateError::TooLong { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("big.jinja rendered more than 16 MiB"),
            "{e}"
        );
        // Not a speed target: a guard that the budgets stop these at all (unbounded, the
        // doubling alone builds a terabyte). The bound is loose because CI machines are shared
        // and a loaded one once took more than 5 s here.
        assert!(started.elapsed().as_secs() < 120, "{:?}", started.elapsed());
    }

    #[test]
    fn a_failing_prompt_is_shown_cut() {
        let e = ChatTemplate::new("t", "{{ raise_exception('no') }}")
            .expect("compiles")
            .render(None, &"y".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(
            e.len() < 300 && e.contains(&format!("{}…", "y".repeat(80))),
            "{e}"
        );
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
