//! The assistant's prompt templates: built into the binary from `config/prompts/`, each
//! replaceable by a file of the same name in `assistant.prompts_dir`.
//!
//! Templates use `{name}` placeholders; `render` fills them in one pass, so text that
//! arrives in a value (a user's message containing `{query}`, say) is never expanded.

use crate::config::{AssistantSettings, SettingsError};

#[derive(Debug, Clone)]
pub struct Prompts {
    pub system: String,
    /// Placeholders: `{history}`, `{selection}`, `{query}`.
    pub classify: String,
    /// Placeholders: `{anchor}`, `{history}`, `{mode}`, `{query}`.
    pub reformulate: String,
    /// Instructions added to the system prompt for each kind of question.
    pub retrieval: String,
    pub code_generation: String,
    pub conversational: String,
}

/// The templates compiled in, by file name, in the order of `Prompts`' fields.
const BUILT_IN: [(&str, &str); 6] = [
    (
        "system.txt",
        include_str!("../../config/prompts/system.txt"),
    ),
    (
        "classify.txt",
        include_str!("../../config/prompts/classify.txt"),
    ),
    (
        "reformulate.txt",
        include_str!("../../config/prompts/reformulate.txt"),
    ),
    (
        "retrieval.txt",
        include_str!("../../config/prompts/retrieval.txt"),
    ),
    (
        "code_generation.txt",
        include_str!("../../config/prompts/code_generation.txt"),
    ),
    (
        "conversational.txt",
        include_str!("../../config/prompts/conversational.txt"),
    ),
];

impl Prompts {
    /// The built-in templates.
    pub fn built_in() -> Self {
        let [system, classify, reformulate, retrieval, code_generation, conversational] =
            BUILT_IN.map(|(_, text)| text.trim().to_string());
        Self {
            system,
            classify,
            reformulate,
            retrieval,
            code_generation,
            conversational,
        }
    }

    /// Built-in templates, replaced by the files found in `assistant.prompts_dir`, and the
    /// system prompt by `assistant.system_prompt_file` when set.
    pub fn load(settings: &AssistantSettings) -> Result<Self, SettingsError> {
        let read = |(name, text): (&str, &str)| template(settings, name, text);
        let [system, classify, reformulate, retrieval, code_generation, conversational] = BUILT_IN;
        let mut prompts = Self {
            system: read(system)?,
            classify: read(classify)?,
            reformulate: read(reformulate)?,
            retrieval: read(retrieval)?,
            code_generation: read(code_generation)?,
            conversational: read(conversational)?,
        };
        if let Some(file) = &settings.system_prompt_file {
            prompts.system = std::fs::read_to_string(file)
                .map(|s| s.trim().to_string())
                .map_err(|e| {
                    SettingsError::new(
                        "assistant.system_prompt_file",
                        format!("{}: {e}", file.display()),
                    )
                })?;
        }
        Ok(prompts)
    }
}

/// One template outside the assistant's set (the judge's, say): `built_in`, or the file
/// `name` in `assistant.prompts_dir` when there is one.
pub fn template(
    settings: &AssistantSettings,
    name: &str,
    built_in: &str,
) -> Result<String, SettingsError> {
    let Some(dir) = &settings.prompts_dir else {
        return Ok(built_in.trim().to_string());
    };
    if !dir.is_dir() {
        return Err(SettingsError::new(
            "assistant.prompts_dir",
            format!("{} is not a folder", dir.display()),
        ));
    }
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(built_in.trim().to_string()),
        Err(e) => Err(SettingsError::new(
            "assistant.prompts_dir",
            format!("{}: {e}", path.display()),
        )),
    }
}

/// Fills `{name}` placeholders in one pass; unknown placeholders stay as written.
pub fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_fills_once_and_leaves_the_rest() {
        let out = render(
            "[{mode}] {query} {unknown} {",
            &[("mode", "RETRIEVAL"), ("query", "why {mode}?")],
        );
        assert_eq!(out, "[RETRIEVAL] why {mode}? {unknown} {");
    }

    #[test]
    fn built_in_templates_carry_their_placeholders() {
        let p = Prompts::built_in();
        for name in ["{history}", "{selection}", "{query}"] {
            assert!(p.classify.contains(name), "classify lacks {name}");
        }
        for name in ["{anchor}", "{history}", "{mode}", "{query}"] {
            assert!(p.reformulate.contains(name), "reformulate lacks {name}");
        }
    }

    #[test]
    fn a_prompts_dir_replaces_only_the_files_it_has() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("retrieval.txt"), "Cite everything.\n").unwrap();
        let settings = AssistantSettings {
            model: "brunix".into(),
            passthrough: false,
            system_prompt_file: None,
            prompts_dir: Some(dir.path().to_path_buf()),
            context_tokens: 8192,
            answer_reserve_tokens: 1024,
            cite_sources: false,
            editor_context: true,
        };
        let p = Prompts::load(&settings).unwrap();
        assert_eq!(p.retrieval, "Cite everything.");
        assert_eq!(p.system, Prompts::built_in().system);
    }
}
