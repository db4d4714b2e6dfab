//! TLS for the server (rustls, as pgwire speaks it) and the loopback check that decides
//! whether serving without it is allowed.

use std::sync::Arc;

/// TLS from a PEM certificate chain and key.
pub fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<pgwire::tokio::TlsAcceptor, String> {
    use tokio_rustls::rustls;
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("--tls: cannot read {}: {e}", p.display()))
    };
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--tls-cert {}: not a PEM certificate: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    }
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?
        .ok_or_else(|| {
            format!(
                "--tls-key {}: no private key in it (expected PEM, PKCS#8 or RSA)",
                key.display()
            )
        })?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("--tls-cert/--tls-key do not make a usable pair: {e}"))?;
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}

/// Whether `listen` names only loopback addresses.
pub async fn is_loopback(listen: &str) -> bool {
    match tokio::net::lookup_host(listen).await {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}
