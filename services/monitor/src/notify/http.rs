//! A minimal HTTP/1.1 client for webhooks: one POST per connection, over TLS for
//! `https://` (rustls with ring, the system's root certificates), with one
//! deadline for connect, handshake, request and answer together.
//!
//! Why not reqwest: its rustls features change every reqwest client of the
//! workspace through feature unification and then require a process-wide crypto
//! provider; webhooks need only a POST.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Answers longer than this are cut (only their start matters for errors).
const MAX_ANSWER: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid URL: {0}")]
    Url(String),
    #[error("cannot connect to {host}: {reason}")]
    Connect { host: String, reason: String },
    #[error("TLS with {host} failed: {reason}")]
    Tls { host: String, reason: String },
    #[error("no root certificates found for https (install the ca-certificates package)")]
    NoRoots,
    #[error("HTTP exchange with {host} failed: {reason}")]
    Exchange { host: String, reason: String },
    #[error("no answer from {host} within {timeout:?}")]
    Timeout { host: String, timeout: Duration },
}

#[derive(Clone)]
pub struct HttpClient {
    tls: Option<TlsConnector>,
    timeout: Duration,
}

/// A parsed webhook URL.
struct Target {
    https: bool,
    host: String,
    port: u16,
    /// Path and query, what the request line carries.
    path: String,
}

fn parse(url: &str) -> Result<Target, HttpError> {
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| HttpError::Url(e.to_string()))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(HttpError::Url("the scheme must be http or https".into())),
    };
    let host = uri.host().ok_or_else(|| HttpError::Url("no host".into()))?.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path_and_query().map_or("/".to_owned(), |p| p.as_str().to_owned());
    Ok(Target { https, host, port, path })
}

impl HttpClient {
    /// Loads the system's root certificates; without any, `https://` calls fail
    /// (each with a clear error) while `http://` ones work.
    pub fn new(timeout: Duration) -> Self {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(errors = ?found.errors, "no root certificates found; https webhooks will fail");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()
            .filter(|_| added > 0)
            .map(|builder| TlsConnector::from(Arc::new(builder.with_root_certificates(roots).with_no_client_auth())));
        Self { tls, timeout }
    }

    /// POSTs `body` as JSON; returns the status and (the start of) the answer.
    ///
    /// # Errors
    /// A bad URL, or no answer: connection, TLS, exchange or timeout.
    pub async fn post_json(&self, url: &str, body: Vec<u8>) -> Result<(u16, String), HttpError> {
        let target = parse(url)?;
        let host = target.host.clone();
        match tokio::time::timeout(self.timeout, self.exchange(target, body)).await {
            Ok(result) => result,
            Err(_) => Err(HttpError::Timeout { host, timeout: self.timeout }),
        }
    }

    async fn exchange(&self, target: Target, body: Vec<u8>) -> Result<(u16, String), HttpError> {
        let host = target.host.clone();
        let tcp = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| HttpError::Connect { host: host.clone(), reason: e.to_string() })?;
        let _ = tcp.set_nodelay(true);
        if target.https {
            let tls = self.tls.as_ref().ok_or(HttpError::NoRoots)?;
            let name = ServerName::try_from(target.host.clone()).map_err(|e| HttpError::Url(e.to_string()))?;
            let stream = tls.connect(name, tcp).await.map_err(|e| HttpError::Tls { host: host.clone(), reason: e.to_string() })?;
            send(TokioIo::new(stream), &target, body).await
        } else {
            send(TokioIo::new(tcp), &target, body).await
        }
    }
}

async fn send<T>(io: T, target: &Target, body: Vec<u8>) -> Result<(u16, String), HttpError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let exchange = |reason: String| HttpError::Exchange { host: target.host.clone(), reason };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| exchange(e.to_string()))?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let default_port = if target.https { 443 } else { 80 };
    let host_header = if target.port == default_port { target.host.clone() } else { format!("{}:{}", target.host, target.port) };
    let request = hyper::Request::post(target.path.as_str())
        .header(header::HOST, host_header)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::USER_AGENT, concat!("ax-monitor/", env!("CARGO_PKG_VERSION")))
        .header(header::CONNECTION, "close")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| exchange(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| exchange(e.to_string()))?;
    let status = response.status().as_u16();
    let answer = match Limited::new(response.into_body(), MAX_ANSWER).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    driver.abort();
    Ok((status, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_into_what_the_request_needs() {
        let t = parse("https://oapi.dingtalk.com/robot/send?access_token=abc").unwrap();
        assert!(t.https);
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("oapi.dingtalk.com", 443, "/robot/send?access_token=abc"));
        let t = parse("http://127.0.0.1:8099").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("127.0.0.1", 8099, "/"));
        assert!(parse("ftp://x/y").is_err());
    }
}
