//! TLS for `rediss://` servers: one set of settings (`--tls-ca`, `--tls-cert`, `--tls-key`,
//! `--insecure`) turned into a rustls client configuration for the hand-written connections and
//! into redis-rs certificates for the control connection.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// TLS settings of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file of the CA that signed the server's certificate (`--tls-ca`); the system's roots
    /// when `None`.
    pub ca: Option<PathBuf>,
    /// PEM client certificate for servers that require one (`--tls-cert`).
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate (`--tls-key`).
    pub key: Option<PathBuf>,
    /// Accept any server certificate (`--insecure`): encryption without authentication.
    pub insecure: bool,
}

/// Makes ring the process's rustls crypto provider (redis-rs builds its configurations from the
/// process default). Harmless when already done.
pub fn ensure_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TlsSettings {
    /// The rustls configuration for the tool's own connections.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        ensure_crypto_provider();
        let builder = rustls::ClientConfig::builder();
        let builder = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate))
        } else {
            let mut roots = rustls::RootCertStore::empty();
            match &self.ca {
                Some(path) => {
                    for cert in CertificateDer::pem_file_iter(path)
                        .with_context(|| format!("reading --tls-ca {}", path.display()))?
                    {
                        let cert =
                            cert.with_context(|| format!("parsing --tls-ca {}", path.display()))?;
                        roots
                            .add(cert)
                            .with_context(|| format!("using --tls-ca {}", path.display()))?;
                    }
                }
                None => {
                    for cert in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(cert);
                    }
                }
            }
            builder.with_root_certificates(roots)
        };
        let config = match (&self.cert, &self.key) {
            (Some(cert_path), Some(key_path)) => {
                let certs = CertificateDer::pem_file_iter(cert_path)
                    .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
                    .with_context(|| format!("reading --tls-cert {}", cert_path.display()))?;
                let key = PrivateKeyDer::from_pem_file(key_path)
                    .with_context(|| format!("reading --tls-key {}", key_path.display()))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .context("using the client certificate")?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(anyhow!("--tls-cert and --tls-key go together")),
        };
        Ok(Arc::new(config))
    }

    /// The same settings for redis-rs.
    pub fn redis_certificates(&self) -> Result<redis::TlsCertificates> {
        ensure_crypto_provider();
        let read = |flag: &str, path: &PathBuf| {
            fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("--tls-cert", cert)?,
                client_key: read("--tls-key", key)?,
            }),
            (None, None) => None,
            _ => return Err(anyhow!("--tls-cert and --tls-key go together")),
        };
        let root_cert = match &self.ca {
            Some(ca) => Some(read("--tls-ca", ca)?),
            None => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }

    /// The name the server's certificate must carry.
    pub fn server_name(host: &str) -> Result<ServerName<'static>> {
        ServerName::try_from(host.to_string())
            .map_err(|_| anyhow!("'{host}' is not a valid TLS server name"))
    }
}

/// `--insecure`: every certificate is accepted, but signatures are still checked so the
/// handshake is a real one.
#[derive(Debug)]
struct AcceptAnyCertificate;

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
