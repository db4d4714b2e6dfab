//! Replies of the extended protocol sent in one write. PostgreSQL answers Parse, Bind,
//! Describe and Execute without flushing: the client sends Sync or Flush when it wants to
//! read the answers (protocol-flow: "the server does not flush its output until a Sync or
//! Flush"). pgwire 0.41 flushes ParseComplete, BindComplete, RowDescription/NoData and
//! CommandComplete one by one, so one prepared statement (Bind, Describe, Execute, Sync)
//! cost four `send` calls and four TCP segments instead of one (a quarter of the server's
//! CPU under sysbench's point selects).
//!
//! [`DeferFlush`] wraps the connection for those four handlers: messages are queued as
//! before, and a flush is passed on only when something was queued that the client may
//! wait for without sending Sync or Flush (invariant 1). The Sync and Flush handlers, and
//! error replies, use the connection itself and flush everything queued.
//!
//! Invariants:
//!
//! 1. A flush is deferred only while every message queued since the last real flush is one
//!    the protocol lets wait for the client's Sync or Flush: ParseComplete, BindComplete,
//!    CloseComplete, ParameterDescription, RowDescription, NoData, DataRow,
//!    CommandComplete, EmptyQueryResponse. Anything else (COPY responses, which the client
//!    answers with data; notices; PortalSuspended; errors) is flushed as pgwire would.
//! 2. Nothing is dropped: a deferred flush leaves the messages in the connection's buffer,
//!    which the next real flush (Sync, Flush, an error, the next ReadyForQuery) writes in
//!    order.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Sink;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, SessionExtensions};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, ProtocolVersion};

/// The connection `C`, with flushes deferred as the module doc says.
pub(crate) struct DeferFlush<'a, C> {
    inner: &'a mut C,
    /// Whether a message that must reach the client now was queued since the last flush.
    urgent: bool,
}

impl<'a, C> DeferFlush<'a, C> {
    pub(crate) fn new(inner: &'a mut C) -> Self {
        DeferFlush {
            inner,
            urgent: false,
        }
    }
}

/// Whether the client may wait for `m` without first sending Sync or Flush (invariant 1).
fn may_wait(m: &PgWireBackendMessage) -> bool {
    use PgWireBackendMessage as M;
    matches!(
        m,
        M::ParseComplete(_)
            | M::BindComplete(_)
            | M::CloseComplete(_)
            | M::ParameterDescription(_)
            | M::RowDescription(_)
            | M::NoData(_)
            | M::DataRow(_)
            | M::CommandComplete(_)
            | M::EmptyQueryResponse(_)
    )
}

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for DeferFlush<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), C::Error> {
        if !may_wait(&item) {
            self.urgent = true;
        }
        Pin::new(&mut *self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        if !self.urgent {
            return Poll::Ready(Ok(())); // invariant 2: still queued in `inner`
        }
        let r = Pin::new(&mut *self.inner).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            self.urgent = false;
        }
        r
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.inner).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for DeferFlush<'_, C> {
    type PortalStore = C::PortalStore;

    fn portal_store(&self) -> &Self::PortalStore {
        self.inner.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for DeferFlush<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.inner.socket_addr()
    }

    fn is_secure(&self) -> bool {
        self.inner.is_secure()
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.inner.protocol_version()
    }

    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.inner.set_protocol_version(version)
    }

    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.inner.pid_and_secret_key()
    }

    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.inner.set_pid_and_secret_key(pid, secret_key)
    }

    fn state(&self) -> PgWireConnectionState {
        self.inner.state()
    }

    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.inner.set_state(new_state)
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.inner.transaction_status()
    }

    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.inner.set_transaction_status(new_status)
    }

    fn metadata(&self) -> &HashMap<String, String> {
        self.inner.metadata()
    }

    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.inner.metadata_mut()
    }

    fn session_extensions(&self) -> &SessionExtensions {
        self.inner.session_extensions()
    }

    fn sni_server_name(&self) -> Option<&str> {
        self.inner.sni_server_name()
    }

    fn client_certificates<'b>(
        &self,
    ) -> Option<&[tokio_rustls::rustls::pki_types::CertificateDer<'b>]> {
        self.inner.client_certificates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;
    use pgwire::messages::extendedquery::{BindComplete, ParseComplete};
    use pgwire::messages::response::{CommandComplete, NoticeResponse, ReadyForQuery};

    /// A connection that records what reaches the client (flushed) and what waits.
    #[derive(Default)]
    struct Wire {
        queued: Vec<PgWireBackendMessage>,
        flushed: Vec<PgWireBackendMessage>,
    }

    impl Sink<PgWireBackendMessage> for Wire {
        type Error = std::convert::Infallible;

        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn start_send(
            mut self: Pin<&mut Self>,
            m: PgWireBackendMessage,
        ) -> Result<(), Self::Error> {
            self.queued.push(m);
            Ok(())
        }

        fn poll_flush(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            let q = std::mem::take(&mut self.queued);
            self.flushed.extend(q);
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn replies_wait_for_sync_and_nothing_is_lost() {
        let mut wire = Wire::default();
        {
            let mut d = DeferFlush::new(&mut wire);
            d.send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
                .await
                .unwrap();
            d.send(PgWireBackendMessage::BindComplete(BindComplete::new()))
                .await
                .unwrap();
            d.send(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                "SELECT 1".into(),
            )))
            .await
            .unwrap();
        }
        assert_eq!(wire.flushed.len(), 0, "nothing written before Sync");
        assert_eq!(wire.queued.len(), 3, "everything still queued, in order");
        // Sync: the handler flushes the connection itself.
        wire.send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
            TransactionStatus::Idle,
        )))
        .await
        .unwrap();
        assert_eq!(wire.flushed.len(), 4);
        assert!(matches!(
            wire.flushed[0],
            PgWireBackendMessage::ParseComplete(_)
        ));
        assert!(matches!(
            wire.flushed[3],
            PgWireBackendMessage::ReadyForQuery(_)
        ));
    }

    #[tokio::test]
    async fn a_message_the_client_may_wait_for_is_flushed_at_once() {
        let mut wire = Wire::default();
        {
            let mut d = DeferFlush::new(&mut wire);
            d.send(PgWireBackendMessage::BindComplete(BindComplete::new()))
                .await
                .unwrap();
            d.send(PgWireBackendMessage::NoticeResponse(NoticeResponse::new(
                Vec::new(),
            )))
            .await
            .unwrap();
        }
        assert_eq!(
            wire.flushed.len(),
            2,
            "the notice and what was queued before it"
        );
        assert!(wire.queued.is_empty());
    }
}
