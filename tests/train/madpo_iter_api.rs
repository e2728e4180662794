//! The `api` comparator of `madpo_iter` against a mock OpenAI-compatible endpoint started in the
//! test (a std `TcpListener` on 127.0.0.1:0, one thread per connection): a round of the small
//! tiny scenario whose comparator candidates come from it, the key read from the environment
//! variable the scenario names and sent in the header, never written to the run directory or
//! the output; a request that outlives `comparator_api_timeout` is retried; an error status
//! stops the run with an error naming the status, not the key. Under
//! `comparator_generation_mode: centralized` one request per prompt asks for both agents'
//! outputs in CoMLRL's tagged sections, and the answers are split into them.
use common::tiny_run::small;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;

const KEY_VAR: &str = "COMLRL_TEST_COMPARATOR_KEY";
const KEY: &str = "sk-test-7c1f0e9d42";

/// What the mock does with the request it receives (0-based, in arrival order).
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers every request with `n` chat choices.
    Answer,
    /// Holds the first request past the client's timeout, then answers the others.
    SlowFirst,
    /// Answers HTTP 401.
    Reject,
    /// Answers every request with `n` choices of tagged sections for two agents.
    Tagged,
}

/// One request as received: its headers (lower-cased names) and JSON body.
struct Seen {
    headers: Vec<(String, String)>,
    body: Value,
}

/// A mock endpoint; its URL and what it has seen.
fn serve(behaviour: Behaviour) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || handle(stream, i, behaviour, &log));
        }
    });
    (url, seen)
}

fn handle(stream: TcpStream, index: usize, behaviour: Behaviour, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = Vec::new();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let n = body["n"].as_u64().unwrap_or(1) as usize;
    log.lock().unwrap().push(Seen { headers, body });
    let (status, answer) = match behaviour {
        Behaviour::Reject => (401, json!({"error": {"message": "invalid key"}})),
        Behaviour::Tagged => {
            let choices: Vec<Value> = (0..n)
                .map(|i| {
                    let a = "A cloud city. ".repeat(i + 1);
                    let b = "A cloud city floats. ".repeat(2 * i + 1);
                    let text = format!("<agent_0>\n{a}\n</agent_0>\n<agent_1>{b}</agent_1>");
                    json!({"index": i, "message": {"role": "assistant", "content": text}})
                })
                .collect();
            (200, json!({"choices": choices}))
        }
        Behaviour::SlowFirst if index == 0 => {
            std::thread::sleep(Duration::from_millis(2500));
            (200, json!({"choices": []}))
        }
        _ => {
            let choices: Vec<Value> = (0..n)
                .map(|i| {
                    // Answers of different lengths, so the length reward ranks them.
                    let text = "Once upon a time there was a cloud. ".repeat(i + 1);
                    json!({"index": i, "message": {"role": "assistant", "content": text}})
                })
                .collect();
            (200, json!({"choices": choices}))
        }
    };
    let text = answer.to_string();
    let mut out = stream;
    let _ = write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// The api settings of a one-round run against `url`.
fn api_sets(url: &str) -> Vec<String> {
    [
        "trainer.algorithm=madpo_iter",
        "preference.num_candidates=4",
        "preference.num_iterations=1",
        "preference.comparator_policy=api",
        "preference.comparator_api_model=mock-model",
        "preference.comparator_api_max_n_per_request=3",
        "preference.comparator_api_timeout=1",
        "preference.comparator_api_retries=1",
        "trainer.train_batch_size=4",
        "logging.steps=10",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("preference.comparator_api_url={url}"),
        format!("preference.comparator_api_key_env={KEY_VAR}"),
    ])
    .collect()
}

/// Whether any file under `dir` holds `needle`.
fn any_file_holds(dir: &Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            any_file_holds(&p, needle)
        } else {
            std::fs::read(&p)
                .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        }
    })
}

#[test]
fn a_round_compares_with_the_endpoints_answers() {
    let (url, seen) = serve(Behaviour::SlowFirst);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stdout, stderr) = small(&out, &api_sets(&url))
        .env(KEY_VAR, KEY)
        .output()
        .parts();
    assert!(ok, "{stderr}");
    let seen = seen.lock().unwrap();
    // 10 prompts × 2 agents × (3 + 1 candidates), and the first request once more.
    assert_eq!(seen.len(), 10 * 2 * 2 + 1);
    for s in seen.iter() {
        let auth = s.headers.iter().find(|(k, _)| k == "authorization");
        assert_eq!(
            auth.map(|(_, v)| v.as_str()),
            Some(&*format!("Bearer {KEY}"))
        );
        assert_eq!(s.body["model"], "mock-model");
        assert_eq!(s.body["messages"][0]["role"], "user");
        assert!(s.body["n"] == 3 || s.body["n"] == 1, "{}", s.body);
        assert!(s.body["max_tokens"].as_u64().unwrap() > 0);
    }
    let rows = common::tiny_run::metrics_without_timing(&out);
    let pairs = rows[0]["agent_0/iter_round_pairs"].as_f64().unwrap();
    assert!(pairs > 0.0, "{:?}", rows[0]);
    assert!(rows[0]["agent_0/loss"].as_f64().unwrap().is_finite());
    // The key is nowhere but in the request headers.
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    assert!(
        !any_file_holds(&out, KEY),
        "the key was written under {}",
        out.display()
    );
    assert!(
        any_file_holds(&out, KEY_VAR),
        "the variable's name is in the resolved scenario"
    );
}

#[test]
fn an_error_status_stops_the_run_without_the_key() {
    let (url, _) = serve(Behaviour::Reject);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stdout, stderr) = small(&out, &api_sets(&url))
        .env(KEY_VAR, KEY)
        .output()
        .parts();
    assert!(!ok);
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("invalid key"),
        "{stderr}"
    );
    assert!(stderr.contains(&url), "{stderr}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "{stderr}");
}

#[test]
fn a_missing_key_variable_is_named() {
    let (url, seen) = serve(Behaviour::Answer);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, _, stderr) = small(&out, &api_sets(&url))
        .env_remove(KEY_VAR)
        .output()
        .parts();
    assert!(!ok);
    assert!(
        stderr.contains(KEY_VAR) && stderr.contains("not set"),
        "{stderr}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "no request without the key"
    );
}

#[test]
fn a_centralized_comparator_answers_every_agent_in_one_request() {
    let (url, seen) = serve(Behaviour::Tagged);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut sets = api_sets(&url);
    sets.push("preference.comparator_generation_mode=centralized".into());
    sets.push("preference.comparator_centralized_agent_index=1".into());
    let (ok, _, stderr) = small(&out, &sets).env(KEY_VAR, KEY).output().parts();
    assert!(ok, "{stderr}");
    let seen = seen.lock().unwrap();
    // 10 prompts × (3 + 1 candidates): one request per prompt and batch, for both agents.
    assert_eq!(seen.len(), 10 * 2);
    for s in seen.iter() {
        let prompt = s.body["messages"][0]["content"].as_str().unwrap();
        assert!(
            prompt.starts_with(
                "You are a centralized coordinator producing the separate outputs of 2 agents."
            ) && prompt.contains("Agent 0 original prompt:\n")
                && prompt.contains("Agent 1 original prompt:\n")
                && prompt.ends_with("<agent_1>\n...\n</agent_1>\n"),
            "{prompt}"
        );
    }
    let rows = common::tiny_run::metrics_without_timing(&out);
    assert!(rows[0]["agent_0/iter_round_pairs"].as_f64().unwrap() > 0.0);
}
