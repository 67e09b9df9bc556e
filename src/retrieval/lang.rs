//! Which natural language a query or a text is written in. Only the languages the
//! analyzers support are told apart (English, Spanish); short queries are the common case,
//! so this counts function words and Spanish spelling rather than n-gram statistics.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    En,
    Es,
}

impl Lang {
    /// Every language told apart.
    pub const ALL: [Lang; 2] = [Lang::En, Lang::Es];

    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Es => "es",
        }
    }

    pub fn from_code(code: &str) -> Option<Self> {
        match code.to_ascii_lowercase().as_str() {
            "en" | "english" => Some(Lang::En),
            "es" | "spanish" | "español" | "espanol" => Some(Lang::Es),
            _ => None,
        }
    }

    /// The language `text` is most likely written in; English when nothing tells.
    pub fn detect(text: &str) -> Self {
        let (es, en) = Self::evidence(text);
        if es > en {
            Lang::Es
        } else {
            Lang::En
        }
    }

    /// How many signs of Spanish and of English `text` shows (function words, spelling).
    pub fn evidence(text: &str) -> (i32, i32) {
        const ES: &[&str] = &[
            "el", "la", "los", "las", "un", "una", "unos", "unas", "de", "del", "que", "qué", "y",
            "en", "es", "son", "por", "para", "con", "sin", "como", "cómo", "cuál", "cuando",
            "cuándo", "dónde", "donde", "se", "su", "sus", "al", "lo", "este", "esta", "esto",
            "hace", "hacer", "puedo", "quiero", "función", "código", "también", "pero", "muy",
            "sobre", "entre", "tiene", "hay",
        ];
        const EN: &[&str] = &[
            "the", "a", "an", "of", "and", "in", "is", "are", "to", "for", "with", "without",
            "how", "what", "which", "when", "where", "why", "does", "do", "can", "this", "that",
            "it", "on", "by", "from", "be", "i", "you", "my", "there", "about", "function", "code",
            "should", "would",
        ];
        let lower = text.to_lowercase();
        let mut es = 0i32;
        let mut en = 0i32;
        if lower.contains(['¿', '¡', 'ñ']) {
            es += 2;
        }
        for word in lower.split(|c: char| !c.is_alphanumeric() && c != '\'') {
            if word.is_empty() {
                continue;
            }
            if ES.contains(&word) {
                es += 1;
            }
            if EN.contains(&word) {
                en += 1;
            }
            if word.contains(['á', 'é', 'í', 'ó', 'ú']) {
                es += 1;
            }
        }
        (es, en)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_spanish_from_english() {
        for q in [
            "¿Cómo declaro una variable?",
            "qué hace esta función",
            "como se define un endpoint en el servidor",
            "explicación del bucle",
        ] {
            assert_eq!(Lang::detect(q), Lang::Es, "{q}");
        }
        for q in [
            "How do I declare a variable?",
            "what does this function do",
            "define an endpoint on the server",
            "getUserName",
        ] {
            assert_eq!(Lang::detect(q), Lang::En, "{q}");
        }
    }
}
