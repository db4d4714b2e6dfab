//! Authentication: SCRAM-SHA-256 against the one user and password the server was given
//! (there is no trust mode).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::ClientInfo;
use pgwire::api::ConnectionManager;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;

use crate::SERVER_VERSION;

/// PBKDF2 iterations of the salted password (PostgreSQL's default).
const SCRAM_ITERATIONS: usize = 4096;

/// The startup handler of one connection (the SASL exchange keeps per-connection state).
pub(crate) type Startup =
    StartupUserInErrors<SASLAuthStartupHandler<DefaultServerParameterProvider>>;

/// Makes the startup handler of each new connection: SCRAM for `user`/`password`,
/// registering the connection with `connections` (for CancelRequests).
pub(crate) fn startup_handlers(
    user: String,
    password: String,
    connections: Arc<ConnectionManager>,
) -> impl Fn() -> Arc<Startup> {
    let credentials = Arc::new(Credentials { user, password });
    let mut parameters = DefaultServerParameterProvider::default();
    parameters.server_version = SERVER_VERSION.to_string();
    let parameters = Arc::new(parameters);
    move || {
        let mut scram = ScramAuth::new(credentials.clone());
        scram.set_iterations(SCRAM_ITERATIONS);
        Arc::new(StartupUserInErrors(
            SASLAuthStartupHandler::new(parameters.clone())
                .with_scram(scram)
                .with_connection_manager(connections.clone()),
        ))
    }
}

#[derive(Debug)]
struct Credentials {
    user: String,
    password: String,
}

#[async_trait]
impl AuthSource for Credentials {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let salt: [u8; 16] = rand::random();
        // An unknown user gets a password nobody knows, so the exchange fails like a wrong
        // password would (no user enumeration).
        let secret = if login.user() == Some(self.user.as_str()) {
            self.password.clone()
        } else {
            format!("{:x}", rand::random::<u128>())
        };
        let hashed = gen_salted_password(&secret, &salt, SCRAM_ITERATIONS);
        Ok(Password::new(Some(salt.to_vec()), hashed))
    }
}

/// Names the startup message's user in a failed login. Clients (libpq among them) leave the
/// SCRAM user name empty, as RFC 5802 lets a server that knows the user from elsewhere, and
/// pgwire reports the SCRAM one: `Password authentication failed for user ""`.
#[derive(Debug)]
pub(crate) struct StartupUserInErrors<H>(H);

#[async_trait]
impl<H: StartupHandler> StartupHandler for StartupUserInErrors<H> {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self.0.on_startup(client, message).await {
            Err(PgWireError::InvalidPassword(user)) if user.is_empty() => {
                let user = client
                    .metadata()
                    .get(pgwire::api::METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                Err(PgWireError::InvalidPassword(user))
            }
            other => other,
        }
    }
}
