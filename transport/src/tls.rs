//! The TLS pieces QUIC ([`crate::quic`]) and TCP ([`crate::tcp`]) links share: TLS 1.3 with
//! AES-128-GCM only (aws-lc-rs), a fresh self-signed certificate per process, and mutual
//! verification against the SHA-256 fingerprints the ranks exchanged in the rendezvous (which
//! only holders of the job token pass).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::TransportError;

/// SHA-256 of a certificate's DER bytes: how ranks name each other's certificates.
pub type Fingerprint = [u8; 32];

/// The name in every certificate, and the one clients ask for (pinning, not names, decides).
pub(crate) const SERVER_NAME: &str = "gflow";

pub(crate) fn fingerprint(der: &[u8]) -> Fingerprint {
    Sha256::digest(der).into()
}

pub(crate) fn tls_error(e: impl std::fmt::Display) -> TransportError {
    TransportError::Io(format!("TLS setup: {e}"))
}

/// A fresh self-signed certificate for [`SERVER_NAME`] and its key.
pub(crate) fn self_signed()
-> Result<(CertificateDer<'static>, PrivatePkcs8KeyDer<'static>), TransportError> {
    let certified =
        rcgen::generate_simple_self_signed(vec![SERVER_NAME.into()]).map_err(tls_error)?;
    let cert = certified.cert.der().clone();
    let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
    Ok((cert, key))
}

/// A TLS 1.3 client presenting `cert` (with `key`) that accepts only the server certificate
/// `peer`, speaking protocol `alpn`.
pub(crate) fn pinned_client(
    cert: &CertificateDer<'static>,
    key: &PrivatePkcs8KeyDer<'static>,
    peer: Fingerprint,
    alpn: &[u8],
) -> Result<rustls::ClientConfig, TransportError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned::new(vec![peer])))
        .with_client_auth_cert(vec![cert.clone()], PrivateKeyDer::Pkcs8(key.clone_key()))
        .map_err(tls_error)?;
    tls.alpn_protocols = vec![alpn.to_vec()];
    Ok(tls)
}

/// A TLS 1.3 server presenting `cert` (with `key`) that accepts only the client certificates
/// `clients`, speaking protocol `alpn`.
pub(crate) fn pinned_server(
    cert: &CertificateDer<'static>,
    key: &PrivatePkcs8KeyDer<'static>,
    clients: Vec<Fingerprint>,
    alpn: &[u8],
) -> Result<rustls::ServerConfig, TransportError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .with_client_cert_verifier(Arc::new(Pinned::new(clients)))
        .with_single_cert(vec![cert.clone()], PrivateKeyDer::Pkcs8(key.clone_key()))
        .map_err(tls_error)?;
    tls.alpn_protocols = vec![alpn.to_vec()];
    Ok(tls)
}

/// aws-lc-rs's TLS 1.3 suites reduced to AES-128-GCM, the fastest here (see the notes): aws-lc
/// seals with VAES and AVX-512 at 1.6x ring's rate on this machine.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites = vec![rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256];
    Arc::new(p)
}

/// Accepts exactly the certificates whose fingerprints it holds, as server or client verifier.
#[derive(Debug)]
pub(crate) struct Pinned {
    allowed: Vec<Fingerprint>,
    algs: WebPkiSupportedAlgorithms,
}

impl Pinned {
    pub(crate) fn new(allowed: Vec<Fingerprint>) -> Pinned {
        Pinned {
            allowed,
            algs: provider().signature_verification_algorithms,
        }
    }

    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if self.allowed.contains(&fingerprint(cert)) {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
}

/// The handshake-signature checks, the same for both verifier traits: the provider's, against
/// the (already pinned) certificate.
macro_rules! signature_checks {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.algs.supported_schemes()
        }
    };
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    signature_checks!();
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }

    signature_checks!();
}
