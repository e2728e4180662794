//! The child side of plugin isolation (`comlrl plugin-host <path>`): load one plugin — a
//! reward or a transition plugin, as the first request says — in-process and answer the
//! trainer's requests (see [`super::protocol`]) until its stdin closes. Whatever the plugin
//! does to this process — abort, segfault, stack overflow, `exit()`, heap corruption — ends
//! only this process; the trainer sees it as an error.
use super::protocol::{decode, read_frame_bytes, write_frame, Request, Response, SampleIn};
use crate::error::{PluginFailure, RewardError};
use crate::{JointSample, NativeReward, NativeTransition, RewardFn};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

/// Exit code when the protocol itself failed (garbage on stdin, stdout closed).
pub const EXIT_PROTOCOL: i32 = 3;

/// The protocol's channels, moved off fds 0 and 1 so that a plugin printing to stdout (or
/// reading stdin) cannot corrupt them: fd 1 then points at stderr, fd 0 at `/dev/null`.
/// The moved descriptors are close-on-exec, so a program the plugin starts does not hold the
/// trainer's pipes. SIGINT is ignored: the trainer starts the host in a process group of its
/// own, but a host started otherwise may share the terminal's, and the trainer stops
/// gracefully at the end of its step, which still needs the plugin; the host ends when the
/// trainer closes its stdin (or dies).
#[cfg(unix)]
fn protocol_channels() -> std::io::Result<(File, File)> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain fd syscalls on this process's own standard descriptors; every returned
    // fd is checked before use and owned by exactly one `File`.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        let input = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3);
        let output = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if input < 0 || output < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        Ok((File::from_raw_fd(input), File::from_raw_fd(output)))
    }
}

#[cfg(not(unix))]
fn protocol_channels() -> std::io::Result<(File, File)> {
    Err(std::io::Error::other(
        "plugin isolation is only supported on Unix; set `isolate: false`",
    ))
}

/// Serve the plugin at `path` over the protocol on stdin/stdout; returns the process exit
/// code (0 when the trainer closed the connection).
pub fn serve_plugin_host(path: &Path) -> i32 {
    let (input, output) = match protocol_channels() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("comlrl plugin-host: cannot set up the protocol channels: {e}");
            return EXIT_PROTOCOL;
        }
    };
    let mut input = BufReader::new(input);
    let mut output = BufWriter::new(output);
    let mut plugin = Loaded::Nothing;
    loop {
        let bytes = match read_frame_bytes(&mut input) {
            Ok(Some(b)) => b,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("comlrl plugin-host: bad request frame: {e}");
                return EXIT_PROTOCOL;
            }
        };
        let request: Request<SampleIn> = match decode(&bytes) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("comlrl plugin-host: bad request: {e}");
                return EXIT_PROTOCOL;
            }
        };
        let response = answer(path, &mut plugin, request);
        if let Err(e) = write_frame(&mut output, &response).and_then(|()| output.flush()) {
            eprintln!("comlrl plugin-host: cannot answer: {e}");
            return EXIT_PROTOCOL;
        }
    }
}

fn error_response(e: RewardError) -> Response {
    match e {
        RewardError::Plugin { kind, message, .. } => Response::Error { kind, message },
        other => Response::Error {
            kind: PluginFailure::Load,
            message: other.to_string(),
        },
    }
}

/// The plugin this host serves, once created.
enum Loaded {
    Nothing,
    Reward(NativeReward),
    Transition(NativeTransition),
}

fn parse_params(params: &str) -> Result<serde_json::Value, Response> {
    serde_json::from_str(params).map_err(|e| Response::Error {
        kind: PluginFailure::Create,
        message: format!("params are not JSON: {e}"),
    })
}

fn answer(path: &Path, plugin: &mut Loaded, request: Request<SampleIn>) -> Response {
    match request {
        Request::Create { params } => {
            let params = match parse_params(&params) {
                Ok(v) => v,
                Err(r) => return r,
            };
            match NativeReward::load(path, &params) {
                Ok(r) => {
                    let plugin_name = r.plugin_name().to_string();
                    *plugin = Loaded::Reward(r);
                    Response::Created { plugin_name }
                }
                Err(e) => error_response(e),
            }
        }
        Request::CreateTransition { params } => {
            let params = match parse_params(&params) {
                Ok(v) => v,
                Err(r) => return r,
            };
            match NativeTransition::load(path, &params) {
                Ok(t) => {
                    let plugin_name = t.plugin_name().to_string();
                    *plugin = Loaded::Transition(t);
                    Response::Created { plugin_name }
                }
                Err(e) => error_response(e),
            }
        }
        Request::Score { samples } => {
            let Loaded::Reward(r) = plugin else {
                return Response::Error {
                    kind: PluginFailure::Host,
                    message: "score requested before a reward plugin was created".into(),
                };
            };
            let batch: Vec<JointSample> = samples
                .into_iter()
                .map(|s| JointSample {
                    prompt: s.prompt,
                    completions: s.completions,
                    fields: s.fields,
                })
                .collect();
            match r.score(&batch) {
                Ok(scores) => Response::Scores {
                    bits: scores.iter().map(|v| v.to_bits()).collect(),
                },
                Err(e) => error_response(e),
            }
        }
        Request::Next { ctx } => {
            let Loaded::Transition(t) = plugin else {
                return Response::Error {
                    kind: PluginFailure::Host,
                    message: "next requested before a transition plugin was created".into(),
                };
            };
            match t.next_json(&ctx) {
                Ok(prompts) => Response::Prompts { prompts },
                Err(e) => error_response(e),
            }
        }
    }
}
