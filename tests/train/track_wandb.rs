//! W&B tracking end to end: the real binary trains the tiny scenario against a mock W&B server on
//! 127.0.0.1 (`WANDB_BASE_URL`), which records every request. Checks that the run is created with
//! the resolved scenario as its config, that every logged step arrives once and in order, and
//! that the run is marked finished; with the server down, that training finishes with exactly one
//! warning and `comlrl wandb-sync` uploads the same run afterwards; with a rejected key, that one
//! warning says so; with a server that never answers, that a run and `wandb-sync` give up on it
//! within seconds. With `logging.completions`, that each row's samples arrive as a table file in
//! the SDK's format (and, where the `wandb` package is installed, that it equals the SDK's own).
use crate::common;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const KEY: &str = "test-key-0123456789";

#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    auth: Option<String>,
    headers: Vec<(String, String)>,
    body: Value,
    raw: Vec<u8>,
}

/// A W&B stand-in: answers `upsertBucket` and `createRunFiles` like the real server, takes
/// file uploads (PUT to the upload URL it handed out), and records every request.
struct Mock {
    url: String,
    reqs: Arc<Mutex<Vec<Req>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Mock {
    /// `status` is what every request gets (401 to reject the key).
    fn start(status: u16) -> Mock {
        Mock::start_with(status, false)
    }

    /// Like [`Mock::start`]; with `refuse_uploads`, `createRunFiles` answers a GraphQL error.
    fn start_with(status: u16, refuse_uploads: bool) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let reqs = Arc::new(Mutex::new(vec![]));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s, base) = (reqs.clone(), stop.clone(), url.clone());
        let handle = std::thread::spawn(move || {
            // Bounded: the test stops it, and it gives up on its own after 15 minutes.
            let deadline = Instant::now() + Duration::from_secs(900);
            while !s.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => serve(stream, status, &r, &base, refuse_uploads),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => break,
                }
            }
        });
        Mock {
            url,
            reqs,
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<Req> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        self.reqs.lock().unwrap().clone()
    }
}

/// One request per connection (answered with `Connection: close`).
fn serve(stream: TcpStream, status: u16, reqs: &Mutex<Vec<Req>>, base: &str, refuse_uploads: bool) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let method = line.split_whitespace().next().unwrap_or("").to_string();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut len, mut auth, mut headers) = (0usize, None, vec![]);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap_or(0),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    let mut raw = vec![0u8; len];
    reader.read_exact(&mut raw).unwrap();
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let query = body["query"].as_str().unwrap_or("");
    let answer = if status != 200 {
        r#"{"errors":[{"message":"invalid api key"}]}"#.to_string()
    } else if path == "/graphql" && query.contains("createRunFiles") && refuse_uploads {
        r#"{"errors":[{"message":"storage quota exceeded"}]}"#.to_string()
    } else if path == "/graphql" && query.contains("createRunFiles") {
        // Upload URLs on this server (a stand-in for signed storage URLs) and a header the
        // upload must carry.
        let files: Vec<Value> = body["variables"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let name = f.as_str().unwrap();
                serde_json::json!({"name": name, "uploadUrl": format!("{base}/upload/{name}")})
            })
            .collect();
        serde_json::json!({"data": {"createRunFiles": {
            "runID": "UnVuOjE=", "uploadHeaders": ["X-Upload-Test:yes"], "files": files
        }}})
        .to_string()
    } else if path == "/graphql" {
        let v = &body["variables"];
        let entity = v["entity"].as_str().unwrap_or("default-entity");
        serde_json::json!({"data": {"upsertBucket": {"bucket": {
            "id": "QnVja2V0OjE=", "name": v["name"], "displayName": v["displayName"],
            "project": {"name": v["project"], "entity": {"name": entity}}
        }}}})
        .to_string()
    } else {
        "{}".to_string()
    };
    reqs.lock().unwrap().push(Req {
        method,
        path,
        auth,
        headers,
        body,
        raw,
    });
    let mut out = stream;
    let _ = write!(
        out,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = out.flush();
}

/// Runs the binary with W&B pointed at `base_url`, no proxies, and a HOME without a netrc.
fn wandb_comlrl(args: &[&str], base_url: &str, home: &Path) -> (bool, String) {
    let proxies = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ];
    let out = proxies
        .iter()
        .fold(common::comlrl(args), |c, p| c.env_remove(p))
        .env("WANDB_BASE_URL", base_url)
        .env("WANDB_API_KEY", KEY)
        .env("HOME", home)
        .env_remove("NETRC")
        .output();
    (out.ok, out.stderr)
}

/// `comlrl run` on the tiny scenario, 10 steps, a metrics row every 2.
fn train(out: &Path, extra: &[&str], base_url: &str, home: &Path) -> (bool, String) {
    let out_set = format!("output_dir={}", out.display());
    let scen = common::tiny_scenario();
    let mut args = vec![
        "run",
        scen.to_str().unwrap(),
        "--set",
        "agents.max_new_tokens=16",
        "--set",
        "trainer.num_train_epochs=1",
        "--set",
        "logging.steps=2",
        "--set",
        &out_set,
    ];
    args.extend_from_slice(extra);
    wandb_comlrl(&args, base_url, home)
}

fn metrics(out: &Path) -> Vec<serde_json::Map<String, Value>> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l)
                .unwrap()
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

fn w_and_b_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("w&b") || l.contains("wandb")
        })
        .collect()
}

/// A port nothing listens on.
fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

/// A server that takes connections (the kernel completes them in the listen backlog) and never
/// answers, for as long as the returned listener lives; on 127.0.0.1 only.
fn silent_server() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

/// Everything the mock received must be the run in `out`: created once in `entity/project` with
/// the saved scenario as config, each metrics row once and in order, then finished with 0.
fn check_upload(reqs: &[Req], out: &Path, entity: &str, project: &str) {
    assert!(!reqs.is_empty(), "the mock got no request");
    let expected_auth = format!("Basic {}", b64(format!("api:{KEY}").as_bytes()));
    assert!(
        reqs.iter()
            .all(|r| r.auth.as_deref() == Some(&expected_auth)),
        "every request authenticates"
    );
    // The run: one upsertBucket, first.
    let gql: Vec<&Req> = reqs.iter().filter(|r| r.path == "/graphql").collect();
    assert_eq!(gql.len(), 1, "one upsertBucket");
    assert_eq!(reqs[0].path, "/graphql");
    assert!(gql[0].body["query"]
        .as_str()
        .unwrap()
        .contains("upsertBucket"));
    let vars = &gql[0].body["variables"];
    assert_eq!(vars["project"], project);
    assert_eq!(vars["entity"], entity);
    let id = vars["name"].as_str().unwrap().to_string();
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("wandb-run.json")).unwrap())
            .unwrap();
    assert_eq!(saved["id"], id.as_str());
    // The config is the resolved scenario (the one saved with the checkpoint).
    let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
    let yaml = std::fs::read_to_string(
        out.join("checkpoints")
            .join(latest.trim())
            .join("scenario.yaml"),
    )
    .unwrap();
    let config: Value = serde_json::from_str(vars["config"].as_str().unwrap()).unwrap();
    assert_eq!(config["scenario_yaml"]["value"].as_str().unwrap(), yaml);
    assert_eq!(config["trainer"]["value"]["num_train_epochs"], 1);
    assert_eq!(config["logging"]["value"]["steps"], 2);
    // The stream: history rows at consecutive offsets, in order, equal to metrics.jsonl.
    let stream: Vec<&Req> = reqs[1..].iter().collect();
    let want_path = format!("/files/{entity}/{project}/{id}/file_stream");
    assert!(
        stream.iter().all(|r| r.path == want_path),
        "file_stream path"
    );
    let mut history: Vec<Value> = vec![];
    for r in &stream {
        if let Some(h) = r.body["files"].get("wandb-history.jsonl") {
            assert_eq!(
                h["offset"].as_u64().unwrap() as usize,
                history.len(),
                "offsets follow on"
            );
            for line in h["content"].as_array().unwrap() {
                history.push(serde_json::from_str(line.as_str().unwrap()).unwrap());
            }
        }
    }
    let rows = metrics(out);
    let steps: Vec<u64> = history
        .iter()
        .map(|h| h["_step"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, want, "every logged step once, in order");
    assert_eq!(want, [2, 4, 6, 8, 10]);
    let mut last_runtime = 0.0;
    for (h, row) in history.iter().zip(&rows) {
        for (k, v) in row {
            if k != "step" && !v.is_null() {
                let (g, w) = (h[k].as_f64().unwrap(), v.as_f64().unwrap());
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                    "{k} at step {}: {g} vs {w}",
                    row["step"]
                );
            }
        }
        assert_eq!(h["turn_1/reward_mean"], h["reward_mean"], "CoMLRL name");
        let rt = h["_runtime"].as_f64().unwrap();
        assert!(rt >= last_runtime && h["_timestamp"].as_f64().unwrap() > 1.0e9);
        last_runtime = rt;
    }
    // The summary holds the last row.
    let summary = stream
        .iter()
        .rev()
        .find_map(|r| r.body["files"].get("wandb-summary.json"))
        .expect("a summary");
    let summary: Value = serde_json::from_str(summary["content"][0].as_str().unwrap()).unwrap();
    assert_eq!(summary["_step"], 10);
    assert_eq!(
        summary["reward_mean"].as_f64(),
        rows[4]["reward_mean"].as_f64()
    );
    // Finished exactly once, last, with exit code 0.
    let completes: Vec<&&Req> = stream
        .iter()
        .filter(|r| r.body["complete"] == true)
        .collect();
    assert_eq!(completes.len(), 1);
    assert_eq!(
        stream.last().unwrap().body,
        serde_json::json!({"complete": true, "exitcode": 0})
    );
}

fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            s.push(if i <= c.len() {
                A[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    s
}

#[test]
fn run_streams_to_wandb_and_marks_it_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mock = Mock::start(200);
    let (ok, stderr) = train(
        &out,
        &[
            "--wandb",
            "--wandb-project",
            "proj",
            "--wandb-entity",
            "ent",
            "--wandb-name",
            "tiny-test",
        ],
        &mock.url,
        tmp.path(),
    );
    let reqs = mock.finish();
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("warning: W&B"), "{stderr}");
    assert!(stderr.contains("W&B: logging to"), "{stderr}");
    assert_eq!(reqs[0].body["variables"]["displayName"], "tiny-test");
    check_upload(&reqs, &out, "ent", "proj");
}

#[test]
fn server_down_warns_once_and_wandb_sync_uploads_later() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (ok, stderr) = train(&out, &["--wandb", "--quiet"], &dead_url(), tmp.path());
    assert!(ok, "training must finish without W&B: {stderr}");
    let lines = w_and_b_lines(&stderr);
    assert_eq!(lines.len(), 1, "exactly one W&B line: {stderr}");
    assert!(
        lines[0].starts_with("warning: W&B") && lines[0].contains("wandb-sync"),
        "{}",
        lines[0]
    );
    let steps: Vec<u64> = metrics(&out)
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [2, 4, 6, 8, 10], "metrics.jsonl is complete");
    assert!(!out.join("wandb-run.json").exists());

    // Later, with W&B back: upload the run from metrics.jsonl (project from the flag).
    let mock = Mock::start(200);
    let (ok, stderr) = wandb_comlrl(
        &[
            "wandb-sync",
            out.to_str().unwrap(),
            "--wandb-entity",
            "team",
            "--wandb-project",
            "later",
        ],
        &mock.url,
        tmp.path(),
    );
    let reqs = mock.finish();
    assert!(ok, "{stderr}");
    assert!(stderr.contains("uploaded 5 rows"), "{stderr}");
    check_upload(&reqs, &out, "team", "later");
    // The display name defaults to the scenario name.
    assert_eq!(
        reqs[0].body["variables"]["displayName"],
        "story_len_ratio_tiny"
    );
}

#[test]
fn a_rejected_key_warns_once_and_training_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mock = Mock::start(401);
    let (ok, stderr) = train(
        &out,
        &["--set", "logging.wandb.project=p"],
        &mock.url,
        tmp.path(),
    );
    let reqs = mock.finish();
    assert!(ok, "{stderr}");
    let lines = w_and_b_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("rejected the API key"), "{}", lines[0]);
    assert_eq!(
        reqs.len(),
        1,
        "no retry of a rejected key, nothing streamed"
    );
    assert_eq!(metrics(&out).len(), 5);
}

#[test]
fn resume_continues_the_same_wandb_run_and_tensorboard_log() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let flags = [
        "--wandb",
        "--wandb-entity",
        "ent",
        "--set",
        "logging.tensorboard=true",
    ];
    let first = Mock::start(200);
    let (ok, stderr) = train(&out, &flags, &first.url, tmp.path());
    let first = first.finish();
    assert!(ok, "{stderr}");
    let id = first[0].body["variables"]["name"]
        .as_str()
        .unwrap()
        .to_string();

    // A second epoch on top of the first: the same W&B run, rows 6..10 after rows 1..5.
    let second = Mock::start(200);
    let mut more = flags.to_vec();
    more.extend(["--resume", "--set", "trainer.num_train_epochs=2"]);
    let (ok, stderr) = train(&out, &more, &second.url, tmp.path());
    let reqs = second.finish();
    assert!(ok, "{stderr}");
    assert_eq!(
        reqs[0].body["variables"]["name"],
        id.as_str(),
        "same run id"
    );
    let mut history = vec![];
    for r in &reqs[1..] {
        if let Some(h) = r.body["files"].get("wandb-history.jsonl") {
            let offset = h["offset"].as_u64().unwrap() as usize;
            for (i, line) in h["content"].as_array().unwrap().iter().enumerate() {
                let v: Value = serde_json::from_str(line.as_str().unwrap()).unwrap();
                history.push((offset + i, v["_step"].as_u64().unwrap()));
            }
        }
    }
    let want: Vec<(usize, u64)> = (0..10).map(|i| (i, 2 * (i as u64 + 1))).collect();
    assert_eq!(
        history, want,
        "earlier rows, then the new ones, each at its line"
    );
    assert_eq!(
        reqs.last().unwrap().body,
        serde_json::json!({"complete": true, "exitcode": 0})
    );

    // TensorBoard: two files; reward_mean at every logged step once.
    let log = comlrl::track::tensorboard::read_dir(&out.join("tb")).unwrap();
    assert_eq!(log.file_versions.len(), 2);
    let steps: Vec<u64> = log
        .scalars
        .iter()
        .filter(|s| s.tag == "reward_mean")
        .map(|s| s.step)
        .collect();
    assert_eq!(steps, (1..=10).map(|i| 2 * i).collect::<Vec<u64>>());
}

#[test]
fn a_silent_server_costs_seconds_not_minutes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (listener, url) = silent_server();
    let t = Instant::now();
    let (ok, stderr) = train(&out, &["--wandb", "--quiet"], &url, tmp.path());
    let took = t.elapsed();
    assert!(ok, "training must finish without W&B: {stderr}");
    let lines = w_and_b_lines(&stderr);
    assert_eq!(lines.len(), 1, "exactly one W&B line: {stderr}");
    assert!(
        lines[0].starts_with("warning: W&B") && lines[0].contains("wandb-sync"),
        "{}",
        lines[0]
    );
    // A few seconds of training, then at most the bounded wait for the tracker: well under a
    // minute, whatever the silent server does.
    assert!(took < Duration::from_secs(45), "the run took {took:?}");
    assert_eq!(metrics(&out).len(), 5, "metrics.jsonl is complete");

    let t = Instant::now();
    let (ok, stderr) = wandb_comlrl(&["wandb-sync", out.to_str().unwrap()], &url, tmp.path());
    let took = t.elapsed();
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach {url}/graphql"))
            && stderr.contains("did not answer within 5 s")
            && stderr.contains("2 tries")
            && stderr.contains("WANDB_BASE_URL"),
        "{stderr}"
    );
    // Two tries of 5 s and a pause of 1 s.
    assert!(took < Duration::from_secs(20), "wandb-sync took {took:?}");
    eprintln!("wandb-sync against a silent server failed after {took:?}");
    drop(listener);
}

/// The completions tables in `reqs`: for each history row with a `completions` value, the
/// value, the createRunFiles request that asked for its upload URL, and the uploaded bytes.
fn tables(reqs: &[Req]) -> Vec<(u64, Value, Vec<u8>)> {
    let mut out = vec![];
    for r in reqs {
        let Some(h) = r.body["files"].get("wandb-history.jsonl") else {
            continue;
        };
        for line in h["content"].as_array().unwrap() {
            let row: Value = serde_json::from_str(line.as_str().unwrap()).unwrap();
            let Some(v) = row.get("completions") else {
                continue;
            };
            let path = v["path"].as_str().unwrap();
            // The upload URL was asked for this run file, and the file was PUT there before
            // the row that names it was streamed.
            let at = |want: &dyn Fn(&Req) -> bool| reqs.iter().position(want);
            let asked = at(&|q: &Req| {
                q.body["query"]
                    .as_str()
                    .is_some_and(|t| t.contains("createRunFiles"))
                    && q.body["variables"]["files"] == serde_json::json!([path])
            })
            .expect("createRunFiles for the table");
            let put = at(&|q: &Req| q.method == "PUT" && q.path == format!("/upload/{path}"))
                .expect("the table file uploaded");
            let streamed = at(&|q: &Req| std::ptr::eq(q, r)).unwrap();
            assert!(asked < put && put < streamed, "ask, upload, then stream");
            let put = &reqs[put];
            assert!(put
                .headers
                .contains(&("x-upload-test".to_string(), "yes".to_string())));
            assert_eq!(put.auth, None, "no W&B key to a storage URL");
            let uploaded = r.body["uploaded"]
                .as_array()
                .expect("uploaded files listed");
            assert!(
                uploaded.contains(&v["path"]),
                "the stream says it was uploaded"
            );
            out.push((row["_step"].as_u64().unwrap(), v.clone(), put.raw.clone()));
        }
    }
    out
}

/// Checks the tables against `completions.jsonl` and the metrics rows: one per row, holding
/// that row's window's samples, in the SDK's table-file format.
fn check_tables(reqs: &[Req], out: &Path) {
    use sha2::{Digest, Sha256};
    let samples: Vec<Value> = std::fs::read_to_string(out.join("completions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<u64> = metrics(out)
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    let tables = tables(reqs);
    assert_eq!(
        tables.iter().map(|t| t.0).collect::<Vec<_>>(),
        steps,
        "a table with every row"
    );
    let mut prev = 0;
    for (step, v, bytes) in &tables {
        let sha = format!("{:x}", Sha256::digest(bytes));
        assert_eq!(v["_type"], "table-file");
        assert_eq!(v["sha256"], sha.as_str());
        assert_eq!(v["size"].as_u64().unwrap() as usize, bytes.len());
        assert_eq!(
            v["path"],
            format!("media/table/completions_{step}_{}.table.json", &sha[..20]).as_str()
        );
        let table: Value = serde_json::from_slice(bytes).expect("table JSON");
        let window: Vec<&Value> = samples
            .iter()
            .filter(|s| (prev + 1..=*step).contains(&s["step"].as_u64().unwrap()))
            .collect();
        prev = *step;
        assert!(!window.is_empty());
        let terms: Vec<&String> = window[0]["terms"].as_object().unwrap().keys().collect();
        let mut cols = vec!["step", "turn", "prompt", "agent_0", "agent_1", "reward"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        cols.extend(terms.iter().map(|t| format!("reward/{t}")));
        for i in 0..2 {
            cols.push(format!("agent_{i}/return"));
            cols.push(format!("agent_{i}/advantage"));
        }
        assert_eq!(table["columns"], serde_json::json!(cols));
        assert_eq!(v["ncols"].as_u64().unwrap() as usize, cols.len());
        assert_eq!(v["nrows"].as_u64().unwrap() as usize, window.len());
        let data = table["data"].as_array().unwrap();
        assert_eq!(data.len(), window.len());
        for (row, s) in data.iter().zip(&window) {
            let mut want = vec![s["step"].clone(), s["turn"].clone(), s["prompt"].clone()];
            want.extend(s["completions"].as_array().unwrap().iter().cloned());
            want.push(s["reward"].clone());
            want.extend(terms.iter().map(|t| s["terms"][t.as_str()].clone()));
            for i in 0..2 {
                want.push(s["returns"][i].clone());
                want.push(s["advantages"][i].clone());
            }
            assert_eq!(row, &Value::Array(want));
        }
    }
}

#[test]
fn sampled_completions_go_to_wandb_as_tables_live_and_by_wandb_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mock = Mock::start(200);
    let (ok, stderr) = train(
        &out,
        &["--wandb", "--set", "logging.completions=3"],
        &mock.url,
        tmp.path(),
    );
    let reqs = mock.finish();
    assert!(ok, "{stderr}");
    assert!(!stderr.contains("warning: W&B"), "{stderr}");
    check_tables(&reqs, &out);
    // The W&B key goes to the W&B server only (the upload went to a storage URL without it).
    let expected_auth = format!("Basic {}", b64(format!("api:{KEY}").as_bytes()));
    assert!(reqs
        .iter()
        .filter(|r| r.method == "POST")
        .all(|r| r.auth.as_deref() == Some(&expected_auth)));

    // `wandb-sync` of the finished run sends the tables from completions.jsonl.
    let mock = Mock::start(200);
    let (ok, stderr) = wandb_comlrl(
        &["wandb-sync", out.to_str().unwrap()],
        &mock.url,
        tmp.path(),
    );
    let synced = mock.finish();
    assert!(ok, "{stderr}");
    check_tables(&synced, &out);
    // (Not byte for byte the live files: serde_json reads some floats back from
    // completions.jsonl one ulp off, so a hash may differ; the values are checked above.)
    assert_eq!(tables(&synced).len(), tables(&reqs).len());
}

#[test]
fn a_refused_table_upload_warns_once_and_training_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mock = Mock::start_with(200, true);
    let (ok, stderr) = train(
        &out,
        &["--wandb", "--quiet", "--set", "logging.completions=2"],
        &mock.url,
        tmp.path(),
    );
    let reqs = mock.finish();
    assert!(ok, "training must finish: {stderr}");
    let warnings: Vec<&str> = w_and_b_lines(&stderr)
        .into_iter()
        .filter(|l| l.starts_with("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "one W&B warning: {stderr}");
    assert!(
        warnings[0].contains("storage quota exceeded") && warnings[0].contains("wandb-sync"),
        "{}",
        warnings[0]
    );
    assert!(!reqs.iter().any(|r| r.method == "PUT"));
    let steps: Vec<u64> = metrics(&out)
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [2, 4, 6, 8, 10], "metrics.jsonl is complete");
}

/// Where the `wandb` Python SDK is installed: the table file comlrl uploads is byte for byte the
/// one the SDK writes for the same `wandb.Table`, and the history value has the same fields
/// (less the artifact references comlrl does not make).
#[test]
fn the_table_file_is_the_wandb_sdks() {
    let Some(py) = common::python_with(&["wandb"]) else {
        return;
    };
    use comlrl::track::wandb_table::{completions_table, table_file};
    let samples = vec![
        serde_json::json!({"step": 7, "turn": 1, "prompt": "Say \"hi\"\nin two lines: é ✓",
            "completions": ["hi\nthere", "日本語 😀"], "reward": 0.30000001192092896,
            "terms": {"len_ratio": 1.0, "b": -2.5e-7}, "returns": [0.1, 12.0],
            "advantages": [-1.1849894523620605, null]}),
        serde_json::json!({"step": 8, "turn": 2, "prompt": "", "completions": ["", "x"],
            "reward": 45.11667251586914, "terms": {"len_ratio": 0.0, "b": 3.0},
            "returns": [0.0, 1e20], "advantages": [0.5, 0.25]}),
    ];
    let ours = table_file("completions", 8, &completions_table(&samples));
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
import json, sys, wandb
from wandb.sdk.data_types.utils import val_to_json
t = json.loads(sys.stdin.read())
run = wandb.init(project="p", mode="offline", dir=sys.argv[1])
table = wandb.Table(columns=t["columns"], data=t["data"])
v = val_to_json(run, "completions", table, namespace=8)
data = open(run.dir + "/" + v["path"], "rb").read()
run.finish()
print(json.dumps({"value": v, "file": data.decode("utf-8")}))
"#;
    let mut child = std::process::Command::new(&py)
        .args(["-c", script, tmp.path().to_str().unwrap()])
        .env("WANDB_SILENT", "true")
        .env("WANDB_MODE", "offline")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&completions_table(&samples).to_string().into_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sdk: Value = serde_json::from_slice(
        out.stdout
            .split(|&b| b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        sdk["file"].as_str().unwrap(),
        String::from_utf8(ours.bytes.clone()).unwrap(),
        "the table file"
    );
    let mut v = sdk["value"].as_object().unwrap().clone();
    v.remove("artifact_path");
    v.remove("_latest_artifact_path");
    assert_eq!(Value::Object(v), ours.value, "the history value");
}
