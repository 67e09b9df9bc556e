//! Request bounds beyond the body size, the same for every API: how many items a field
//! may hold, how long each text may be, and a `session_id` of plain characters.

use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::llm::Input;
use crate::pipeline::ChatTurn;
use crate::sessions;

/// Whether a client's request id (`x-request-id`) is kept: 1 to 128 characters of
/// letters, digits and `-_.:`. Any other is replaced by one the gateway makes, so that no
/// client writes what it likes, of any length, into the logs and the response.
pub fn plain_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// One text of a request is at most `server.max_message_chars` characters long.
pub fn check_length(
    server: &ServerSettings,
    field: &str,
    chars: usize,
) -> Result<(), GatewayError> {
    if chars > server.max_message_chars {
        return Err(GatewayError::invalid(
            field,
            format!(
                "{field} has {chars} characters, more than the {} accepted (server.max_message_chars)",
                server.max_message_chars
            ),
        ));
    }
    Ok(())
}

/// At most `max` `items` in `field`, as its setting `key` says.
pub fn check_count(
    field: &str,
    items: &str,
    count: usize,
    (max, key): (usize, &str),
) -> Result<(), GatewayError> {
    if count > max {
        return Err(GatewayError::invalid(
            field,
            format!("{count} {items} is more than the {max} accepted ({key})"),
        ));
    }
    Ok(())
}

/// Most tokens an answer may be asked for (more than any model's window).
pub const MAX_ANSWER_TOKENS: u32 = 1 << 20;
/// Most stop sequences, and the longest one, in characters.
pub const MAX_STOP_SEQUENCES: usize = 64;
pub const MAX_STOP_CHARS: usize = 256;

/// The sampling parameters a client may set, within what any upstream takes: checked
/// here, once for every dialect, so that none is forwarded to fail (or to run) upstream.
fn check_params(params: &crate::llm::GenParams) -> Result<(), GatewayError> {
    let range = |field: &str, value: Option<f64>, (lo, hi): (f64, f64)| match value {
        Some(v) if !(v.is_finite() && (lo..=hi).contains(&v)) => Err(GatewayError::invalid(
            field,
            format!("{field} must be between {lo} and {hi}"),
        )),
        _ => Ok(()),
    };
    range("temperature", params.temperature, (0.0, 2.0))?;
    range("top_p", params.top_p, (0.0, 1.0))?;
    range("presence_penalty", params.presence_penalty, (-2.0, 2.0))?;
    range("frequency_penalty", params.frequency_penalty, (-2.0, 2.0))?;
    if params.max_tokens.is_some_and(|n| n > MAX_ANSWER_TOKENS) {
        return Err(GatewayError::invalid(
            "max_tokens",
            format!("max_tokens must be at most {MAX_ANSWER_TOKENS}"),
        ));
    }
    check_count(
        "stop",
        "stop sequences",
        params.stop.len(),
        (MAX_STOP_SEQUENCES, "the gateway's limit"),
    )?;
    if params
        .stop
        .iter()
        .any(|s| s.chars().count() > MAX_STOP_CHARS)
    {
        return Err(GatewayError::invalid(
            "stop",
            format!("a stop sequence is longer than {MAX_STOP_CHARS} characters"),
        ));
    }
    Ok(())
}

/// At most `server.max_messages` messages of at most `server.max_message_chars`
/// characters each: a chat's, and what `count_tokens` is asked to count. A text a
/// dialect keeps beside its list (Anthropic's `system`, Responses' `instructions`) is not
/// one of the client's messages, so it is not counted as one; each is named as the
/// client wrote it.
pub fn check_messages(
    server: &ServerSettings,
    messages: &[crate::llm::Message],
) -> Result<(), GatewayError> {
    const BESIDE: [&str; 2] = ["system", "instructions"];
    let listed = messages
        .iter()
        .filter(|m| !m.field.as_deref().is_some_and(|f| BESIDE.contains(&f)))
        .count();
    check_count(
        "messages",
        "messages",
        listed,
        (server.max_messages, "server.max_messages"),
    )?;
    for (i, m) in messages.iter().enumerate() {
        let chars = m.content.chars().count();
        if chars > server.max_message_chars {
            let field = m
                .field
                .clone()
                .unwrap_or_else(|| format!("messages[{i}].content"));
            check_length(server, &field, chars)?;
        }
    }
    Ok(())
}

/// The request limits beyond the body size: how many messages, how long each, sampling
/// parameters in range, and a `session_id` of plain characters and bounded length.
pub fn check_limits(server: &ServerSettings, turn: &ChatTurn) -> Result<(), GatewayError> {
    if let Some(id) = &turn.session_id {
        sessions::check_id(id).map_err(|why| GatewayError::invalid("session_id", why))?;
    }
    check_params(&turn.request.params)?;
    match &turn.request.input {
        Input::Chat(messages) => check_messages(server, messages),
        Input::Prompt {
            prompt,
            suffix,
            system,
            ..
        } => {
            check_length(server, "prompt", prompt.chars().count())?;
            for (field, text) in [("suffix", suffix), ("system", system)] {
                if let Some(text) = text {
                    check_length(server, field, text.chars().count())?;
                }
            }
            Ok(())
        }
    }
}
