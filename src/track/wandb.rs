//! Weights & Biases over its HTTP API, as W&B's older Python client spoke it (there is no usable
//! Rust SDK): the GraphQL mutation `upsertBucket` creates or resumes the run with the resolved
//! scenario as its config, `POST /files/<entity>/<project>/<run>/file_stream` streams
//! `wandb-history.jsonl` rows (each with `_step`, `_runtime`, `_timestamp`; the row's line in
//! `metrics.jsonl` is its offset, so sending a row twice keeps one) and `wandb-summary.json`,
//! sends heartbeats, and finally `{"complete": true, "exitcode": N}` marks the run finished (0)
//! or failed. The sampled completions of a row go up first as a table file (`createRunFiles`
//! for an upload URL, then a PUT; see [`super::wandb_table`]) that the history row names. The
//! run's id is kept in `<output_dir>/wandb-run.json` for `--resume` and `comlrl wandb-sync`.
use super::wandb_auth as auth;
use super::wandb_table::{completions_table, table_file};
use super::{track_error, Record, Tracker, WandbSettings, Warn};
use crate::error::{Error, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file in the output directory that remembers the W&B run.
pub const RUN_FILE: &str = "wandb-run.json";
const HISTORY: &str = "wandb-history.jsonl";
const SUMMARY: &str = "wandb-summary.json";
/// Attempts per request when the server refuses the connection or answers 429/5xx.
const ATTEMPTS: u32 = 3;
/// Attempts per request when the server does not answer in time: one retry, so a server that
/// accepts connections and never answers costs two timeouts, not minutes.
const SILENT_ATTEMPTS: u32 = 2;
/// Connecting (name lookup and TCP/TLS setup) may take this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Each read from and write to the server may wait this long: a server that stops answering
/// is given up on after it, whatever the size of the request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// One whole request, upload of a large body included, may take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// History rows per `file_stream` request when uploading a whole run.
const SYNC_CHUNK: usize = 500;

const UPSERT: &str = "mutation UpsertBucket($name: String, $project: String, $entity: String, \
$displayName: String, $config: JSONString, $tags: [String!], $program: String) { \
upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, \
displayName: $displayName, config: $config, tags: $tags, jobProgram: $program}) { \
bucket { id name displayName project { name entity { name } } } } }";

/// The SDK's mutation for upload URLs of run files (wandb 0.31.0, `wandb-core` and
/// `wandb/apis/public/runs.py`).
const CREATE_RUN_FILES: &str = "mutation CreateRunFiles($entity: String!, $project: String!, \
$run: String!, $files: [String!]!) { createRunFiles(input: {entityName: $entity, \
projectName: $project, runName: $run, files: $files}) { runID uploadHeaders \
files { name uploadUrl } } }";

/// The history key of the `logging.completions` table (the TensorBoard text tag too).
pub const COMPLETIONS_KEY: &str = "completions";

#[derive(Clone, Copy)]
enum Verb {
    Post,
    Put,
}

/// The W&B server and the key to talk to it with.
pub struct Connection {
    /// Server URL (`https://api.wandb.ai` unless set).
    pub base_url: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

impl Connection {
    /// `WANDB_BASE_URL` and `WANDB_API_KEY` / netrc, as the Python client reads them.
    pub fn from_env() -> Self {
        let base = auth::base_url(std::env::var("WANDB_BASE_URL").ok());
        let netrc = auth::netrc_path().and_then(|p| std::fs::read_to_string(p).ok());
        let key = auth::api_key(
            std::env::var("WANDB_API_KEY").ok(),
            netrc,
            auth::host(&base),
        );
        Self::new(base, key)
    }

    /// A connection to `base_url`, authenticated with `api_key` when given.
    pub fn new(base_url: String, api_key: Option<String>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(READ_TIMEOUT))
            .timeout_per_write(Some(READ_TIMEOUT))
            .timeout_per_call(Some(CALL_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(concat!("comlrl/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            base_url,
            api_key,
            agent,
        }
    }

    /// POSTs JSON, retrying refused connections and 429/5xx answers ([`ATTEMPTS`] tries) and
    /// a server that does not answer in time ([`SILENT_ATTEMPTS`] tries); returns the JSON
    /// answer.
    fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let key = self.key()?;
        let url = format!("{}{path}", self.base_url);
        let auth = [("Authorization".to_string(), auth::basic_auth(key))];
        let answer = self.send_bytes(
            Verb::Post,
            &url,
            &auth,
            "application/json",
            body.to_string().as_bytes(),
        )?;
        serde_json::from_str(&answer).or_else(|_| {
            if answer.trim().is_empty() {
                Ok(Value::Null)
            } else {
                Err(track_error(format!(
                    "W&B: {url} answered non-JSON: {}",
                    clip(&answer)
                )))
            }
        })
    }

    fn key(&self) -> Result<&str> {
        self.api_key.as_deref().ok_or_else(|| {
            track_error(
                "W&B: no API key (set WANDB_API_KEY, or run `wandb login` to write ~/.netrc)",
            )
        })
    }

    /// Sends `body` to `url` with `headers`, with the retries of [`Connection::post`];
    /// returns the answer's text.
    fn send_bytes(
        &self,
        verb: Verb,
        url: &str,
        headers: &[(String, String)],
        content_type: &str,
        body: &[u8],
    ) -> Result<String> {
        let mut last = String::new();
        let (mut tries, mut silent) = (0, 0);
        while tries < ATTEMPTS && silent < SILENT_ATTEMPTS {
            if tries > 0 {
                std::thread::sleep(Duration::from_secs(1 << (tries - 1)));
            }
            tries += 1;
            let mut req = match verb {
                Verb::Post => self.agent.post(url),
                Verb::Put => self.agent.put(url),
            };
            for (k, v) in headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let sent = req.header("Content-Type", content_type).send(body);
            let mut resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    if matches!(e, ureq::Error::Timeout(_)) {
                        silent += 1;
                    }
                    last = unreachable(url, &e);
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let answer = match resp.body_mut().read_to_string() {
                Ok(a) => a,
                Err(e) => {
                    if matches!(e, ureq::Error::Timeout(_)) {
                        silent += 1;
                    }
                    last = format!(
                        "{url} answered HTTP {status} but its body did not arrive ({})",
                        why(&e)
                    );
                    continue;
                }
            };
            match status {
                200..=299 => return Ok(answer),
                401 | 403 => {
                    return Err(track_error(format!(
                        "W&B rejected the API key (HTTP {status} from {url}); check WANDB_API_KEY or `wandb login`"
                    )))
                }
                429 | 500..=599 => last = format!("{url} answered HTTP {status}: {}", clip(&answer)),
                _ => {
                    return Err(track_error(format!(
                        "W&B: {url} answered HTTP {status}: {}",
                        clip(&answer)
                    )))
                }
            }
        }
        let tried = if tries == 1 {
            "1 try".to_string()
        } else {
            format!("{tries} tries")
        };
        Err(track_error(format!(
            "W&B: {last} ({tried}); check the server (WANDB_BASE_URL) and the network"
        )))
    }

    /// Creates the run `spec.id` (or updates it when it exists) and returns where it lives.
    pub fn upsert_run(&self, spec: &RunSpec) -> Result<RunRef> {
        let vars = json!({
            "name": spec.id,
            "project": spec.settings.project,
            "entity": spec.settings.entity,
            "displayName": spec.settings.name,
            "config": config_json(&spec.scenario_yaml).to_string(),
            "tags": spec.settings.tags,
            "program": "comlrl",
        });
        let answer = self.graphql(UPSERT, vars, "the run")?;
        let bucket = &answer["data"]["upsertBucket"]["bucket"];
        let entity = bucket["project"]["entity"]["name"]
            .as_str()
            .map(str::to_string)
            .or_else(|| spec.settings.entity.clone())
            .ok_or_else(|| {
                track_error(
                    "W&B: the server did not say which entity the run is in; set --wandb-entity",
                )
            })?;
        let project = bucket["project"]["name"]
            .as_str()
            .unwrap_or(&spec.settings.project)
            .to_string();
        let id = bucket["name"].as_str().unwrap_or(&spec.id).to_string();
        let url = format!("{}/{entity}/{project}/runs/{id}", app_url(&self.base_url));
        Ok(RunRef {
            id,
            entity,
            project,
            url,
        })
    }

    /// A GraphQL request; an answer with `errors` is W&B refusing `what`.
    fn graphql(&self, query: &str, vars: Value, what: &str) -> Result<Value> {
        let answer = self.post("/graphql", &json!({"query": query, "variables": vars}))?;
        if let Some(errs) = answer.get("errors").and_then(Value::as_array) {
            let msgs: Vec<&str> = errs
                .iter()
                .filter_map(|e| e.get("message").and_then(Value::as_str))
                .collect();
            return Err(track_error(format!(
                "W&B refused {what}: {}",
                msgs.join("; ")
            )));
        }
        Ok(answer)
    }

    /// Uploads `bytes` as the run file `name` (a path under the run's files, such as
    /// `media/table/...`), as the SDK does: `createRunFiles` answers an upload URL and headers,
    /// then the file is PUT there.
    pub fn upload_file(&self, run: &RunRef, name: &str, bytes: &[u8]) -> Result<()> {
        let vars = json!({
            "entity": run.entity, "project": run.project, "run": run.id, "files": [name],
        });
        let what = format!("the upload of {name}");
        let answer = self.graphql(CREATE_RUN_FILES, vars, &what)?;
        let created = &answer["data"]["createRunFiles"];
        let url = created["files"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["name"].as_str() == Some(name))
            .and_then(|f| f["uploadUrl"].as_str())
            .ok_or_else(|| {
                track_error(format!("W&B: createRunFiles gave no upload URL for {name}"))
            })?;
        let mut headers: Vec<(String, String)> = created["uploadHeaders"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str()?.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        // A relative URL is the W&B server itself (local installs), which wants the key; a
        // storage bucket's signed URL must not get it.
        let url = if url.starts_with('/') {
            headers.push(("Authorization".into(), auth::basic_auth(self.key()?)));
            format!("{}{url}", self.base_url)
        } else {
            url.to_string()
        };
        let kind = if name.ends_with(".json") {
            "application/json"
        } else {
            "application/octet-stream"
        };
        self.send_bytes(Verb::Put, &url, &headers, kind, bytes)
            .map(|_| ())
    }

    /// One `file_stream` request for `run`.
    pub fn file_stream(&self, run: &RunRef, body: &Value) -> Result<()> {
        let path = format!(
            "/files/{}/{}/{}/file_stream",
            encode(&run.entity),
            encode(&run.project),
            encode(&run.id)
        );
        self.post(&path, body).map(|_| ())
    }
}

/// What to create on W&B.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Run id.
    pub id: String,
    /// Project, entity, name and tags.
    pub settings: WandbSettings,
    /// The resolved scenario, sent as the run config.
    pub scenario_yaml: String,
}

/// A run on W&B (the contents of `wandb-run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    /// Run id.
    pub id: String,
    /// Entity that owns the run.
    pub entity: String,
    /// Project of the run.
    pub project: String,
    /// The run's web page.
    pub url: String,
}

impl RunRef {
    /// The run remembered in `output_dir`, if it is in `settings`' project (and entity).
    pub fn load(output_dir: &Path, settings: &WandbSettings) -> Option<RunRef> {
        let text = std::fs::read_to_string(output_dir.join(RUN_FILE)).ok()?;
        let r: RunRef = serde_json::from_str(&text).ok()?;
        let same_entity = settings.entity.as_ref().is_none_or(|e| *e == r.entity);
        (r.project == settings.project && same_entity).then_some(r)
    }

    /// Remembers this run in `output_dir` (for `--resume`).
    pub fn save(&self, output_dir: &Path) -> Result<()> {
        let path = output_dir.join(RUN_FILE);
        let text =
            serde_json::to_string_pretty(self).map_err(|e| track_error(format!("W&B: {e}")))?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(path, e))
    }
}

/// A new run id: 8 characters of `[a-z0-9]`, like W&B's.
pub fn new_run_id() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// The run config: each top-level scenario key as `{"value": ...}` (W&B's config layout), plus
/// the resolved scenario text itself under `scenario_yaml`.
pub fn config_json(scenario_yaml: &str) -> Value {
    let mut map = Map::new();
    if let Ok(Value::Object(top)) = serde_norway::from_str::<Value>(scenario_yaml) {
        for (k, v) in top {
            map.insert(k, json!({ "value": v }));
        }
    }
    map.insert("scenario_yaml".into(), json!({ "value": scenario_yaml }));
    Value::Object(map)
}

/// One `wandb-history.jsonl` line, with `media` (values that name uploaded files).
pub fn history_line(r: &Record, media: &Map<String, Value>) -> String {
    let mut m = Map::new();
    for (k, v) in &r.values {
        m.insert(k.clone(), json!(v));
    }
    m.extend(media.clone());
    m.insert("_step".into(), json!(r.step));
    m.insert("_runtime".into(), json!(r.runtime));
    m.insert("_timestamp".into(), json!(r.timestamp));
    Value::Object(m).to_string()
}

/// `file_stream` bodies for `records`: one per run of consecutive offsets, each with the
/// summary (latest value of every metric) folded in so far.
fn history_bodies(
    records: &[Record],
    media: &[Map<String, Value>],
    summary: &mut Map<String, Value>,
    chunk: usize,
) -> Vec<Value> {
    let mut bodies = vec![];
    let mut start = 0;
    while start < records.len() {
        let mut end = start + 1;
        while end < records.len()
            && end - start < chunk
            && records[end].index == records[end - 1].index + 1
        {
            end += 1;
        }
        let part = &records[start..end];
        let part_media = &media[start..end];
        for (r, m) in part.iter().zip(part_media) {
            for (k, v) in &r.values {
                summary.insert(k.clone(), json!(v));
            }
            summary.extend(m.clone());
            summary.insert("_step".into(), json!(r.step));
            summary.insert("_runtime".into(), json!(r.runtime));
            summary.insert("_timestamp".into(), json!(r.timestamp));
        }
        let lines: Vec<String> = part
            .iter()
            .zip(part_media)
            .map(|(r, m)| history_line(r, m))
            .collect();
        let mut body = json!({"files": {
            HISTORY: {"offset": part[0].index, "content": lines},
            SUMMARY: {"offset": 0, "content": [Value::Object(summary.clone()).to_string()]},
        }});
        // The run files these rows name were uploaded: the SDK's file stream says so in
        // `uploaded` (wandb-core's `uploaded,omitempty`), which marks them done on the server.
        let uploaded: Vec<&Value> = part_media
            .iter()
            .flat_map(|m| m.values())
            .filter_map(|v| v.get("path"))
            .collect();
        if !uploaded.is_empty() {
            body["uploaded"] = json!(uploaded);
        }
        bodies.push(body);
        start = end;
    }
    bodies
}

/// Uploads each record's samples as a table file; returns, per record, the history values
/// that name the files (empty for records without samples).
fn upload_media(
    conn: &Connection,
    run: &RunRef,
    records: &[Record],
) -> Result<Vec<Map<String, Value>>> {
    records
        .iter()
        .map(|r| {
            let mut m = Map::new();
            if !r.samples.is_empty() {
                let file = table_file(COMPLETIONS_KEY, r.step, &completions_table(&r.samples));
                conn.upload_file(run, &file.name, &file.bytes)?;
                m.insert(COMPLETIONS_KEY.into(), file.value);
            }
            Ok(m)
        })
        .collect()
}

/// The live W&B tracker of `comlrl run --wandb`.
pub struct WandbTracker {
    conn: Connection,
    settings: WandbSettings,
    output_dir: PathBuf,
    scenario_yaml: String,
    resume: bool,
    note: Warn,
    run: Option<RunRef>,
    summary: Map<String, Value>,
}

impl WandbTracker {
    /// A tracker for `settings`; nothing is sent until the run starts.
    pub fn new(
        conn: Connection,
        settings: WandbSettings,
        output_dir: &Path,
        scenario_yaml: &str,
        resume: bool,
        note: Warn,
    ) -> Self {
        Self {
            conn,
            settings,
            output_dir: output_dir.to_path_buf(),
            scenario_yaml: scenario_yaml.to_string(),
            resume,
            note,
            run: None,
            summary: Map::new(),
        }
    }

    /// Adds what happens next to an error, for the one warning the user sees.
    fn offline(&self, e: Error) -> Error {
        track_error(format!(
            "{}; W&B is off for this run, training goes on and metrics.jsonl keeps every row \
             (upload it later with `comlrl wandb-sync {}`)",
            e.chain(),
            self.output_dir.display()
        ))
    }

    fn send(&mut self, records: &[Record]) -> Result<()> {
        let run = self.run.clone().ok_or_else(|| track_error("W&B: no run"))?;
        let media = upload_media(&self.conn, &run, records)?;
        for body in history_bodies(records, &media, &mut self.summary, SYNC_CHUNK) {
            self.conn.file_stream(&run, &body)?;
        }
        Ok(())
    }
}

impl Tracker for WandbTracker {
    fn name(&self) -> &'static str {
        "W&B"
    }

    fn open(&mut self, prior: &[Record]) -> Result<()> {
        let id = self
            .resume
            .then(|| RunRef::load(&self.output_dir, &self.settings))
            .flatten()
            .map(|r| r.id)
            .unwrap_or_else(new_run_id);
        let spec = RunSpec {
            id,
            settings: self.settings.clone(),
            scenario_yaml: self.scenario_yaml.clone(),
        };
        let run = self.conn.upsert_run(&spec).map_err(|e| self.offline(e))?;
        run.save(&self.output_dir).map_err(|e| self.offline(e))?;
        (self.note)(&format!("W&B: logging to {}", run.url));
        self.run = Some(run);
        // On resume, rows from before the checkpoint (perhaps never sent) go first.
        self.send(prior).map_err(|e| self.offline(e))
    }

    fn log(&mut self, records: &[Record]) -> Result<()> {
        self.send(records).map_err(|e| self.offline(e))
    }

    fn idle(&mut self) -> Result<()> {
        let run = self.run.clone().ok_or_else(|| track_error("W&B: no run"))?;
        self.conn
            .file_stream(&run, &json!({"complete": false, "failed": false}))
            .map_err(|e| self.offline(e))
    }

    fn finish(&mut self, exit_code: i32) -> Result<()> {
        let run = self.run.clone().ok_or_else(|| track_error("W&B: no run"))?;
        self.conn
            .file_stream(&run, &json!({"complete": true, "exitcode": exit_code}))
            .map_err(|e| self.offline(e))
    }

    fn min_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn catch_up(&self) -> Option<String> {
        Some(format!(
            "`comlrl wandb-sync {}` uploads the run from metrics.jsonl",
            self.output_dir.display()
        ))
    }
}

/// Uploads a whole run from its records (`comlrl wandb-sync`): creates or resumes the run,
/// sends every row and the summary, and marks it finished with `exit_code`.
pub fn sync(
    conn: &Connection,
    spec: &RunSpec,
    records: &[Record],
    exit_code: i32,
) -> Result<RunRef> {
    let run = conn.upsert_run(spec)?;
    let media = upload_media(conn, &run, records)?;
    let mut summary = Map::new();
    for body in history_bodies(records, &media, &mut summary, SYNC_CHUNK) {
        conn.file_stream(&run, &body)?;
    }
    conn.file_stream(&run, &json!({"complete": true, "exitcode": exit_code}))?;
    Ok(run)
}

/// Why a request did not get through, in words (timeouts say which limit ran out).
fn why(e: &ureq::Error) -> String {
    use ureq::Timeout as T;
    match e {
        ureq::Error::Timeout(T::Resolve | T::Connect) => {
            format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())
        }
        ureq::Error::Timeout(T::PerCall | T::Global) => {
            format!("the request took longer than {} s", CALL_TIMEOUT.as_secs())
        }
        ureq::Error::Timeout(_) => format!(
            "the server accepted the connection but did not answer within {} s",
            READ_TIMEOUT.as_secs()
        ),
        other => other.to_string(),
    }
}

/// The message of a request that did not get through.
fn unreachable(url: &str, e: &ureq::Error) -> String {
    format!("cannot reach {url} ({})", why(e))
}

/// The web app of an API URL (`https://api.wandb.ai` → `https://wandb.ai`).
fn app_url(base: &str) -> String {
    match base.split_once("://api.") {
        Some((scheme, rest)) => format!("{scheme}://{rest}"),
        None => base.to_string(),
    }
}

/// Percent-encodes a URL path segment.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn clip(s: &str) -> String {
    let t = s.trim();
    match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(index: usize, step: u64, v: f64) -> Record {
        Record {
            index,
            step,
            runtime: step as f64,
            timestamp: 1000.0 + step as f64,
            values: vec![("reward_mean".into(), v)],
            texts: vec![],
            samples: vec![],
        }
    }

    #[test]
    fn history_is_split_where_offsets_jump_and_summary_keeps_the_latest() {
        let recs = [rec(0, 2, 1.0), rec(1, 4, 2.0), rec(3, 8, 4.0)];
        let mut summary = Map::new();
        let bodies = history_bodies(&recs, &vec![Map::new(); recs.len()], &mut summary, 500);
        assert_eq!(bodies.len(), 2);
        assert_eq!(bodies[0]["files"][HISTORY]["offset"], 0);
        assert_eq!(bodies[1]["files"][HISTORY]["offset"], 3);
        let line: Value =
            serde_json::from_str(bodies[0]["files"][HISTORY]["content"][1].as_str().unwrap())
                .unwrap();
        assert_eq!(line["_step"], 4);
        assert_eq!(line["reward_mean"], 2.0);
        assert_eq!(line["_timestamp"], 1004.0);
        assert_eq!(summary["reward_mean"], 4.0);
        assert_eq!(summary["_step"], 8);
    }

    #[test]
    fn config_wraps_each_scenario_section_and_keeps_the_text() {
        let yaml = "name: demo\ntrainer:\n  num_train_epochs: 2\n";
        let c = config_json(yaml);
        assert_eq!(c["trainer"]["value"]["num_train_epochs"], 2);
        assert_eq!(c["name"]["value"], "demo");
        assert_eq!(c["scenario_yaml"]["value"], yaml);
    }

    #[test]
    fn urls_and_ids() {
        assert_eq!(app_url("https://api.wandb.ai"), "https://wandb.ai");
        assert_eq!(app_url("http://127.0.0.1:9"), "http://127.0.0.1:9");
        assert_eq!(encode("my team/x"), "my%20team%2Fx");
        let id = new_run_id();
        assert_eq!(id.len(), 8);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }
}
