//! TLS for `https://` targets, on both HTTP clients: the platform's trust store (what reqwest trusts by default,
//! through `rustls-platform-verifier`) plus the roots of `--ca-cert FILE` (a private CA in front of a GPU cluster,
//! a self-signed test endpoint). Certificates are always verified; there is no switch to turn that off.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// Every certificate in a PEM file (`--ca-cert`), to trust as an extra root. A file with none is an error.
pub fn load_ca_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading --ca-cert {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--ca-cert {}: not a PEM certificate file", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!(
            "--ca-cert {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file",
            path.display()
        );
    }
    Ok(certs)
}

/// The rustls client configuration of the hyper path: the platform's roots plus `extra`, HTTP/1.1 offered by ALPN
/// (the path speaks HTTP/1.1 only). The crypto provider is aws-lc-rs, reqwest's default.
pub fn client_config(extra: &[CertificateDer<'static>]) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = if extra.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra.iter().cloned(), provider.clone())
    }
    .map_err(|e| format!("TLS: loading the trusted roots: {e}"))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The test CA (agent/tests/fixtures/tls/ca.pem) as extra roots, so tests that build https pools do not depend on
/// the machine's own CA store.
#[cfg(test)]
pub(crate) fn test_ca_certs() -> Vec<CertificateDer<'static>> {
    load_ca_certs(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls/ca.pem"))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_cert_files_are_read_or_refused_by_name() {
        let dir = crate::scratch::Scratch::new("tls");
        let certs = test_ca_certs();
        assert_eq!(certs.len(), 1);
        assert!(client_config(&certs).is_ok());

        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap_or_else(|e| panic!("{e}"));
        let e = format!(
            "{:#}",
            load_ca_certs(&empty).err().unwrap_or_else(|| panic!("accepted"))
        );
        assert!(e.contains("empty.pem") && e.contains("no PEM certificate"), "{e}");

        let missing = dir.join("missing.pem");
        let e = format!(
            "{:#}",
            load_ca_certs(&missing).err().unwrap_or_else(|| panic!("accepted"))
        );
        assert!(e.contains("missing.pem"), "{e}");
    }
}
