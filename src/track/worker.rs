//! One tracker on its own thread behind a bounded queue: the training thread only ever does a
//! non-blocking send; rows that do not fit are counted, and the first error of the tracker is
//! printed once, after which the tracker is left alone.
use super::{Record, Tracker, Warn, FINISH_WAIT, QUEUE_ROWS};
use crate::error::{Error, Result};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

enum Msg {
    Open(Vec<Record>),
    Row(Record),
    Finish(i32),
}

/// The training thread's side of one tracker thread.
pub(super) struct Worker {
    name: &'static str,
    tx: SyncSender<Msg>,
    dropped: usize,
    done: Receiver<()>,
    handle: Option<JoinHandle<()>>,
    warn: Warn,
}

impl Worker {
    pub(super) fn spawn(tracker: Box<dyn Tracker>, warn: Warn) -> Result<Self> {
        let name = tracker.name();
        let (tx, rx) = mpsc::sync_channel(QUEUE_ROWS);
        let (done_tx, done) = mpsc::channel();
        let thread_warn = warn.clone();
        let handle = std::thread::Builder::new()
            .name(format!("track-{}", name.to_lowercase()))
            .spawn(move || {
                run(tracker, rx, thread_warn);
                let _ = done_tx.send(());
            })
            .map_err(|e| Error::tracker_by(format!("cannot start the {name} tracker thread"), e))?;
        Ok(Self {
            name,
            tx,
            dropped: 0,
            done,
            handle: Some(handle),
            warn,
        })
    }

    pub(super) fn send_open(&mut self, prior: Vec<Record>) {
        self.send(Msg::Open(prior));
    }

    pub(super) fn send_row(&mut self, rec: Record) {
        self.send(Msg::Row(rec));
    }

    fn send(&mut self, msg: Msg) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped += 1,
            // The thread ended (it cannot, before Finish, unless it panicked): nothing to do.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Sends the end of the run and waits (bounded) for the tracker to close.
    pub(super) fn finish(mut self, exit_code: i32) {
        // Finish must get through: wait for room, but not forever.
        let deadline = Instant::now() + FINISH_WAIT;
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
                "warning: {}: {} metrics rows were dropped (tracker queue full); metrics.jsonl has them all",
                self.name, self.dropped
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.done.recv_timeout(left) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(h) = self.handle.take() {
                    let _ = h.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => (self.warn)(&format!(
                "warning: {}: still busy after {} s; not waiting for it",
                self.name,
                FINISH_WAIT.as_secs()
            )),
        }
    }
}

/// The tracker thread: open, then batches of rows (at most one `log` per `min_interval`),
/// `idle` when nothing comes, and `finish`. After the first error only the queue is drained.
fn run(mut t: Box<dyn Tracker>, rx: Receiver<Msg>, warn: Warn) {
    let mut failed = false;
    let mut opened = false;
    let fail = |e: Error, failed: &mut bool| {
        if !*failed {
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
                    if let Err(e) = t.open(&prior) {
                        fail(e, &mut failed);
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
                    if let Err(e) = t.log(&batch) {
                        fail(e, &mut failed);
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
