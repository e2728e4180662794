//! One tracker on its own thread behind a bounded queue: the training thread only ever does a
//! non-blocking send; rows that do not fit are counted, and the first error of the tracker is
//! printed once, after which the tracker is left alone. At the end the training thread waits a
//! bounded time for the tracker; one still busy then is left behind with a warning that says
//! what it did not deliver.
use super::{Record, Tracker, Warn, FINISH_WAIT, QUEUE_ROWS};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

enum Msg {
    Open(Vec<Record>),
    Row(Record),
    Finish(i32),
}

/// What the tracker thread got done, as the training thread sees it.
#[derive(Default)]
struct Progress {
    /// `open` succeeded (the run exists on the back-end).
    opened: AtomicBool,
    /// Rows delivered by successful `log` calls.
    rows: AtomicUsize,
    /// The tracker failed and gave up (it warned already).
    failed: AtomicBool,
}

/// The training thread's side of one tracker thread.
pub(super) struct Worker {
    name: &'static str,
    tx: SyncSender<Msg>,
    /// Rows the queue took.
    queued: usize,
    dropped: usize,
    done: Receiver<()>,
    handle: Option<JoinHandle<()>>,
    warn: Warn,
    progress: Arc<Progress>,
    /// How to deliver later what the tracker did not ([`Tracker::catch_up`]).
    catch_up: Option<String>,
    /// How long `finish` waits ([`FINISH_WAIT`]; shorter in tests).
    finish_wait: Duration,
}

impl Worker {
    pub(super) fn spawn(tracker: Box<dyn Tracker>, warn: Warn) -> Result<Self> {
        Self::spawn_with(tracker, warn, FINISH_WAIT)
    }

    fn spawn_with(tracker: Box<dyn Tracker>, warn: Warn, finish_wait: Duration) -> Result<Self> {
        let name = tracker.name();
        let catch_up = tracker.catch_up();
        let (tx, rx) = mpsc::sync_channel(QUEUE_ROWS);
        let (done_tx, done) = mpsc::channel();
        let thread_warn = warn.clone();
        let progress = Arc::new(Progress::default());
        let thread_progress = Arc::clone(&progress);
        let handle = std::thread::Builder::new()
            .name(format!("track-{}", name.to_lowercase()))
            .spawn(move || {
                run(tracker, rx, thread_warn, &thread_progress);
                let _ = done_tx.send(());
            })
            .map_err(|e| Error::tracker_by(format!("cannot start the {name} tracker thread"), e))?;
        Ok(Self {
            name,
            tx,
            queued: 0,
            dropped: 0,
            done,
            handle: Some(handle),
            warn,
            progress,
            catch_up,
            finish_wait,
        })
    }

    pub(super) fn send_open(&mut self, prior: Vec<Record>) {
        self.send(Msg::Open(prior));
    }

    pub(super) fn send_row(&mut self, rec: Record) {
        if self.send(Msg::Row(rec)) {
            self.queued += 1;
        }
    }

    /// Whether the queue took `msg`.
    fn send(&mut self, msg: Msg) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped += 1;
                false
            }
            // The thread ended (it cannot, before Finish, unless it panicked): nothing to do.
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// ` (<how to deliver later>)`, or nothing.
    fn later(&self) -> String {
        self.catch_up
            .as_ref()
            .map(|c| format!("; {c}"))
            .unwrap_or_default()
    }

    /// Sends the end of the run and waits (bounded) for the tracker to close.
    pub(super) fn finish(mut self, exit_code: i32) {
        // Finish must get through: wait for room, but not forever.
        let deadline = Instant::now() + self.finish_wait;
        let mut msg = Msg::Finish(exit_code);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TrySendError::Full(_)) => break,
            }
        }
        if self.dropped > 0 {
            (self.warn)(&format!(
                "warning: {}: {} metrics rows were dropped (tracker queue full); metrics.jsonl has them all{}",
                self.name,
                self.dropped,
                self.later()
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.done.recv_timeout(left) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(h) = self.handle.take() {
                    let _ = h.join();
                }
            }
            // A tracker that failed has said so already.
            Err(RecvTimeoutError::Timeout) if self.progress.failed.load(Ordering::SeqCst) => {}
            Err(RecvTimeoutError::Timeout) => {
                let sent = self.progress.rows.load(Ordering::SeqCst).min(self.queued);
                let what = if self.progress.opened.load(Ordering::SeqCst) {
                    format!(
                        "{} of the run's {} new metrics rows and the end of the run were not \
                         delivered",
                        self.queued - sent,
                        self.queued
                    )
                } else {
                    "it had not started the run yet, so nothing of this run was delivered".into()
                };
                let waited = match self.finish_wait.as_millis() {
                    ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
                    ms => format!("{ms} ms"),
                };
                (self.warn)(&format!(
                    "warning: {}: still busy after {waited}; not waiting for it: {what}; \
                     metrics.jsonl has every row{}",
                    self.name,
                    self.later()
                ));
            }
        }
    }
}

/// The tracker thread: open, then batches of rows (at most one `log` per `min_interval`),
/// `idle` when nothing comes, and `finish`. After the first error only the queue is drained.
fn run(mut t: Box<dyn Tracker>, rx: Receiver<Msg>, warn: Warn, progress: &Progress) {
    let mut failed = false;
    let mut opened = false;
    let fail = |e: Error, failed: &mut bool| {
        if !*failed {
            progress.failed.store(true, Ordering::SeqCst);
            warn(&format!("warning: {}", e.chain()));
            *failed = true;
        }
    };
    let mut pending: Vec<Record> = vec![];
    let mut last_log: Option<Instant> = None;
    loop {
        let wait = if pending.is_empty() {
            t.idle_interval()
        } else {
            let since = last_log.map(|l| l.elapsed()).unwrap_or(Duration::MAX);
            t.min_interval().saturating_sub(since)
        };
        let msg = if wait.is_zero() && !pending.is_empty() {
            None
        } else {
            match rx.recv_timeout(wait) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => Some(Msg::Finish(1)),
            }
        };
        match msg {
            Some(Msg::Open(prior)) => {
                opened = true;
                if !failed {
                    match t.open(&prior) {
                        Ok(()) => progress.opened.store(true, Ordering::SeqCst),
                        Err(e) => fail(e, &mut failed),
                    }
                }
            }
            Some(Msg::Row(r)) => {
                pending.push(r);
                continue;
            }
            Some(Msg::Finish(code)) => {
                if opened && !failed {
                    let res = if pending.is_empty() {
                        Ok(())
                    } else {
                        t.log(&pending)
                            .map(|()| progress.rows.fetch_add(pending.len(), Ordering::SeqCst))
                            .map(drop)
                    };
                    if let Err(e) = res.and_then(|()| t.finish(code)) {
                        fail(e, &mut failed);
                    }
                }
                return;
            }
            None if pending.is_empty() => {
                if opened && !failed {
                    if let Err(e) = t.idle() {
                        fail(e, &mut failed);
                    }
                }
            }
            None => {
                let batch = std::mem::take(&mut pending);
                last_log = Some(Instant::now());
                if opened && !failed {
                    match t.log(&batch) {
                        Ok(()) => {
                            progress.rows.fetch_add(batch.len(), Ordering::SeqCst);
                        }
                        Err(e) => fail(e, &mut failed),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Log = Arc<Mutex<Vec<String>>>;

    /// Records what it is given; optionally fails on the first `log`.
    struct Probe {
        seen: Arc<Mutex<Vec<String>>>,
        fail_log: bool,
        min: Duration,
    }

    impl Tracker for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }
        fn open(&mut self, prior: &[Record]) -> Result<()> {
            self.seen
                .lock()
                .unwrap()
                .push(format!("open {}", prior.len()));
            Ok(())
        }
        fn log(&mut self, records: &[Record]) -> Result<()> {
            if self.fail_log {
                return Err(Error::tracker("probe: down"));
            }
            for r in records {
                self.seen.lock().unwrap().push(format!("row {}", r.step));
            }
            Ok(())
        }
        fn finish(&mut self, code: i32) -> Result<()> {
            self.seen.lock().unwrap().push(format!("finish {code}"));
            Ok(())
        }
        fn min_interval(&self) -> Duration {
            self.min
        }
    }

    fn rec(step: u64) -> Record {
        Record {
            index: step as usize,
            step,
            runtime: 0.0,
            timestamp: 0.0,
            values: vec![],
            texts: vec![],
            samples: vec![],
        }
    }

    fn probe(fail_log: bool, min: Duration) -> (Worker, Log, Log) {
        let seen = Arc::new(Mutex::new(vec![]));
        let warnings = Arc::new(Mutex::new(vec![]));
        let w2 = warnings.clone();
        let warn: Warn = Arc::new(move |m: &str| w2.lock().unwrap().push(m.to_string()));
        let p = Probe {
            seen: seen.clone(),
            fail_log,
            min,
        };
        (Worker::spawn(Box::new(p), warn).unwrap(), seen, warnings)
    }

    #[test]
    fn rows_arrive_once_in_order_then_finish() {
        let (mut w, seen, warnings) = probe(false, Duration::from_millis(5));
        w.send_open(vec![]);
        for s in 1..=50 {
            w.send_row(rec(s));
        }
        w.finish(0);
        let seen = seen.lock().unwrap().clone();
        let mut want = vec!["open 0".to_string()];
        want.extend((1..=50).map(|s| format!("row {s}")));
        want.push("finish 0".into());
        assert_eq!(seen, want);
        assert!(warnings.lock().unwrap().is_empty());
    }

    /// Takes 3 s for every `log`, as a server that stopped answering would.
    struct Stuck;

    impl Tracker for Stuck {
        fn name(&self) -> &'static str {
            "stuck"
        }
        fn open(&mut self, _prior: &[Record]) -> Result<()> {
            Ok(())
        }
        fn log(&mut self, _records: &[Record]) -> Result<()> {
            std::thread::sleep(Duration::from_secs(3));
            Ok(())
        }
        fn finish(&mut self, _code: i32) -> Result<()> {
            Ok(())
        }
        fn catch_up(&self) -> Option<String> {
            Some("`resend` delivers them".into())
        }
    }

    #[test]
    fn a_tracker_still_busy_at_the_end_is_left_with_what_it_did_not_deliver() {
        let warnings = Arc::new(Mutex::new(vec![]));
        let w2 = warnings.clone();
        let warn: Warn = Arc::new(move |m: &str| w2.lock().unwrap().push(m.to_string()));
        let mut w = Worker::spawn_with(Box::new(Stuck), warn, Duration::from_millis(300)).unwrap();
        w.send_open(vec![]);
        for s in 1..=4 {
            w.send_row(rec(s));
        }
        let t = Instant::now();
        w.finish(0);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let warnings = warnings.lock().unwrap().clone();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("still busy after 300 ms")
                && warnings[0].contains("4 of the run's 4 new metrics rows")
                && warnings[0].contains("`resend` delivers them"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_failing_tracker_warns_once_and_is_left_alone() {
        let (mut w, seen, warnings) = probe(true, Duration::ZERO);
        w.send_open(vec![]);
        for s in 1..=5 {
            w.send_row(rec(s));
        }
        w.finish(0);
        assert_eq!(warnings.lock().unwrap().len(), 1);
        assert_eq!(*seen.lock().unwrap(), vec!["open 0".to_string()]);
    }
}
