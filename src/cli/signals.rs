//! Stop signals during `comlrl run`: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP asks the
//! trainer to write a checkpoint after the current step and stop; a second one exits at once.
//! SIGQUIT keeps its default (a core dump, for debugging a hung run).
use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// The signal that stopped the run, if one did.
#[derive(Clone)]
pub struct Stop(Arc<AtomicI32>);

impl Stop {
    /// The conventional exit status for a run stopped by the signal: 128 + its number (130 for
    /// Ctrl-C, 143 for SIGTERM, 129 for SIGHUP); 130 when the stop came from elsewhere.
    pub fn exit_code(&self) -> u8 {
        match self.0.load(Ordering::SeqCst) {
            0 => 130,
            s => (128 + s).clamp(0, 255) as u8,
        }
    }
}

fn name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "Ctrl-C",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Installs the handler; `flag` is the trainer's interrupt flag. Failing to install is an error:
/// a run that cannot be stopped cleanly should not start.
pub fn install(flag: Arc<AtomicBool>) -> anyhow::Result<Stop> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install the SIGINT/SIGTERM/SIGHUP handler")?;
    let stop = Stop(Arc::new(AtomicI32::new(0)));
    let seen = stop.0.clone();
    std::thread::Builder::new()
        .name("comlrl-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if flag.swap(true, Ordering::SeqCst) {
                    eprintln!("\n{}: stopping now, without a checkpoint", name(sig));
                    std::process::exit(128 + sig);
                }
                seen.store(sig, Ordering::SeqCst);
                eprintln!(
                    "\n{}: writing a checkpoint after this step (send it again to stop at once)",
                    name(sig)
                );
            }
        })
        .context("cannot start the signal-handling thread")?;
    Ok(stop)
}
