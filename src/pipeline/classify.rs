//! Deciding what kind of question a turn is (`RETRIEVAL`, `CODE_GENERATION`,
//! `CONVERSATIONAL`) and whether it refers to the code in the editor.
//!
//! `RulesClassifier` needs no model call: English and Spanish patterns. The flag it
//! reports is "the words refer to the editor"; the pipeline sets EDITOR only when that
//! holds *and* there is editor code to refer to.

/// The three kinds of turn the reference distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryType {
    /// A question answered from the knowledge base.
    Retrieval,
    /// A request to write or change code.
    CodeGeneration,
    /// Small talk and follow-ups about the conversation itself: no retrieval.
    Conversational,
}

impl QueryType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryType::Retrieval => "RETRIEVAL",
            QueryType::CodeGeneration => "CODE_GENERATION",
            QueryType::Conversational => "CONVERSATIONAL",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_uppercase().as_str() {
            "RETRIEVAL" => Some(QueryType::Retrieval),
            "CODE_GENERATION" => Some(QueryType::CodeGeneration),
            "CONVERSATIONAL" => Some(QueryType::Conversational),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub query_type: QueryType,
    /// The query's words point at the editor ("this code", "qué hace esto", …).
    pub refers_to_editor: bool,
}

/// Words that point at code the user is looking at.
const EDITOR_REFERENCES: &[&str] = &[
    "this code",
    "this function",
    "this method",
    "this class",
    "this file",
    "this snippet",
    "this block",
    "this line",
    "this loop",
    "this query",
    "this endpoint",
    "this test",
    "this script",
    "this module",
    "this struct",
    "this error",
    "this bug",
    "selected code",
    "the selection",
    "selected text",
    "the code above",
    "the code below",
    "my code",
    "fix this",
    "explain this",
    "refactor this",
    "improve this",
    "optimize this",
    "what does this",
    "what is this doing",
    "why is this",
    "why does this",
    "is this correct",
    "the error here",
    "here?",
    "in here",
    "document this",
    "test this",
    "simplify this",
    "este código",
    "este codigo",
    "esta función",
    "esta funcion",
    "este método",
    "este metodo",
    "esta clase",
    "este archivo",
    "este fichero",
    "este bloque",
    "esta línea",
    "esta linea",
    "este bucle",
    "este endpoint",
    "este test",
    "este script",
    "este módulo",
    "este error",
    "lo seleccionado",
    "código seleccionado",
    "codigo seleccionado",
    "el texto seleccionado",
    "mi código",
    "mi codigo",
    "qué hace esto",
    "que hace esto",
    "arregla esto",
    "explica esto",
    "explícame esto",
    "explicame esto",
    "mejora esto",
    "cómo mejoro esto",
    "como mejoro esto",
    "refactoriza esto",
    "optimiza esto",
    "simplifica esto",
    "documenta esto",
    "corrige esto",
    "por qué falla esto",
    "por que falla esto",
    "aquí?",
    "aqui?",
    "esto está bien",
    "esto esta bien",
];

/// Requests to write or change code.
const CODE_GENERATION: &[&str] = &[
    "write ",
    "create ",
    "generate ",
    "implement ",
    "build ",
    "make a ",
    "make me ",
    "give me code",
    "code for ",
    "code that ",
    "show me code",
    "show me an example",
    "an example of",
    "example code",
    "fix ",
    "refactor",
    "rewrite ",
    "convert ",
    "add a ",
    "add an ",
    "add error handling",
    "optimize ",
    "improve ",
    "translate this code",
    "port this",
    "scaffold",
    "snippet that",
    "function that",
    "script that",
    "simplify ",
    "document ",
    "add tests",
    "write tests",
    "unit test for",
    "escribe",
    "crea ",
    "créame",
    "creame",
    "genera ",
    "implementa",
    "hazme",
    "haz una",
    "haz un",
    "dame código",
    "dame codigo",
    "dame un ejemplo",
    "un ejemplo de código",
    "un ejemplo de codigo",
    "código para",
    "codigo para",
    "código que",
    "codigo que",
    "función que",
    "funcion que",
    "script que",
    "programa que",
    "arregla",
    "corrige",
    "refactoriza",
    "reescribe",
    "convierte",
    "añade",
    "agrega",
    "optimiza",
    "mejora",
    "simplifica",
    "documenta",
    "muéstrame un ejemplo",
    "muestrame un ejemplo",
    "escribe pruebas",
    "pruebas unitarias para",
];

/// Small talk and turns about the conversation itself.
const CONVERSATIONAL: &[&str] = &[
    "thanks",
    "thank you",
    "hello",
    "hi ",
    "hi!",
    "hey",
    "good morning",
    "good afternoon",
    "great",
    "awesome",
    "perfect",
    "got it",
    "ok",
    "okay",
    "cool",
    "nice",
    "you're welcome",
    "who are you",
    "what can you do",
    "how are you",
    "can you repeat",
    "repeat that",
    "say that again",
    "explain that again",
    "what did you mean",
    "what do you mean by that",
    "summarize your answer",
    "summarize that",
    "shorter please",
    "make it shorter",
    "in spanish please",
    "in english please",
    "your previous answer",
    "your last answer",
    "as you said",
    "bye",
    "goodbye",
    "never mind",
    "nevermind",
    "gracias",
    "muchas gracias",
    "hola",
    "buenos días",
    "buenos dias",
    "buenas tardes",
    "vale",
    "perfecto",
    "genial",
    "entendido",
    "de acuerdo",
    "quién eres",
    "quien eres",
    "qué puedes hacer",
    "que puedes hacer",
    "cómo estás",
    "como estas",
    "repite",
    "repítelo",
    "repitelo",
    "no entendí",
    "no entendi",
    "qué quisiste decir",
    "que quisiste decir",
    "resume tu respuesta",
    "resúmelo",
    "resumelo",
    "más corto",
    "mas corto",
    "en inglés por favor",
    "en ingles por favor",
    "tu respuesta anterior",
    "lo que dijiste",
    "adiós",
    "adios",
    "olvídalo",
    "olvidalo",
];

fn normalize(query: &str) -> String {
    let mut q = query.trim().to_lowercase();
    q = q.trim_start_matches(['¿', '¡']).to_string();
    // A trailing space lets "hi " and "write " match at the end too.
    q.push(' ');
    q
}

fn matches_any(q: &str, patterns: &[&str]) -> bool {
    patterns.iter().any(|p| {
        if p.len() <= 4 {
            // Short words must stand alone ("ok", "hey"), not inside "token" or "they".
            q.split(|c: char| !c.is_alphanumeric() && c != '\'')
                .any(|w| w == p.trim_end_matches(['!', ' ']))
                || q.starts_with(p)
        } else {
            q.contains(p)
        }
    })
}

/// Classifies without a model call.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesClassifier;

impl RulesClassifier {
    pub fn classify(&self, query: &str) -> Classification {
        let q = normalize(query);
        let refers_to_editor = matches_any(&q, EDITOR_REFERENCES);
        let words = q.split_whitespace().count();
        let code = matches_any(&q, CODE_GENERATION);
        // Small talk is short; a long message that says "thanks" usually asks something too.
        let conversational = !code && words <= 8 && matches_any(&q, CONVERSATIONAL);
        let query_type = if conversational {
            QueryType::Conversational
        } else if code {
            QueryType::CodeGeneration
        } else {
            QueryType::Retrieval
        };
        Classification {
            query_type,
            refers_to_editor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_words_stand_alone() {
        let c = RulesClassifier;
        assert_eq!(
            c.classify("How do tokens expire?").query_type,
            QueryType::Retrieval
        );
        assert_eq!(c.classify("ok").query_type, QueryType::Conversational);
        assert_eq!(
            c.classify("¡Gracias!").query_type,
            QueryType::Conversational
        );
        assert!(c.classify("¿Qué hace esto?").refers_to_editor);
        assert!(!c.classify("¿Qué es un endpoint?").refers_to_editor);
    }
}
