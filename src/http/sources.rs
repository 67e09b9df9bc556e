//! `GET /v1/sources/{id}`: one cited chunk of the knowledge base, with its file, section
//! and lines; JSON, or a small readable page when a browser asks for HTML (the link of a
//! citation opens the passage the answer used). Behind the keys like every `/v1` route.

use axum::extract::{Path, State};
use axum::http::header::{ACCEPT, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST};
use axum::http::{HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::dialect::{ApiError, OpenAi};
use super::AppState;
use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::retrieval::KnowledgeChunk;

/// The path of a source's link, under the gateway's base URL.
pub fn link(base: &str, id: &str) -> String {
    format!("{}/v1/sources/{id}", base.trim_end_matches('/'))
}

/// Where users reach the gateway: `server.public_url`, else the request's own scheme and
/// host (the `Host` header, or HTTP/2's authority; both passed the host check already),
/// else the bound address.
pub fn base(server: &ServerSettings, uri: &Uri, headers: &HeaderMap) -> String {
    if let Some(url) = &server.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let scheme = if server.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or(&server.addr);
    format!("{scheme}://{host}")
}

/// Longest chunk id looked up (ids are 16 hex digits, a `-n` suffix for repeats).
const MAX_ID_BYTES: usize = 64;

/// Whether `id` can be a chunk id at all (anything else is not looked up).
pub fn is_plain_id(id: &str) -> bool {
    id.len() <= MAX_ID_BYTES
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

pub async fn get(
    State(state): State<AppState>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError<OpenAi>> {
    let id = id.map_or_else(|_| String::new(), |Path(id)| id);
    if !is_plain_id(&id) {
        // Not echoed: it may be anything, of any length.
        return Err(GatewayError::source_not_found("(not a source id)").into());
    }
    let chunk = state
        .retriever
        .source(&id)
        .await
        .map_err(|e| {
            GatewayError::internal(format!("the knowledge base could not be read: {e:#}"))
        })?
        .ok_or_else(|| GatewayError::source_not_found(&id))?;
    // Indexes written before redaction (or with other rules) hold what they held.
    let privacy = state.pipeline.privacy();
    if privacy.excluded(&chunk.source_file) {
        return Err(GatewayError::source_not_found(&id).into());
    }
    let mut chunk = (*chunk).clone();
    let mut cleaned = privacy.clean(&mut chunk.text);
    cleaned.add(privacy.clean(&mut chunk.section));
    cleaned.add(privacy.clean(&mut chunk.source_file));
    if !cleaned.is_empty() {
        cleaned.count("source");
    }
    if wants_html(&headers) {
        let mut response = page(&chunk).into_response();
        let h = response.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        // The page shows indexed text: nothing in it may run or load.
        h.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
        );
        return Ok(response);
    }
    Ok(Json(json!({
        "id": chunk.chunk_id,
        "file": chunk.source_file,
        "section": chunk.section,
        "lines": [chunk.start_line, chunk.end_line],
        "doc_type": chunk.doc_type.as_str(),
        "language": chunk.language,
        "text": chunk.text,
    }))
    .into_response())
}

/// A browser's request: `text/html` among the accepted types (API clients send none, or
/// `application/json`).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

fn page(c: &KnowledgeChunk) -> String {
    let title = if c.section.is_empty() {
        c.source_file.clone()
    } else {
        format!("{} · {}", c.source_file, c.section)
    };
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title>\
         <style>body{{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}}\
         h1{{font-size:1.2rem;margin:0}}p{{color:#555;margin:.3rem 0 1rem}}\
         pre{{background:#f6f6f6;border:1px solid #ddd;border-radius:6px;padding:1rem;white-space:pre-wrap;overflow-wrap:anywhere}}</style>\
         </head><body><h1>{file}</h1><p>{section}lines {start}–{end} · {doc_type} · {language}</p>\
         <pre>{text}</pre></body></html>\n",
        title = escape(&title),
        file = escape(&c.source_file),
        section = if c.section.is_empty() {
            String::new()
        } else {
            format!("{} · ", escape(&c.section))
        },
        start = c.start_line,
        end = c.end_line,
        doc_type = c.doc_type.as_str(),
        language = escape(&c.language),
        text = escape(&c.text),
    )
}

/// Text as HTML character data or a quoted attribute value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::DocType;

    #[test]
    fn the_page_escapes_what_the_chunk_holds() {
        let chunk = KnowledgeChunk {
            chunk_id: "0a1b".into(),
            source_file: "docs/<x>.md".into(),
            start_line: 3,
            end_line: 9,
            doc_type: DocType::Narrative,
            block_type: "section".into(),
            section: "A & B".into(),
            language: "en".into(),
            text: "<script>alert('x')</script> \"q\"".into(),
            defines: Vec::new(),
        };
        let html = page(&chunk);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &quot;q&quot;"));
        assert!(html.contains("docs/&lt;x&gt;.md"));
        assert!(html.contains("A &amp; B · lines 3–9"));
        assert_eq!(
            link("http://h:8080/", "0a1b"),
            "http://h:8080/v1/sources/0a1b"
        );
    }
}
