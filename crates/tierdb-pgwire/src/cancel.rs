//! CancelRequests: which connection a (pid, secret key) names, and stopping its statement.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

/// CancelRequests: pgwire's connection manager stops a statement still being planned or
/// written (its `do_query`); the connection's own generation counter stops a query whose
/// rows are being streamed after that returned.
#[derive(Debug)]
pub struct Cancels {
    manager: Arc<pgwire::api::ConnectionManager>,
    pub(crate) running: std::sync::Mutex<std::collections::HashMap<ConnectionKey, Generation>>,
}

/// A connection's pid and secret key, as CancelRequests name it.
pub(crate) type ConnectionKey = (i32, Bytes);

/// A counter a CancelRequest bumps.
pub(crate) type Generation = Arc<tokio::sync::watch::Sender<u64>>;

impl Cancels {
    pub fn new(manager: Arc<pgwire::api::ConnectionManager>) -> Arc<Self> {
        Arc::new(Cancels {
            manager,
            running: Default::default(),
        })
    }
}

#[async_trait]
impl pgwire::api::cancel::CancelHandler for Cancels {
    async fn on_cancel_request(&self, request: pgwire::messages::cancel::CancelRequest) {
        self.manager.cancel(request.pid, &request.secret_key).await;
        let key = (request.pid, request.secret_key.to_bytes());
        let generation = self.running.lock().ok().and_then(|r| r.get(&key).cloned());
        if let Some(g) = generation {
            g.send_modify(|n| *n += 1);
        }
    }
}
