//! A client's tools made brief for a small window. Coding agents describe their tools at
//! length (Claude Code's twelve take 31,500 characters, about 8,000 tokens: half of a
//! 16,384-token window before the conversation starts). Brief, each keeps its name, the
//! first sentence of its description and its parameters' names, types, choices and which
//! are required; the parameters' own descriptions and examples go. The model can still
//! call every tool correctly; it reads less about when to.

use serde_json::{Map, Value};

use crate::context::budget::Estimator;

/// Longest description kept, in characters, when its first sentence runs on.
const MAX_DESCRIPTION: usize = 200;

/// Schema keywords that only explain: dropped at every depth of a brief tool's parameters.
const EXPLAINING: [&str; 4] = ["description", "examples", "title", "$comment"];

/// The client's tools as the prompt carries them: brief when whole they would take more
/// than a quarter of the window (`window` tokens, measured by `estimate`).
pub(super) fn fit(tools: &mut Vec<Value>, window: usize, estimate: &Estimator) {
    let measure = |tools: &[Value]| estimate.tokens(&Value::Array(tools.to_vec()).to_string());
    if tools.is_empty() {
        return;
    }
    let whole = measure(tools);
    if whole <= window / 4 {
        return;
    }
    *tools = brief(tools);
    tracing::info!(
        stage = "assemble",
        tools = tools.len(),
        tool_tokens = whole,
        brief_tool_tokens = measure(tools),
        window,
        "the client's tools take over a quarter of the window: sent brief"
    );
}

/// Each tool (OpenAI's `{"type": "function", "function": {...}}`) made brief; other
/// shapes are kept as they are.
pub(super) fn brief(tools: &[Value]) -> Vec<Value> {
    tools.iter().map(brief_tool).collect()
}

fn brief_tool(tool: &Value) -> Value {
    let mut tool = tool.clone();
    let Some(function) = tool.get_mut("function").and_then(Value::as_object_mut) else {
        return tool;
    };
    if let Some(Value::String(d)) = function.get_mut("description") {
        *d = first_sentence(d);
    }
    if let Some(parameters) = function.get_mut("parameters") {
        plain_schema(parameters);
    }
    tool
}

/// The text up to the end of its first sentence (a full stop, question or exclamation
/// mark followed by white space, or a line break), at most `MAX_DESCRIPTION` characters.
fn first_sentence(text: &str) -> String {
    let text = text.trim();
    let mut end = text.len();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        if c == '\n' {
            end = i;
            break;
        }
        if matches!(c, '.' | '?' | '!') && next_is_space {
            end = i + c.len_utf8();
            break;
        }
    }
    let sentence = text[..end].trim_end();
    match sentence.char_indices().nth(MAX_DESCRIPTION) {
        Some((cut, _)) => format!("{}…", &sentence[..cut]),
        None => sentence.to_string(),
    }
}

/// The schema without its explanations, at every depth. A property that is itself named
/// like an explaining keyword (a `description` parameter) is kept: only keyword values
/// of a schema object are dropped, never the names under `properties`.
fn plain_schema(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for key in EXPLAINING {
                map.remove(key);
            }
            for (key, value) in map.iter_mut() {
                if key == "properties" {
                    if let Value::Object(properties) = value {
                        plain_properties(properties);
                    }
                } else {
                    plain_schema(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(plain_schema),
        _ => {}
    }
}

fn plain_properties(properties: &mut Map<String, Value>) {
    for value in properties.values_mut() {
        plain_schema(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_brief_tool_keeps_what_a_call_needs_and_drops_the_explanations() {
        let read = json!({"type": "function", "function": {
            "name": "Read",
            "description": "Reads a file from the local filesystem. You can access any file directly by using this tool.\nUsage:\n- The file_path parameter must be an absolute path.",
            "parameters": {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#",
                "properties": {
                    "file_path": {"type": "string", "description": "The absolute path to the file to read"},
                    "limit": {"type": "number", "description": "The number of lines to read", "examples": [10]},
                    "description": {"type": "string", "description": "A parameter named description"},
                    "mode": {"type": "string", "enum": ["text", "bytes"], "description": "How"}
                },
                "required": ["file_path"], "additionalProperties": false}
        }});
        let brief = brief(std::slice::from_ref(&read));
        assert_eq!(
            brief[0],
            json!({"type": "function", "function": {
                "name": "Read",
                "description": "Reads a file from the local filesystem.",
                "parameters": {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#",
                    "properties": {
                        "file_path": {"type": "string"},
                        "limit": {"type": "number"},
                        "description": {"type": "string"},
                        "mode": {"type": "string", "enum": ["text", "bytes"]}
                    },
                    "required": ["file_path"], "additionalProperties": false}
            }})
        );
    }

    #[test]
    fn a_description_is_cut_at_its_first_sentence_or_line_and_at_most_200_characters() {
        assert_eq!(
            first_sentence("Runs a command. Then waits."),
            "Runs a command."
        );
        assert_eq!(
            first_sentence("Version 1.5 of the tool\nmore"),
            "Version 1.5 of the tool"
        );
        assert_eq!(first_sentence("Is it done? Yes."), "Is it done?");
        assert_eq!(first_sentence("  No stop at all  "), "No stop at all");
        let long = "é".repeat(300);
        assert_eq!(first_sentence(&long).chars().count(), MAX_DESCRIPTION + 1);
        let other = json!({"type": "web_search"});
        assert_eq!(brief(std::slice::from_ref(&other)), vec![other]);
    }
}
