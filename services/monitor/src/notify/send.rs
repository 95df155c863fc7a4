//! One webhook call: sign when the format wants it, POST, and read the answer the
//! way each chat tool reports failure (WeCom and DingTalk answer 200 with a
//! non-zero `errcode`, Feishu with a non-zero `code`).

use std::time::Duration;

use ax_domain::alert::{redact_url, AlertChannel, ChannelFormat};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;

use super::http::HttpClient;

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("request failed: {0}")]
    Request(String),
    #[error("answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("refused the message: {0}")]
    Refused(String),
}

/// The HTTP client every delivery shares.
#[derive(Clone)]
pub struct Sender {
    http: HttpClient,
}

impl Sender {
    pub fn new(timeout: Duration) -> Self {
        Self { http: HttpClient::new(timeout) }
    }

    /// Delivers `body` to `channel`.
    ///
    /// # Errors
    /// Not delivered: unreachable, a non-2xx answer, or a refusal in the body.
    pub async fn send(&self, channel: &AlertChannel, mut body: Value) -> Result<(), SendError> {
        let now = chrono::Utc::now();
        let mut url = channel.url.clone();
        if let Some(secret) = &channel.secret {
            match channel.format {
                ChannelFormat::Dingtalk => {
                    let timestamp = now.timestamp_millis();
                    let sign = dingtalk_sign(secret, timestamp);
                    let separator = if url.contains('?') { '&' } else { '?' };
                    url.push_str(&format!("{separator}timestamp={timestamp}&sign={}", percent_encode(&sign)));
                }
                ChannelFormat::Feishu => {
                    let timestamp = now.timestamp();
                    body["timestamp"] = Value::String(timestamp.to_string());
                    body["sign"] = Value::String(feishu_sign(secret, timestamp));
                }
                _ => {}
            }
        }
        let payload = serde_json::to_vec(&body).expect("bodies serialize");
        // Errors name the host only: the URL carries the webhook's token.
        let (status, text) = self.http.post_json(&url, payload).await.map_err(|e| SendError::Request(format!("{} ({e})", redact_url(&url))))?;
        if !(200..300).contains(&status) {
            return Err(SendError::Status { status, body: clip(&text) });
        }
        check_answer(channel.format, &text)
    }
}

fn clip(text: &str) -> String {
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Chat tools answer 200 and say in the body whether they took the message.
fn check_answer(format: ChannelFormat, text: &str) -> Result<(), SendError> {
    let Ok(answer) = serde_json::from_str::<Value>(text) else { return Ok(()) };
    let code = match format {
        ChannelFormat::Wecom | ChannelFormat::Dingtalk => answer.get("errcode").and_then(Value::as_i64),
        ChannelFormat::Feishu => answer.get("code").or_else(|| answer.get("StatusCode")).and_then(Value::as_i64),
        ChannelFormat::Generic | ChannelFormat::Slack => None,
    };
    match code {
        Some(code) if code != 0 => Err(SendError::Refused(clip(text))),
        _ => Ok(()),
    }
}

type HmacSha256 = Hmac<sha2::Sha256>;

/// DingTalk: base64(HMAC-SHA256(key = secret, "timestamp\nsecret")), timestamp in ms.
pub fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("{timestamp_ms}\n{secret}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Feishu: base64(HMAC-SHA256(key = "timestamp\nsecret", empty message)), timestamp in s.
pub fn feishu_sign(secret: &str, timestamp_s: i64) -> String {
    let mac = HmacSha256::new_from_slice(format!("{timestamp_s}\n{secret}").as_bytes()).expect("HMAC takes any key length");
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Percent-encodes what base64 may contain.
fn percent_encode(value: &str) -> String {
    value.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_known_values() {
        // Computed independently: printf '1700000000000\nsec' | openssl dgst -sha256 -hmac sec -binary | base64
        assert_eq!(dingtalk_sign("sec", 1_700_000_000_000), "2Bn+1b9JMbAnwLtaHqn8F5V8vOWoUG9M7qcsi2p+u90=");
        // printf '' | openssl dgst -sha256 -hmac "$(printf '1700000000\nsec')" -binary | base64
        assert_eq!(feishu_sign("sec", 1_700_000_000), "ttGYnPblC3CcNExnS7y5igm57JhpqZJtHpJ+TURiUeg=");
        assert_eq!(percent_encode("a+b/c="), "a%2Bb%2Fc%3D");
    }

    #[test]
    fn chat_tools_refuse_in_the_body() {
        assert!(check_answer(ChannelFormat::Wecom, r#"{"errcode":0,"errmsg":"ok"}"#).is_ok());
        assert!(check_answer(ChannelFormat::Dingtalk, r#"{"errcode":310000,"errmsg":"sign not match"}"#).is_err());
        assert!(check_answer(ChannelFormat::Feishu, r#"{"code":19021,"msg":"sign match fail"}"#).is_err());
        assert!(check_answer(ChannelFormat::Slack, "ok").is_ok());
        assert!(check_answer(ChannelFormat::Generic, r#"{"errcode": 5}"#).is_ok());
    }
}
