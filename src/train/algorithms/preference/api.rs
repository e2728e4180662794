//! The `api` comparator of iterative MADPO: an OpenAI-compatible chat-completions endpoint
//! (CoMLRL 1.4.3's `comparator_api_format: openai`, `_call_openai_chat_comparator_api`). Per agent
//! and prompt it asks for the comparator's candidates with the agent's prompt (its template, no
//! chat template) as one user message, `n` of them per request (at most
//! `comparator_api_max_n_per_request`), with the agent's `max_new_tokens`, `temperature` and
//! `top_p`, and reads `choices[].message.content` (or `choices[].text`).
//!
//! The key is read from the environment variable `comparator_api_key_env` names, when the request
//! is built: it is never stored in the scenario, a checkpoint, a log line or an error message.
//! Each request waits at most `comparator_api_timeout` seconds; a timeout, a connection failure
//! or an HTTP 429 / 5xx is retried `comparator_api_retries` times (CoMLRL: none); any other
//! status is an error naming the URL, the status and the start of the answer.
use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::time::Duration;

/// The most characters of an endpoint's answer an error message quotes.
const QUOTE: usize = 300;

/// The most bytes an answer may have (a chat completion is text; far below this).
const ANSWER_CAP: u64 = 64 << 20;

/// How to reach the endpoint (`preference.comparator_api_*`).
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// The chat-completions URL.
    pub url: String,
    /// The `model` field of the request (left out when `None`).
    pub model: Option<String>,
    /// Candidates per request (`None`: all of a prompt's at once).
    pub max_n: Option<usize>,
    /// Seconds one request may take.
    pub timeout: f64,
    /// Further tries after a failed one.
    pub retries: usize,
    /// The environment variable that holds the key (`None`: no key sent).
    pub key_env: Option<String>,
    /// The header the key goes in.
    pub key_header: String,
    /// What precedes the key in it (`Bearer`; empty: the key alone).
    pub key_prefix: String,
}

/// One agent's sampling settings a request carries.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    /// `max_tokens`.
    pub max_new_tokens: usize,
    /// `temperature`.
    pub temperature: f64,
    /// `top_p`.
    pub top_p: f64,
}

/// The endpoint's client.
pub struct ApiComparator {
    settings: ApiSettings,
    agent: ureq::Agent,
}

impl ApiComparator {
    /// A client for `settings`.
    pub fn new(settings: ApiSettings) -> Self {
        let t = Duration::from_secs_f64(settings.timeout.max(0.001));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(t))
            .http_status_as_error(false)
            .user_agent(concat!("comlrl/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        ApiComparator { settings, agent }
    }

    /// `n` candidates for `prompt`, with one agent's sampling settings.
    pub fn complete(&self, prompt: &str, n: usize, sampling: Sampling) -> Result<Vec<String>> {
        let max_n = self.settings.max_n.unwrap_or(n).clamp(1, n.max(1));
        let mut out: Vec<String> = Vec::with_capacity(n);
        while out.len() < n {
            let ask = max_n.min(n - out.len());
            let mut body = json!({
                "messages": [{"role": "user", "content": prompt}],
                "n": ask,
                "max_tokens": sampling.max_new_tokens,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
            });
            if let Some(m) = &self.settings.model {
                body["model"] = json!(m);
            }
            let answer = self.send(&body)?;
            let got = completions(&answer);
            if got.is_empty() {
                return Err(Error::Config(format!(
                    "the comparator endpoint {} returned no completions for a request of n={ask}",
                    self.settings.url
                )));
            }
            out.extend(got);
        }
        out.truncate(n);
        Ok(out)
    }

    /// One request, retried as the settings say; the parsed answer.
    fn send(&self, body: &Value) -> Result<Value> {
        let s = &self.settings;
        let key = match &s.key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Error::Config(format!(
                    "preference.comparator_api_key_env names {var}, which is not set (or not \
                     unicode) in the environment: export the endpoint's key there"
                ))
            })?),
            None => None,
        };
        let payload = body.to_string();
        let mut last = String::new();
        for attempt in 0..=s.retries {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200 << (attempt - 1).min(5)));
            }
            let mut req = self
                .agent
                .post(s.url.as_str())
                .header("Content-Type", "application/json");
            if let Some(k) = &key {
                let value = match s.key_prefix.trim() {
                    "" => k.clone(),
                    p => format!("{p} {k}"),
                };
                req = req.header(s.key_header.as_str(), value.as_str());
            }
            let mut resp = match req.send(payload.as_bytes()) {
                Ok(r) => r,
                // A transport failure carries no key: ureq's messages name the host.
                Err(e) => {
                    last = format!("the request failed: {}", transport(&e));
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let text = match resp
                .body_mut()
                .with_config()
                .limit(ANSWER_CAP)
                .read_to_string()
            {
                Ok(t) => t,
                Err(e) => {
                    last = format!(
                        "it answered HTTP {status} but its body did not arrive ({})",
                        transport(&e)
                    );
                    continue;
                }
            };
            match status {
                200..=299 => {
                    return serde_json::from_str(&text).map_err(|e| {
                        Error::Config(format!(
                            "the comparator endpoint {} answered with something not JSON ({e}): {}",
                            s.url,
                            quote(&text)
                        ))
                    })
                }
                429 | 500..=599 => last = format!("it answered HTTP {status}: {}", quote(&text)),
                _ => {
                    return Err(Error::Config(format!(
                        "the comparator endpoint {} answered HTTP {status}: {}; check \
                         preference.comparator_api_url, _model and the key in the variable \
                         comparator_api_key_env names",
                        s.url,
                        quote(&text)
                    )))
                }
            }
        }
        Err(Error::Config(format!(
            "the comparator endpoint {} did not answer after {} tries (preference.comparator_api_retries \
             {}, timeout {} s): {last}",
            s.url,
            s.retries + 1,
            s.retries,
            s.timeout
        )))
    }
}

/// The texts of an OpenAI chat-completions answer (CoMLRL `_extract_openai_chat_completions`).
fn completions(answer: &Value) -> Vec<String> {
    let Some(choices) = answer.get("choices").and_then(Value::as_array) else {
        return Vec::new();
    };
    choices
        .iter()
        .filter_map(|c| {
            let content = c.get("message").and_then(|m| m.get("content"));
            match content.filter(|v| !v.is_null()).or_else(|| c.get("text")) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) if !v.is_null() => Some(v.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// A ureq failure in words (timeouts say so).
fn transport(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "timed out".into(),
        other => other.to_string(),
    }
}

/// The start of an answer, for an error message.
fn quote(text: &str) -> String {
    let t: String = text.chars().take(QUOTE).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}
