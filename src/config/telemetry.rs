//! `[telemetry]`: traces over OTLP (the exporter itself: `trace`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check, millis, secs, unset_if_empty, SettingsError};

/// Traces over OTLP (OpenTelemetry): one trace per request, a span per stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Where traces go: an OTLP/HTTP traces URL (`http://collector:4318/v1/traces`, used
    /// as it is) or, with `otlp_protocol = "grpc"`, an OTLP/gRPC address
    /// (`http://collector:4317`). `None`: no traces.
    #[serde(default, with = "unset_if_empty")]
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    /// Headers sent with every export (a collector's or Langfuse's `Authorization`).
    #[serde(default)]
    pub otlp_headers: std::collections::BTreeMap<String, String>,
    /// Messages, prompts, answers and chunk texts on the spans (redacted); off: sizes,
    /// ids, scores and decisions only.
    pub capture_content: bool,
    /// `service.name` of the traces.
    pub service_name: String,
    /// Finished spans waiting for export; more are dropped (never waited for).
    pub max_queue_spans: usize,
    /// How often the queue is exported.
    #[serde(rename = "export_delay_ms", with = "millis")]
    pub export_delay: Duration,
    /// Longest one export may take.
    #[serde(rename = "export_timeout_secs", with = "secs")]
    pub export_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies.
    Http,
    /// OTLP/gRPC.
    Grpc,
}

impl TelemetrySettings {
    pub(super) fn validate(&self) -> Result<(), SettingsError> {
        if let Some(url) = &self.otlp_endpoint {
            check(
                url.starts_with("http://") || url.starts_with("https://"),
                "telemetry.otlp_endpoint",
                "must be an http:// or https:// URL (e.g. http://127.0.0.1:4318/v1/traces)",
            )?;
        }
        for (name, value) in &self.otlp_headers {
            check(
                axum::http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && axum::http::HeaderValue::from_str(value).is_ok(),
                "telemetry.otlp_headers",
                "each entry must be a valid HTTP header name and value",
            )?;
        }
        check(
            self.max_queue_spans >= 64,
            "telemetry.max_queue_spans",
            "must be at least 64",
        )?;
        check(
            !self.export_delay.is_zero() && !self.export_timeout.is_zero(),
            "telemetry.export_delay_ms / telemetry.export_timeout_secs",
            "must be more than 0",
        )?;
        check(
            !self.service_name.trim().is_empty(),
            "telemetry.service_name",
            "must not be empty",
        )
    }
}
