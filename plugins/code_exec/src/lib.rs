//! The code-execution joint reward of the MAGRPO paper's coding experiment, as a native comlrl
//! plugin: agent 0 writes a helper `aux`, agent 1 the problem's entry point; the joint program
//! runs with the problem's tests in a sandboxed `python3` process per sample, and the sample
//! scores the level reward (0 … 4) of `execution_reward_aux` in
//! OpenMLRL/LLM_Collab_Code_Generation at [`PINNED_COMMIT`] ([`reward`] has the table).
//!
//! A sample reads the dataset row's `test` and `entry_point` fields (HumanEval's columns) and
//! the row's prompt (its import lines go in front of the program). Samples of a batch are scored
//! in parallel.
//!
//! Params (`params:` of the reward term; all optional):
//!
//! | key | default | meaning |
//! | --- | --- | --- |
//! | `python` | `python3` | the interpreter (a name on `PATH` or a path), resolved once at load |
//! | `test_timeout_s` | 10 | per-test SIGALRM timeout (the reference's `TEST_TIMEOUT`) |
//! | `max_timeouts` | 3 | tests stop after this many timeouts (the reference's `MAX_TIMEOUTS`) |
//! | `wall_timeout_s` | `test_timeout_s × max_timeouts + 10` | wall-clock limit of a sample's process |
//! | `cpu_time_s` | `wall_timeout_s` | `RLIMIT_CPU` |
//! | `memory_mb` | 2048 | `RLIMIT_AS` |
//! | `file_size_mb` | 16 | `RLIMIT_FSIZE` |
//! | `max_processes` | 32 | `pids.max` of the sample's cgroup (and `RLIMIT_NPROC` when not root) |
//! | `output_kib` | 64 | stdout + stderr kept per sample, at most 65536 (the rest is read and dropped) |
//! | `parallelism` | 0 = the available cores | samples run at once, at most 256 |
//! | `read_paths` | `[]` | more paths the program may read (besides the interpreter's and system libraries) |
//! | `strict` | false | fail at load unless Landlock, both namespaces and a pids cgroup are all available |
//! | `layers` | `all` | `all`: every layer the OS offers; `none`: only the rlimits, the empty environment and the fresh directory, to measure the layers' cost (`comlrl bench rewards --bare`), never for training on untrusted code |
//! | `tmp_dir` | the system's | where the per-sample directories go |
//! | `site_packages` | false | import site-packages in the sandbox (`python -S` when false: the standard library only, ~85 ms less per sample where site-packages are large) |
//! | `score` | `level` | `level`: the level reward; `all_passed`: 1 when the joint program passes every extracted test, else 0 (to log a pass rate beside the level reward, as a second term of weight 0) |
//!
//! Missing `python3` (or one that does not run in the sandbox) is an error when the reward is
//! created, so `comlrl check` reports it before a run.
//!
//! The same library is also a multi-turn transition plugin ([`LevelFeedback`], the environment
//! repository's `level_feedback`): `trainer.external_transition: {plugin: …comlrl_code_exec}`.
use comlrl_plugin_api::transition::Transition;
use comlrl_plugin_api::{export_reward, export_transition, Reward, Sample};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub mod cgroup;
pub mod feedback;
pub mod landlock;
pub mod level;
pub mod prompts;
pub mod reward;
pub mod sandbox;

pub use reward::{Execution, Outcome, TestStatus};
use sandbox::{End, Layers, Limits, Sandbox};

/// The commit of OpenMLRL/LLM_Collab_Code_Generation whose reward and prompts are ported.
pub const PINNED_COMMIT: &str = "0b914ca2444875d48967b9b8137d87905b0d24ef";

/// The sandboxed half of the reward (level 2 and 3), run with `python -I -B -c`.
pub const HARNESS: &str = include_str!("harness.py");

/// Settings read from the reward term's `params`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Interpreter as given.
    pub python: String,
    /// Per-test timeout, seconds.
    pub test_timeout_s: u64,
    /// Timeouts before the tests stop.
    pub max_timeouts: u64,
    /// Wall-clock limit per sample, seconds.
    pub wall_timeout_s: u64,
    /// `RLIMIT_CPU`, seconds.
    pub cpu_time_s: u64,
    /// `RLIMIT_AS`, MiB.
    pub memory_mb: u64,
    /// `RLIMIT_FSIZE`, MiB.
    pub file_size_mb: u64,
    /// Processes per sample.
    pub max_processes: u64,
    /// Output kept, KiB.
    pub output_kib: u64,
    /// Samples at once (0: the available cores).
    pub parallelism: usize,
    /// Extra readable paths.
    pub read_paths: Vec<PathBuf>,
    /// Require every layer.
    pub strict: bool,
    /// Leave out every optional layer (benchmarks: the layers' cost).
    pub bare: bool,
    /// Directory for the per-sample directories.
    pub tmp_dir: PathBuf,
    /// Load site-packages (else `python -S`).
    pub site_packages: bool,
    /// What a sample scores.
    pub score: Score,
}

/// What a sample scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    /// The level reward (0 … 4).
    Level,
    /// 1 when every extracted test passed, else 0.
    AllPassed,
}

const KEYS: [&str; 16] = [
    "python",
    "test_timeout_s",
    "max_timeouts",
    "wall_timeout_s",
    "cpu_time_s",
    "memory_mb",
    "file_size_mb",
    "max_processes",
    "output_kib",
    "parallelism",
    "read_paths",
    "strict",
    "tmp_dir",
    "score",
    "site_packages",
    "layers",
];

fn uint(
    p: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    default: u64,
    max: u64,
) -> Result<u64, String> {
    match p.get(key) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(x) if (1..=max).contains(&x) || (key == "parallelism" && x == 0) => Ok(x),
            _ => Err(format!(
                "params.{key} must be an integer from 1 to {max}, got {v}"
            )),
        },
    }
}

impl Config {
    /// Reads the params (JSON text; `{}` or `null` for the defaults).
    pub fn parse(params_json: &str) -> Result<Config, String> {
        let value: serde_json::Value = serde_json::from_str(params_json)
            .map_err(|e| format!("params are not valid JSON: {e}"))?;
        let empty = serde_json::Map::new();
        let p = match &value {
            serde_json::Value::Object(m) => m,
            serde_json::Value::Null => &empty,
            other => return Err(format!("params must be a map, got {other}")),
        };
        if let Some(k) = p.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown param `{k}`; expected one of {}",
                KEYS.join(", ")
            ));
        }
        let string = |key: &str| -> Result<Option<String>, String> {
            match p.get(key) {
                None => Ok(None),
                Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(v) => Err(format!("params.{key} must be a non-empty string, got {v}")),
            }
        };
        let test_timeout_s = uint(p, "test_timeout_s", 10, 3600)?;
        let max_timeouts = uint(p, "max_timeouts", 3, 1000)?;
        let wall_timeout_s = uint(
            p,
            "wall_timeout_s",
            test_timeout_s * max_timeouts + 10,
            86_400,
        )?;
        let read_paths = match p.get("read_paths") {
            None => Vec::new(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .filter(|s| s.starts_with('/'))
                        .map(PathBuf::from)
                        .ok_or_else(|| format!("params.read_paths: {v} is not an absolute path"))
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(format!(
                    "params.read_paths must be a list of paths, got {v}"
                ))
            }
        };
        let flag = |key: &str| match p.get(key) {
            None => Ok(false),
            Some(serde_json::Value::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("params.{key} must be true or false, got {v}")),
        };
        let strict = flag("strict")?;
        let bare = match string("layers")?.as_deref() {
            None | Some("all") => false,
            Some("none") => true,
            Some(other) => {
                return Err(format!(
                    "params.layers must be `all` or `none`, got `{other}`"
                ))
            }
        };
        if bare && strict {
            return Err("params.layers `none` contradicts params.strict".into());
        }
        let site_packages = flag("site_packages")?;
        Ok(Config {
            python: string("python")?.unwrap_or_else(|| "python3".into()),
            test_timeout_s,
            max_timeouts,
            wall_timeout_s,
            cpu_time_s: uint(p, "cpu_time_s", wall_timeout_s, 86_400)?,
            memory_mb: uint(p, "memory_mb", 2048, 1 << 20)?,
            file_size_mb: uint(p, "file_size_mb", 16, 1 << 20)?,
            max_processes: uint(p, "max_processes", 32, 1 << 16)?,
            output_kib: uint(p, "output_kib", 64, 1 << 16)?,
            parallelism: uint(p, "parallelism", 0, 256)? as usize,
            read_paths,
            strict,
            bare,
            tmp_dir: string("tmp_dir")?.map_or_else(std::env::temp_dir, PathBuf::from),
            site_packages,
            score: match string("score")?.as_deref() {
                None | Some("level") => Score::Level,
                Some("all_passed") => Score::AllPassed,
                Some(other) => {
                    return Err(format!(
                        "params.score must be `level` or `all_passed`, got `{other}`"
                    ))
                }
            },
        })
    }
}

/// The interpreter as it runs: its real executable and the directories it reads.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// `sys.executable`, symlinks resolved.
    pub executable: PathBuf,
    /// `sys.version`'s first word.
    pub version: String,
    /// Prefixes and `sys.path` entries.
    pub dirs: Vec<PathBuf>,
}

/// Runs `python` once, outside the sandbox, with this process's environment (as a shell would
/// find it) to learn its executable and library directories.
pub fn resolve_interpreter(python: &str) -> Result<Interpreter, String> {
    const QUERY: &str = "import json, os, sys; print(json.dumps({'exe': os.path.realpath(sys.executable), 'version': sys.version.split()[0], 'dirs': [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] + [p for p in sys.path if p]}))";
    let out = Command::new(python)
        .args(["-I", "-c", QUERY])
        .output()
        .map_err(|e| {
            format!("cannot run the Python interpreter `{python}` ({e}); install python3 or set params.python to an interpreter's path")
        })?;
    if !out.status.success() {
        return Err(format!(
            "the Python interpreter `{python}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("the Python interpreter `{python}` gave no usable answer: {e}"))?;
    let s = |k: &str| v[k].as_str().map(str::to_string);
    let executable = PathBuf::from(s("exe").ok_or("no executable")?);
    let mut dirs: Vec<PathBuf> = v["dirs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    if let Some(d) = executable.parent() {
        dirs.push(d.to_path_buf());
    }
    Ok(Interpreter {
        executable,
        version: s("version").unwrap_or_default(),
        dirs,
    })
}

/// System paths a program reads to start (libraries, the loader's cache); everything else is
/// invisible to it where Landlock is on.
const SYSTEM_READ: [&str; 10] = [
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/dev/urandom",
];

/// The reward: configuration, interpreter and sandbox.
#[derive(Debug)]
pub struct CodeExec {
    /// The settings.
    pub config: Config,
    /// The interpreter found at load.
    pub interpreter: Interpreter,
    sandbox: Sandbox,
}

fn harness_args(config: &Config) -> Vec<String> {
    let site: &[&str] = if config.site_packages { &[] } else { &["-S"] };
    ["-I", "-B"]
        .iter()
        .chain(site)
        .chain(&["-c", HARNESS])
        .map(|a| a.to_string())
        .collect()
}

fn read_paths(interpreter: &Interpreter, config: &Config) -> Vec<PathBuf> {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    read.extend(interpreter.dirs.iter().cloned());
    read.extend(config.read_paths.iter().cloned());
    read
}

fn limits(config: &Config) -> Limits {
    Limits {
        wall: Duration::from_secs(config.wall_timeout_s),
        cpu_seconds: config.cpu_time_s,
        address_space: config.memory_mb << 20,
        file_size: config.file_size_mb << 20,
        processes: config.max_processes,
        output: (config.output_kib << 10) as usize,
    }
}

/// What the probe runs: one definition and one passing test.
const PROBE_PROGRAM: &str = "def probe_fn(x):\n    return x + 1";

impl CodeExec {
    /// Resolves the interpreter, finds the layers the OS offers, and checks with one probe run
    /// that the sandbox can run the harness.
    pub fn new(config: Config) -> Result<CodeExec, String> {
        if config.bare {
            eprintln!(
                "code_exec: params.layers is `none`: samples run without Landlock, namespaces, cgroup or dropped capabilities (for measuring their cost only)"
            );
            return CodeExec::with_layers(config, Layers::default());
        }
        let interpreter = resolve_interpreter(&config.python)?;
        if !config.tmp_dir.is_dir() {
            return Err(format!(
                "params.tmp_dir {} is not a directory",
                config.tmp_dir.display()
            ));
        }
        let read = read_paths(&interpreter, &config);
        let limits = limits(&config);
        sandbox::remove_stale_dirs(&config.tmp_dir);
        let cgroup_root = cgroup::CgroupRoot::detect();
        if let Some(root) = &cgroup_root {
            root.remove_stale();
        }
        // SAFETY: getuid cannot fail.
        let root = unsafe { libc::getuid() } == 0;
        let full = Layers {
            landlock: landlock::abi_version(),
            net_namespace: true,
            pid_namespace: true,
            cgroup: cgroup_root,
            drop_capabilities: root,
        };
        let args = harness_args(&config);
        let build = |layers: Layers| {
            Sandbox::new(
                interpreter.executable.clone(),
                args.clone(),
                &read,
                config.tmp_dir.clone(),
                limits.clone(),
                layers,
            )
            .map_err(|e| format!("cannot set up the sandbox: {e}"))
        };
        // Namespaces may be refused (a container without CAP_SYS_ADMIN): then go without.
        let mut attempts = vec![full.clone()];
        attempts.push(Layers {
            pid_namespace: false,
            ..full.clone()
        });
        attempts.push(Layers {
            net_namespace: false,
            pid_namespace: false,
            ..full.clone()
        });
        let mut errors = Vec::new();
        let mut chosen = None;
        for layers in attempts {
            let sandbox = build(layers)?;
            match probe(&sandbox, config.test_timeout_s) {
                Ok(()) => {
                    chosen = Some(sandbox);
                    break;
                }
                Err(e) => errors.push(format!("[{}] {e}", sandbox.layers().describe())),
            }
        }
        let Some(sandbox) = chosen else {
            return Err(format!(
                "the Python interpreter {} does not run in the sandbox: {}; if it reads files outside its prefix, add them to params.read_paths",
                interpreter.executable.display(),
                errors.join("; ")
            ));
        };
        let layers = sandbox.layers();
        let missing = layers.landlock.is_none()
            || !layers.net_namespace
            || !layers.pid_namespace
            || layers.cgroup.is_none();
        if missing && config.strict {
            return Err(format!(
                "params.strict is set, but not every sandbox layer is available: {}",
                layers.describe()
            ));
        }
        eprintln!(
            "code_exec: python {} ({}); sandbox: {}",
            interpreter.executable.display(),
            interpreter.version,
            layers.describe()
        );
        Ok(CodeExec {
            config,
            interpreter,
            sandbox,
        })
    }

    /// A reward with exactly these layers, no probing of the OS (benchmarks: `Layers::default()`
    /// measures the sandbox's cost). The probe program must still pass.
    pub fn with_layers(config: Config, layers: Layers) -> Result<CodeExec, String> {
        let interpreter = resolve_interpreter(&config.python)?;
        let sandbox = Sandbox::new(
            interpreter.executable.clone(),
            harness_args(&config),
            &read_paths(&interpreter, &config),
            config.tmp_dir.clone(),
            limits(&config),
            layers,
        )
        .map_err(|e| format!("cannot set up the sandbox: {e}"))?;
        probe(&sandbox, config.test_timeout_s)?;
        Ok(CodeExec {
            config,
            interpreter,
            sandbox,
        })
    }

    /// The sandbox in use.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Runs the harness on `program` and `tests`; the raw run and its parsed report.
    pub fn execute(
        &self,
        program: &str,
        tests: &[String],
    ) -> Result<(Execution, sandbox::Run), String> {
        execute(
            &self.sandbox,
            program,
            tests,
            self.config.test_timeout_s,
            self.config.max_timeouts,
        )
    }

    /// Scores one joint sample.
    pub fn evaluate(
        &self,
        prompt: &str,
        aux: &str,
        main: &str,
        test_code: &str,
        entry_point: &str,
    ) -> Result<Outcome, String> {
        reward::score(
            prompt,
            aux,
            main,
            test_code,
            entry_point,
            |program, tests| self.execute(program, tests).map(|(e, _)| e),
        )
    }

    /// The `level_feedback` analysis of one joint action: the parse, the aux misuse check and
    /// the tests run in the sandbox (see [`feedback::analyze`]).
    pub fn analyze_feedback(
        &self,
        prompt: &str,
        aux: &str,
        main: &str,
        test_code: &str,
        entry_point: &str,
    ) -> Result<feedback::Analysis, String> {
        feedback::analyze(prompt, aux, main, test_code, entry_point, |job| {
            self.run_feedback(job)
        })
    }

    /// Runs one feedback job in the sandbox and parses its report.
    pub fn run_feedback(&self, job: &feedback::Job) -> Result<feedback::Report, String> {
        let text = serde_json::json!({
            "mode": "feedback",
            "code": job.code,
            "tests": job.tests,
            "main_func": job.main_func,
            "test_timeout": self.config.test_timeout_s,
            "max_timeouts": self.config.max_timeouts,
        })
        .to_string();
        let run = self
            .sandbox
            .run(&[("job.json", text.as_bytes())])
            .or_else(|_| {
                std::thread::sleep(Duration::from_millis(50));
                self.sandbox.run(&[("job.json", text.as_bytes())])
            })
            .map_err(|e| format!("the sandbox could not run the feedback analysis: {e}"))?;
        let report = feedback::Report::parse(&run.report);
        if report.syntax.is_none() {
            return Err(format!(
                "the feedback analysis ended ({:?}) before checking the syntax; its last output: {}",
                run.end,
                last_lines(&run.output)
            ));
        }
        Ok(report)
    }

    /// Scores a batch, `parallelism` samples at a time; results in input order.
    pub fn evaluate_batch(&self, items: &[Item<'_>]) -> Vec<Result<Outcome, String>> {
        let workers = match self.config.parallelism {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        .min(items.len())
        .max(1);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<Result<Outcome, String>>>> =
            items.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(it) = items.get(i) else { break };
                    let r = self.evaluate(it.prompt, it.aux, it.main, it.test, it.entry_point);
                    *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_else(|| Err("not scored".into()))
            })
            .collect()
    }
}

/// One joint sample to score.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The problem's prompt (its imports are kept).
    pub prompt: &'a str,
    /// Agent 0's completion.
    pub aux: &'a str,
    /// The last agent's completion.
    pub main: &'a str,
    /// The problem's test code (`def check(candidate): …`).
    pub test: &'a str,
    /// The problem's entry point.
    pub entry_point: &'a str,
}

fn execute(
    sandbox: &Sandbox,
    program: &str,
    tests: &[String],
    test_timeout_s: u64,
    max_timeouts: u64,
) -> Result<(Execution, sandbox::Run), String> {
    let job = serde_json::json!({
        "code": program,
        "tests": tests,
        "test_timeout": test_timeout_s,
        "max_timeouts": max_timeouts,
    });
    let job = job.to_string();
    // A start that fails for want of a resource (EAGAIN under a burst of processes) gets one
    // more try before it fails the batch.
    let run = sandbox
        .run(&[("job.json", job.as_bytes())])
        .or_else(|_| {
            std::thread::sleep(Duration::from_millis(50));
            sandbox.run(&[("job.json", job.as_bytes())])
        })
        .map_err(|e| format!("the sandbox could not run the sample: {e}"))?;
    let exec = Execution::parse(&run.report);
    if exec.syntax_ok.is_none() && run.end != End::TimedOut {
        return Err(format!(
            "the harness ended ({:?}) before checking the syntax; its last output: {}",
            run.end,
            last_lines(&run.output)
        ));
    }
    Ok((exec, run))
}

/// The last five lines of a run's output, joined with ` | `.
fn last_lines(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let mut lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.reverse();
    lines.join(" | ")
}

fn probe(sandbox: &Sandbox, test_timeout_s: u64) -> Result<(), String> {
    let tests = vec!["assert probe_fn(1) == 2".to_string()];
    let (exec, run) = execute(sandbox, PROBE_PROGRAM, &tests, test_timeout_s, 3)?;
    if exec.passed() == 1 && exec.added && exec.done {
        Ok(())
    } else {
        Err(format!(
            "the probe program did not pass ({:?}): report {:?}, output {:?}",
            run.end,
            run.report,
            String::from_utf8_lossy(&run.output)
        ))
    }
}

fn field<'a>(fields: &'a serde_json::Value, key: &str) -> Result<&'a str, String> {
    fields.get(key).and_then(|v| v.as_str()).ok_or_else(|| {
        format!("code_exec needs the dataset row's string field `{key}` (HumanEval's `test` and `entry_point` columns)")
    })
}

impl Reward for CodeExec {
    const NAME: &'static str = "code_exec";

    fn create(params_json: &str) -> Result<Self, String> {
        CodeExec::new(Config::parse(params_json)?)
    }

    fn score(&self, sample: &Sample<'_>) -> Result<f32, String> {
        let mut out = [0.0f32];
        self.score_batch(std::slice::from_ref(sample), &mut out)?;
        Ok(out[0])
    }

    fn score_batch(&self, samples: &[Sample<'_>], out: &mut [f32]) -> Result<(), String> {
        let fields: Vec<serde_json::Value> = samples
            .iter()
            .map(|s| serde_json::from_str(s.fields_json).map_err(|e| format!("fields: {e}")))
            .collect::<Result<_, _>>()?;
        let mut items = Vec::with_capacity(samples.len());
        for (s, f) in samples.iter().zip(&fields) {
            let n = s.agent_count();
            if n == 0 {
                return Err("code_exec needs at least one agent".into());
            }
            items.push(Item {
                prompt: s.prompt,
                aux: if n > 1 {
                    s.completion(0).unwrap_or("")
                } else {
                    ""
                },
                main: s.completion(n - 1).unwrap_or(""),
                test: field(f, "test")?,
                entry_point: field(f, "entry_point")?,
            });
        }
        for (slot, r) in out.iter_mut().zip(self.evaluate_batch(&items)) {
            let o = r?;
            *slot = match self.config.score {
                Score::Level => o.reward as f32,
                Score::AllPassed => f32::from(u8::from(o.all_passed())),
            };
        }
        Ok(())
    }
}

export_reward!(CodeExec);

/// The `level_feedback` transition (two agents: aux, then main): each joint action's next
/// prompts are [`feedback::followup_prompts`] of its analysis. Params: every reward param but
/// `score` (the interpreter and the sandbox's limits), and
///
/// | key | default | meaning |
/// | --- | --- | --- |
/// | `sandbox_slice` | 1 | the problem's tests are cut to their first N asserts (`-N`: the last N; 0: all), the environment repository's `external.sandbox_slice` |
/// | `max_error_chars` | 0 (no cut) | cut each failing test's exception text to this many characters (with ` …` after): the text is the program's, so one long message can make a prompt longer than the model's context, which stops the run; the reference cuts nothing |
/// | `history` | false | write each agent's previous prompts and responses in front (the transition's history arguments; the repository's wrapper does not pass them, so its prompts have none) |
#[derive(Debug)]
pub struct LevelFeedback {
    exec: CodeExec,
    sandbox_slice: i64,
    history: bool,
    max_error_chars: usize,
}

impl LevelFeedback {
    /// Builds from the params JSON (see the type's docs).
    pub fn from_params(params_json: &str) -> Result<LevelFeedback, String> {
        let mut value: serde_json::Value = serde_json::from_str(params_json)
            .map_err(|e| format!("params are not valid JSON: {e}"))?;
        let (mut sandbox_slice, mut history, mut max_error_chars) = (1i64, false, 0usize);
        if let serde_json::Value::Object(m) = &mut value {
            if m.contains_key("score") {
                return Err("params.score is a reward param; the transition scores nothing".into());
            }
            if let Some(v) = m.remove("sandbox_slice") {
                sandbox_slice = v
                    .as_i64()
                    .filter(|n| n.unsigned_abs() <= 1 << 20)
                    .ok_or_else(|| {
                        format!("params.sandbox_slice must be an integer (0: all asserts), got {v}")
                    })?;
            }
            if let Some(v) = m.remove("max_error_chars") {
                max_error_chars = v
                    .as_u64()
                    .filter(|&n| n <= 1 << 20)
                    .ok_or_else(|| {
                        format!("params.max_error_chars must be an integer from 0 (no cut) to 1048576, got {v}")
                    })? as usize;
            }
            if let Some(v) = m.remove("history") {
                history = v
                    .as_bool()
                    .ok_or_else(|| format!("params.history must be true or false, got {v}"))?;
            }
        }
        Ok(LevelFeedback {
            exec: CodeExec::new(Config::parse(&value.to_string())?)?,
            sandbox_slice,
            history,
            max_error_chars,
        })
    }

    /// The next prompts (aux, main) for one context (the transition ABI's JSON).
    pub fn next(&self, ctx: &serde_json::Value) -> Result<Vec<String>, String> {
        let agents = ctx["agent_count"].as_u64().unwrap_or(0);
        if agents != 2 {
            return Err(format!(
                "level_feedback writes prompts for two agents (aux, main), the scenario has {agents}"
            ));
        }
        let text = |v: &serde_json::Value, what: &str| -> Result<String, String> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("level_feedback: the context's {what} is not a string"))
        };
        let prompt = text(&ctx["prompt"], "prompt")?;
        let completions = ctx["completions"]
            .as_array()
            .ok_or("level_feedback: the context has no completions")?;
        let (Some(aux), Some(main)) = (completions.first(), completions.get(1)) else {
            return Err("level_feedback: the context has fewer than two completions".into());
        };
        let (aux, main) = (text(aux, "completions[0]")?, text(main, "completions[1]")?);
        let fields = &ctx["fields"];
        let test = field(fields, "test")?;
        let entry_point = field(fields, "entry_point")?;
        let sliced = feedback::slice_tests(test, self.sandbox_slice);
        let test_code = if sliced.is_empty() { test } else { &sliced };
        let mut analysis =
            self.exec
                .analyze_feedback(&prompt, &aux, &main, test_code, entry_point)?;
        if self.max_error_chars > 0 {
            for d in &mut analysis.details {
                if let Some((_, text)) = &mut d.error {
                    if let Some((at, _)) = text.char_indices().nth(self.max_error_chars) {
                        text.truncate(at);
                        text.push_str(" …");
                    }
                }
            }
        }
        let hist = |key: &str| -> Vec<Vec<String>> {
            if !self.history {
                return Vec::new();
            }
            ctx[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|h| {
                            h.as_array()
                                .map(|x| {
                                    x.iter()
                                        .filter_map(|s| s.as_str().map(str::to_string))
                                        .collect()
                                })
                                .unwrap_or_default()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let (a, m) = feedback::followup_prompts(
            &analysis,
            entry_point,
            &hist("prompt_history"),
            &hist("response_history"),
        );
        Ok(vec![a, m])
    }
}

impl Transition for LevelFeedback {
    const NAME: &'static str = "level_feedback";

    fn create(params_json: &str) -> Result<Self, String> {
        LevelFeedback::from_params(params_json)
    }

    fn next_prompts(&self, ctx_json: &str) -> Result<Vec<String>, String> {
        let ctx: serde_json::Value =
            serde_json::from_str(ctx_json).map_err(|e| format!("context: {e}"))?;
        self.next(&ctx)
    }
}

export_transition!(LevelFeedback);
