//! Request bounds beyond the body size, the same for every API: how many items a field
//! may hold, how long each text may be, and a `session_id` of plain characters.

use crate::config::ServerSettings;
use crate::error::GatewayError;
use crate::llm::Input;
use crate::pipeline::ChatTurn;
use crate::sessions;

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

/// The request limits beyond the body size: how many messages, how long each, and a
/// `session_id` of plain characters and bounded length.
pub fn check_limits(server: &ServerSettings, turn: &ChatTurn) -> Result<(), GatewayError> {
    if let Some(id) = &turn.session_id {
        sessions::check_id(id).map_err(|why| GatewayError::invalid("session_id", why))?;
    }
    match &turn.request.input {
        Input::Chat(messages) => {
            check_count(
                "messages",
                "messages",
                messages.len(),
                (server.max_messages, "server.max_messages"),
            )?;
            for (i, m) in messages.iter().enumerate() {
                let chars = m.content.chars().count();
                if chars > server.max_message_chars {
                    check_length(server, &format!("messages[{i}].content"), chars)?;
                }
            }
            Ok(())
        }
        Input::Prompt { prompt, .. } => check_length(server, "prompt", prompt.chars().count()),
    }
}
