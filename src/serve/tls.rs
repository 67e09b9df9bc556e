//! HTTPS: the rustls server configuration from `server.tls_cert` and `server.tls_key`.

use std::sync::Arc;

use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::config::{ServerSettings, SettingsError};

/// The TLS acceptor the settings ask for (`None`: plain HTTP), offering HTTP/2 and
/// HTTP/1.1. Errors name the key at fault, so a bad certificate or key stops the gateway
/// at start-up.
pub fn acceptor(server: &ServerSettings) -> Result<Option<TlsAcceptor>, SettingsError> {
    with_protocols(server, &[b"h2", b"http/1.1"])
}

/// Like [`acceptor`], offering HTTP/2 alone (gRPC).
pub fn http2_acceptor(server: &ServerSettings) -> Result<Option<TlsAcceptor>, SettingsError> {
    with_protocols(server, &[b"h2"])
}

/// The acceptor with `protocols` offered by ALPN, in order of preference.
fn with_protocols(
    server: &ServerSettings,
    protocols: &[&[u8]],
) -> Result<Option<TlsAcceptor>, SettingsError> {
    let (cert, key) = match (&server.tls_cert, &server.tls_key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        _ => {
            return Err(SettingsError::new(
                "server.tls_cert / server.tls_key",
                "set both (PEM files) for HTTPS, or neither for plain HTTP",
            ))
        }
    };
    let (cert_shown, key_shown) = (cert.display(), key.display());
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| SettingsError::new("server.tls_cert", format!("{cert_shown}: {e}")))?;
    if chain.is_empty() {
        return Err(SettingsError::new(
            "server.tls_cert",
            format!("{cert_shown}: no PEM certificate in the file"),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        SettingsError::new(
            "server.tls_key",
            format!("{key_shown}: no usable PEM private key: {e}"),
        )
    })?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| SettingsError::new("server.tls_cert", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            SettingsError::new(
                "server.tls_key",
                format!("{key_shown} does not go with the certificate in {cert_shown}: {e}"),
            )
        })?;
    config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}
