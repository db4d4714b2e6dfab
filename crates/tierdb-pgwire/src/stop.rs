//! Giving up on a running statement: its `statement_timeout` passes or the client sends a
//! CancelRequest. Either ends the statement with SQLSTATE 57014, whichever part of it is
//! running: planning, execution of a write, or rows being sent.
//!
//! Invariants:
//!
//! 1. A stop drops the statement's work (DataFusion's operators stop at their next await;
//!    the session aborts an open transaction, as for any failed statement) and raises the
//!    session's interrupt flag, which stops planning that runs as a task of its own at
//!    its next rule (`tierdb_tables::interrupt`).
//! 2. Work that is ready is answered, even when the deadline has passed meanwhile
//!    (`biased`: the work is polled first).
//! 3. A cancel counts from the statement's start (the watch is subscribed then); one sent
//!    while the statement was planned is not lost when its rows start to stream.

use std::future::Future;

use futures::{Stream, StreamExt};
use pgwire::error::PgWireResult;
use tierdb_tables::interrupt::Interrupt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::errors::{canceled, timed_out};

pub(crate) struct Stop {
    deadline: Option<Instant>,
    cancel: watch::Receiver<u64>,
    interrupt: Interrupt,
}

impl Stop {
    /// `cancel` is the connection's cancel watch as subscribed when the statement started.
    pub(crate) fn new(
        deadline: Option<Instant>,
        cancel: watch::Receiver<u64>,
        interrupt: Interrupt,
    ) -> Self {
        Self {
            deadline,
            cancel,
            interrupt,
        }
    }

    /// `work`'s output, or 57014 if the statement is given up first (invariant 1).
    pub(crate) async fn bound<F: Future>(&mut self, work: F) -> PgWireResult<F::Output> {
        let deadline = self.deadline;
        let expired = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let stopped = tokio::select! {
            biased;
            v = work => return Ok(v),
            () = expired => timed_out(),
            Ok(()) = self.cancel.changed() => canceled(),
        };
        self.interrupt.raise();
        Err(stopped)
    }

    /// `items` until they end or the statement is given up; then one 57014 error, and
    /// `items` is dropped.
    pub(crate) fn guard_stream<T, S>(self, items: S) -> impl Stream<Item = PgWireResult<T>> + Send
    where
        T: Send + 'static,
        S: Stream<Item = PgWireResult<T>> + Send + 'static,
    {
        let items = Box::pin(items);
        futures::stream::unfold(Some((items, self)), |state| async move {
            let (mut items, mut stop) = state?;
            match stop.bound(items.next()).await {
                Ok(Some(item)) => Some((item, Some((items, stop)))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgwire::error::PgWireError;

    fn code(e: &PgWireError) -> String {
        match e {
            PgWireError::UserError(info) => format!("{} {}", info.code, info.message),
            other => other.to_string(),
        }
    }

    fn stop(deadline: Option<Instant>) -> (Stop, watch::Sender<u64>, Interrupt) {
        let (tx, rx) = watch::channel(0);
        let interrupt = Interrupt::fresh();
        (Stop::new(deadline, rx, interrupt.clone()), tx, interrupt)
    }

    #[tokio::test]
    async fn ready_work_is_answered_even_past_the_deadline() {
        let (mut s, _tx, interrupt) = stop(Some(Instant::now()));
        assert_eq!(s.bound(async { 5 }).await.expect("answered"), 5);
        assert!(!interrupt.raised());
    }

    #[tokio::test]
    async fn a_passed_deadline_stops_pending_work_and_interrupts_planning() {
        let (mut s, _tx, interrupt) = stop(Some(Instant::now()));
        let e = s
            .bound(std::future::pending::<()>())
            .await
            .expect_err("stopped");
        assert_eq!(
            code(&e),
            "57014 canceling statement due to statement timeout"
        );
        assert!(interrupt.raised());
    }

    #[tokio::test]
    async fn a_cancel_stops_pending_work() {
        let (mut s, tx, interrupt) = stop(None);
        tx.send_modify(|g| *g += 1);
        let e = s
            .bound(std::future::pending::<()>())
            .await
            .expect_err("stopped");
        assert_eq!(code(&e), "57014 canceling statement due to user request");
        assert!(interrupt.raised());
    }

    #[tokio::test]
    async fn a_cancel_sent_before_rows_stream_ends_the_stream() {
        let (mut s, tx, _) = stop(None);
        assert_eq!(s.bound(async { 1 }).await.expect("planned"), 1);
        tx.send_modify(|g| *g += 1); // while "planning"
        let rows = s.guard_stream(futures::stream::pending::<PgWireResult<u8>>());
        let out: Vec<_> = rows.collect().await;
        assert_eq!(out.len(), 1);
        let e = out
            .into_iter()
            .next()
            .and_then(|r| r.err())
            .expect("an error");
        assert_eq!(code(&e), "57014 canceling statement due to user request");
    }

    #[tokio::test]
    async fn a_stream_that_ends_is_passed_through() {
        let (s, _tx, interrupt) = stop(None);
        let items = futures::stream::iter(vec![Ok(1u8), Ok(2)]);
        let out: Vec<u8> = s
            .guard_stream(items)
            .map(|r| r.expect("an item"))
            .collect()
            .await;
        assert_eq!(out, vec![1, 2]);
        assert!(!interrupt.raised());
    }
}
