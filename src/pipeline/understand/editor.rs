//! Whether a message is about the code in the editor: pointers, clitics, the code named by
//! its kind, requests that say only what to do with it; and the questions of their own
//! (how-tos, definitions, new code) that are not.

use super::*;
use crate::context::EditorContext;

/// Words that point at something at hand (as typed, lowercase).
#[rustfmt::skip]
pub(super) static POINTERS: WordSet = WordSet::new(&[
    "this", "these", "those", "it", "its", "it's", "here", "above", "below", "esto", "este",
    "esta", "estos", "estas", "eso", "ese", "esa", "esos", "esas", "aqui", "aquí", "aca", "acá",
    "ahi", "ahí", "lo",
    "they", "them", "their", "theirs",
    "le",
]);

/// Spanish imperatives that take the code as a clitic (`explícalo`, `optimízalo`).
#[rustfmt::skip]
pub(super) static CLITIC_VERBS: WordSet = WordSet::new(&[
    "explica", "explicame", "optimiza", "arregla", "haz", "hazme", "prueba", "documenta",
    "refactoriza", "revisa", "simplifica", "mejora", "traduce", "convierte", "comenta",
    "corrige", "reescribe", "limpia", "testea", "cambia", "divide", "ordena", "pasa", "muestra",
    "analiza", "depura", "formatea", "renombra", "acorta", "resume", "reduce", "ejecuta",
    "valida", "comprueba", "mira", "chequea", "adapta", "migra", "porta", "tipa", "parte",
    "separa", "extrae", "ordena",
    "agrega", "agregale", "anade", "pon", "ponle", "quita", "quitale", "mete", "metele", "saca", "sacale", "cambiale", "borra", "elimina", "mueve", "copia", "pega", "integra", "conecta", "envuelve", "encapsula", "factoriza", "paraleliza", "cachea", "memoiza", "anota", "comentale", "escribe", "escribele", "genera", "generale", "crea", "creale", "implementa", "completa", "termina", "sigue", "continua", "lee", "leele", "corre", "fijate", "hace", "haceme", "decime", "traduci", "traducime", "mejorame", "usa", "sube", "baja",
]);

/// Kinds of code a message may name the code in the editor by ("the handler", "la
/// migración"), after a definite article or a possessive.
#[rustfmt::skip]
pub(super) static CODE_NOUNS: WordSet = WordSet::new(&[
    "code", "function", "func", "fn", "method", "class", "file", "loop", "query", "migration",
    "config", "configuration", "dockerfile", "handler", "regex", "script", "module",
    "component", "test", "tests", "struct", "enum", "snippet", "block", "line", "lines",
    "variable", "endpoint", "route", "routes", "hook", "schema", "selection", "implementation",
    "logic", "algorithm", "sql", "yaml", "json", "makefile", "workflow", "pipeline", "service",
    "controller", "model", "record", "type", "types", "interface", "signature", "condition",
    "if", "match", "closure", "lambda", "callback", "promise", "transaction", "worker", "job",
    "task", "macro", "template", "stylesheet", "css", "html", "query", "codigo", "funcion",
    "metodo", "clase", "archivo", "fichero", "bucle", "consulta", "migracion", "configuracion",
    "manejador", "modulo", "componente", "prueba", "pruebas", "estructura", "fragmento",
    "bloque", "linea", "lineas", "variable", "ruta", "rutas", "esquema", "seleccion",
    "implementacion", "logica", "algoritmo", "servicio", "controlador", "modelo", "registro",
    "tipo", "tipos", "interfaz", "firma", "condicion", "transaccion", "tarea", "plantilla",
    "container", "containers", "contenedor", "contenedores", "image", "imagen", "pod", "pods", "probe", "probes", "deployment", "manifest", "chart", "volume", "volumes", "compose", "cron", "healthcheck", "readiness", "liveness", "build", "step", "steps", "stage", "stages", "jobs",
]);

#[rustfmt::skip]
pub(super) static ORDINALS: WordSet = WordSet::new(&[
    "first", "second", "third", "fourth", "last", "next", "previous", "other", "same", "1st",
    "2nd", "3rd", "4th", "top", "bottom", "inner", "outer", "primer", "primera", "primero",
    "segundo", "segunda", "tercer", "tercera", "ultimo", "ultima", "siguiente", "anterior",
    "otro", "otra", "mismo", "misma", "both", "ambos", "ambas",
]);

pub(super) const DEFINITE: &[&str] = &[
    "the", "my", "our", "that", "el", "la", "los", "las", "mi", "mis", "nuestro", "nuestra",
];

/// What a message may ask of code without naming anything else: instructions, aspects of
/// code to add or check, and how code behaves. A message made only of these (and filler)
/// is about the code at hand.
#[rustfmt::skip]
pub(super) static ABOUT_CODE: WordSet = WordSet::new(&[
    "explain", "explains", "explanation", "refactor", "optimize", "optimise", "simplify",
    "document", "review", "fix", "debug", "improve", "clean", "cleanup", "rename", "format",
    "comment", "comments", "annotate", "rewrite", "shorten", "speed", "speedup", "lint",
    "translate", "convert", "port", "modernize", "modernise", "analyze", "analyse", "check",
    "summarize", "summarise", "describe", "walk", "through", "break", "down", "test", "tests",
    "unit", "add", "write", "make", "turn", "split", "extract", "inline", "vectorize",
    "parallelize", "memoize", "cache", "type", "types", "typing", "hints", "docstring",
    "docstrings", "docs", "doc", "logging", "logs", "log", "error", "errors", "handling",
    "validation", "retries", "retry", "timeout", "guard", "guards", "assertions", "asserts",
    "async", "await", "sync", "readable", "readability", "cleaner", "faster", "shorter",
    "simpler", "safer", "better", "idiomatic", "pythonic", "generic", "reusable", "testable",
    "robust", "edge", "cases", "case", "coverage", "lgtm", "thoughts", "ideas", "feedback",
    "opinion", "suggestions", "improvements", "nit", "nits", "tldr", "eli5", "pls", "plz",
    "please", "quick", "quickly", "briefly", "step", "by", "line", "lines", "do", "does",
    "doing", "did", "done", "work", "works", "working", "mean", "means", "bug", "bugs", "buggy",
    "wrong", "broken", "issue", "issues", "problem", "problems", "fail", "fails", "failing",
    "failed", "crash", "crashes", "panic", "panics", "throw", "throws", "raise", "raises",
    "return", "returns", "returned", "null", "nil", "none", "undefined", "nan", "leak", "leaks",
    "block", "blocks", "blocking", "deadlock", "race", "races", "slow", "fast", "complexity",
    "big", "o", "thread", "safe", "safety", "correct", "right", "ok", "okay", "fine", "good",
    "bad", "compile", "compiles", "run", "runs", "happen", "happens", "output", "print",
    "prints", "result", "results", "purpose", "point", "used", "for", "why", "what", "how",
    "where", "when", "which", "wtf", "any", "anything", "some", "something", "there", "here",
    "missing", "need", "needed", "necessary", "redundant", "secure", "security", "vulnerable",
    "vulnerability", "injection", "efficient", "performance", "perf", "memory", "cpu", "time",
    "expensive", "costly", "overkill", "smell", "smells", "style", "whole", "entire", "part",
    "bit", "piece", "exactly", "actually", "really", "still",     "again", "status", "codes", "code", "value", "values", "exception",
    "exceptions", "instrucciones", "explica", "explicame", "explicar", "explicacion",
    "refactoriza", "refactorizar", "optimiza", "optimizar", "simplifica", "simplificar",
    "documenta", "documentar", "revisa", "revisar", "revision", "arregla", "arreglar",
    "corrige", "corregir", "mejora", "mejorar", "prueba", "pruebas", "test", "tests", "testea",
    "comenta", "comentarios", "comentario", "traduce", "traducir", "convierte", "convertir",
    "limpia", "limpiar", "reescribe", "reescribir", "analiza", "analizar", "resume", "resumir",
    "describe", "depura", "depurar", "anade", "agrega", "escribe", "haz", "hazme", "hace",
    "hacer", "pon", "mete", "quita", "tipos", "tipado", "logs", "log", "trazas", "manejo",
    "errores", "error", "validacion", "validaciones", "reintentos", "legible", "rapido",
    "corto", "simple", "seguro", "limpio", "mas", "menos", "opinion", "ideas", "sugerencias",
    "mejoras", "paso", "linea", "lineas", "falla", "fallar", "falle", "fallo", "falta", "sobra",
    "bug", "bugs", "fallos", "problema", "problemas", "mal", "bien", "correcto", "incorrecto",
    "devuelve", "devolver", "retorna", "nulo", "null", "lento", "rapido", "eficiente",
    "complejidad", "seguro", "compila", "funciona", "funcionar", "sirve", "hace", "pasa",
    "ocurre", "sale", "imprime", "resultado", "que", "por", "como", "cual", "donde", "cuando",
    "algo", "algun", "alguna", "hay", "esta", "esto", "bloquea", "condicion", "carrera", "fuga",
    "memoria", "rendimiento", "lanza", "excepcion", "codigos", "estado", "valor", "todo",
    "entero", "parte", "cosa", "realmente", "exactamente", "siempre", "nunca", "necesario",
    "redundante", "vulnerable", "inyeccion", "estilo", "feo",
    "wherever", "everywhere", "anywhere", "they", "them", "they're", "theyre", "falten", "faltan", "todos", "todas", "sitio", "sitios",
    "sobran", "big-o", "bigo", "than",
]);

/// Words that carry no subject: articles, pronouns, auxiliaries, politeness.
#[rustfmt::skip]
pub(super) static FILLER: WordSet = WordSet::new(&[
    "a", "an", "the", "to", "of", "in", "on", "at", "for", "with", "and", "or", "but", "so",
    "is", "are", "was", "were", "be", "been", "am", "it", "its", "it's", "this", "that",
    "these", "those", "here", "there", "me", "my", "i", "you", "your", "we", "us", "can",
    "could", "would", "will", "should", "shall", "may", "might", "must", "just", "pls", "plz",
    "please", "kindly", "hey", "hi", "ok", "okay", "thanks", "thx", "now", "then", "also",
    "too", "all", "up", "out", "into", "about", "from", "by", "as", "if", "not", "no", "yes",
    "s", "t", "m", "re", "ll", "d", "ve", "isn", "doesn", "don", "won", "can", "cant", "wont",
    "dont", "doesnt", "isnt", "un", "una", "unos", "unas", "el", "la", "los", "las", "lo", "le",
    "les", "de", "del", "al", "en", "con", "sin", "para", "por", "y", "o", "u", "pero", "que",
    "se", "es", "son", "esta", "estan", "ser", "estar", "me", "mi", "te", "tu", "nos", "esto",
    "este", "esta", "estos", "estas", "eso", "ese", "esa", "aqui", "aca", "ahi", "puedes",
    "podrias", "puede", "podria", "porfa", "favor", "hola", "vale", "gracias", "ya", "muy",
    "tan", "bien", "si", "no", "a", "ha", "he", "hay",
    "q", "k", "xq", "pq", "porq", "porque", "tb", "tmb", "tambien", "pa", "x", "ur", "plis", "pliss", "bro", "tio", "che", "vos", "usted", "ustedes", "podes", "podes",
]);

/// Openings of a question or request with a subject of its own: a how-to, a definition,
/// a request for new code.
#[rustfmt::skip]
pub(super) const OWN_SUBJECT: &[&str] = &[
    "how do i", "how do you", "how can i", "how to", "how would i", "how should i", "how does",
    "how do", "what is", "what are", "what's the difference", "whats the difference",
    "difference between", "is there a way", "is there any way", "is there a", "are there",
    "does brisa", "can brisa", "can i", "where do i", "where can i", "where is",
    "which command", "which function", "when should i", "should i use", "what does brisa",
    "give me an example", "show me an example of", "an example of", "write a", "write an",
    "write me", "create a", "create an", "generate a", "make a", "build a", "implement a",
    "give me a", "i need a", "i want a", "como hago", "como puedo", "como se", "como creo",
    "como declaro", "como leo", "como configuro", "como cancelo", "como funciona", "como uso",
    "como hacer", "que es", "que son", "que significa", "cual es", "cuales son",
    "diferencia entre", "hay alguna forma", "hay forma", "hay algun", "hay alguna", "existe",
    "donde", "cuando debo", "se puede", "puedo", "dame un", "dame una", "hazme un", "hazme una",
    "escribe un", "escribe una", "escribeme", "crea un", "crea una", "creame", "genera un",
    "genera una", "necesito un", "necesito una", "quiero un", "quiero una", "un ejemplo de",
    "ejemplo de",
    "what's the", "whats the", "what's a", "what's an", "how are", "how is", "is there", "que diferencia", "en que", "para que sirve", "por donde",
    "con que", "what command", "which flag", "what flag", "que comando", "cual comando", "que opcion", "que flag", "what option", "which option",
    "does the", "do the", "can the", "is the", "are the", "will the", "does a", "can a", "is a", "are there any", "hace el", "puede el", "tiene el", "soporta", "is brisa",
];

/// What is written for code that exists: asked with the code named by its kind, it is
/// about that code.
#[rustfmt::skip]
const FOR_CODE_AT_HAND: &[&str] = &[
    "test", "tests", "unittest", "unittests", "prueba", "pruebas", "docstring", "docstrings",
    "docs", "documentacion", "comments", "comentarios", "types", "tipos", "typings",
];

/// Phrases that ask about something in general, not as the code at hand uses it (folded).
const ASKS_IN_GENERAL: &[&str] = &[
    "in general",
    "generally speaking",
    "in theory",
    "conceptually",
    "as a concept",
    "in the abstract",
    "outside this code",
    "not this code",
    "not just this code",
    "en general",
    "en teoria",
    "conceptualmente",
    "como concepto",
    "en abstracto",
    "fuera de este codigo",
    "no este codigo",
];

/// Whether the message refers to the code in the editor, and by which rule. Needs code to
/// refer to (selection, open file, attached items, or code-like extra context).
pub fn editor_reference(message: &str, editor: &EditorContext) -> Why {
    let selection = !editor.selected_text.trim().is_empty();
    let file = !editor.editor_content.trim().is_empty();
    let extra = !editor.extra_context.trim().is_empty();
    if !(selection || file || !editor.items.is_empty() || extra) {
        return no("no-code");
    }
    if conversation_only(message, editor).is_some() {
        return no("small-talk");
    }
    let words = words_of(message);
    let folded: Vec<String> = words.iter().map(|w| fold(w)).collect();
    let text = fold(message);
    if UNRELATED.iter().any(|p| text.contains(p)) {
        return no("says-unrelated");
    }
    let pointed = points_at_code(&words, &folded, &text);
    if let Some(rule) = pointed.filter(|r| *r != "code-by-kind") {
        return yes(rule);
    }
    // "how does useEffect work in general?": a name the code holds, asked of in general.
    if ASKS_IN_GENERAL.iter().any(|p| text.contains(p)) {
        return no("asks-in-general");
    }
    let code = editor_code(editor);
    if names_an_identifier(message, &code) {
        return yes("identifier");
    }
    if only_asks_of_code(&folded) {
        return yes("bare-instruction");
    }
    // A request for new code, or how to do something of one's own, is its own subject
    // even when it names kinds of code ("hazme un middleware que loguee el método"); but
    // tests, docs or types asked for code named by its kind are for that code ("hazme
    // tests para las rutas", "write docstrings for the handlers"; not "a github action
    // that runs the tests").
    let new_code = NEW_CODE.iter().any(|o| starts_with_phrase(&text, o));
    let asks_for_tests = folded.iter().take(4).enumerate().any(|(i, w)| {
        FOR_CODE_AT_HAND.contains(&w.as_str())
            && folded[i + 1..]
                .iter()
                .take(2)
                .any(|n| matches!(n.as_str(), "for" | "para" | "de" | "of" | "to" | "a"))
    });
    if new_code && pointed.is_some() && asks_for_tests {
        return yes("code-by-kind");
    }
    if new_code || HOW_DO_I.iter().any(|o| starts_with_phrase(&text, o)) || asks_how_i_do(&folded) {
        return no("own-subject");
    }
    if pointed.is_some() && !mentions_the_language(&folded) {
        return yes("code-by-kind");
    }
    if changes_code(&folded) {
        return yes("change-request");
    }
    if OWN_SUBJECT.iter().any(|o| starts_with_phrase(&text, o))
        || asks_which_thing(&folded)
        || mentions_the_language(&folded)
        || names_a_thing_of_its_own(&folded)
    {
        return no("own-subject");
    }
    if shares_words(&folded, &code) {
        return yes("shared-words");
    }
    if !selection {
        return no("no-reference");
    }
    // A selection is the user's pointer: in doubt, it is what the message is about.
    yes("selection")
}

/// "what metrics does the runtime expose", "¿qué licencia tiene …?": which thing, of a
/// kind the code does not show (a behaviour word there — "what happens", "qué pasa" —
/// asks about the code).
pub(super) fn asks_which_thing(folded: &[String]) -> bool {
    let start = folded
        .iter()
        .position(|w| {
            !FILLER.contains(&w.as_str()) && !SMALL_TALK.contains(&w.as_str())
                || matches!(w.as_str(), "what" | "which" | "que" | "cual" | "cuales")
        })
        .unwrap_or(0);
    match (folded.get(start), folded.get(start + 1)) {
        (Some(q), Some(thing))
            if matches!(q.as_str(), "what" | "which" | "que" | "cual" | "cuales") =>
        {
            !FILLER.contains(&thing.as_str())
                && !ABOUT_CODE.contains(&thing.as_str())
                && !POINTERS.contains(&thing.as_str())
                && !SMALL_TALK.contains(&thing.as_str())
                && thing.chars().all(char::is_alphabetic)
        }
        _ => false,
    }
}

/// "¿cómo programo …?", "¿dónde pongo …?": a question about doing something of one's own
/// (a Spanish first-person verb after an interrogative).
pub(super) fn asks_how_i_do(folded: &[String]) -> bool {
    let start = folded
        .iter()
        .position(|w| !SMALL_TALK.contains(&w.as_str()) || matches!(w.as_str(), "como" | "que"))
        .unwrap_or(0);
    let Some(q) = folded.get(start) else {
        return false;
    };
    if !matches!(
        q.as_str(),
        "como" | "donde" | "cuando" | "cuanto" | "cuantos" | "que" | "cual" | "cuales"
    ) {
        return false;
    }
    // Articles that are never a clitic ("la", "los", "las" are both: "¿cómo la uso?").
    let after_article = |i: usize| {
        folded.get(i.wrapping_sub(1)).is_some_and(|w| {
            matches!(
                w.as_str(),
                "el" | "un" | "una" | "mi" | "mis" | "tu" | "su" | "nuestro" | "nuestra"
            )
        })
    };
    // programo, subo, activo, devuelvo, creo, leo, uso (not "como lo", "qué hace esto"),
    // within a few words ("qué endpoint uso para …").
    (start + 1..folded.len()).take(3).any(|i| {
        let verb = &folded[i];
        verb.len() >= 3
            && verb.ends_with('o')
            // "qué hace el segundo endpoint": after an article, a noun or an ordinal.
            && !after_article(i)
            && !ORDINALS.contains(&verb.as_str())
            // Not a gerund or a participle ("procesando", "configurado").
            && !["ando", "iendo", "ado", "ido"].iter().any(|e| verb.ends_with(e))
            && !POINTERS.contains(&verb.as_str())
            && !CODE_NOUNS.contains(&verb.as_str())
            && !matches!(
                verb.as_str(),
                "todo"
                    | "algo"
                    | "tipo"
                    | "modo"
                    | "caso"
                    | "nuevo"
                    | "mismo"
                    | "otro"
                    | "cuando"
                    | "donde"
                    | "como"
                    | "cuanto"
                    | "esto"
                    | "eso"
                    | "ejemplo"
                    | "archivo"
                    | "fichero"
                    | "proyecto"
                    | "metodo"
                    | "objeto"
                    | "campo"
                    | "formato"
                    | "texto"
                    | "numero"
                    | "puerto"
                    | "pero"
                    | "o"
            )
    })
}

/// "in brisa", "en brisa", "brisa's": a question about the language, not the code.
pub(super) fn mentions_the_language(folded: &[String]) -> bool {
    folded.iter().any(|w| w == "brisa")
}

/// Asking how to do something of one's own, with no pointer at the code.
pub(super) const HOW_DO_I: &[&str] = &[
    "how do i",
    "how can i",
    "how should i",
    "how would i",
    "how to",
    "como hago",
    "como puedo",
    "como se hace",
];

/// What a message says when it is not about the code at hand.
pub(super) const UNRELATED: &[&str] = &[
    "unrelated to this",
    "unrelated to the code",
    "not about this",
    "not related to this",
    "different question",
    "other question",
    "another question",
    "nada que ver con esto",
    "nada que ver con el codigo",
    "no tiene que ver con esto",
    "aparte de esto",
    "otra pregunta",
    "otra cosa",
    "cambiando de tema",
    "off topic",
];

/// Openings of a request for new code (with an object of its own).
#[rustfmt::skip]
pub(super) const NEW_CODE: &[&str] = &[
    "write a", "write an", "write me", "create a", "create an", "generate a", "generate an",
    "make a", "make an", "make me", "build a", "build an", "implement a", "implement an",
    "give me a", "give me an", "i need a", "i need an", "i want a", "scaffold a", "code a",
    "dame un", "dame una", "hazme un", "hazme una", "haceme un", "haceme una", "escribe un",
    "escribe una", "escribeme un", "escribeme una", "crea un", "crea una", "creame un",
    "creame una", "genera un", "genera una", "generame un", "generame una", "necesito un",
    "necesito una", "quiero un", "quiero una", "implementa un", "implementa una", "arma un",
    "armame un",
];

/// Verbs that change code that exists ("add a method to …", "documenta las funciones",
/// "traduce los textos"), opening a request: with code in the editor, that code.
#[rustfmt::skip]
pub(super) static CHANGING_VERBS: WordSet = WordSet::new(&[
    "add", "append", "insert", "remove", "delete", "drop", "rename", "document", "translate",
    "refactor", "split", "extract", "move", "update", "change", "replace", "wrap", "convert",
    "migrate", "port", "rewrite", "reorder", "sort", "merge", "inline", "parametrize",
    "parameterize", "annotate", "type", "comment", "uncomment", "test", "cover", "handle",
    "catch", "validate", "sanitize", "escape", "paginate", "cache", "memoize", "log", "guard",
    "anade", "agrega", "agregale", "anadele", "pon", "ponle", "quita", "quitale", "elimina",
    "borra", "renombra", "documenta", "traduce", "traduci", "refactoriza", "divide", "separa",
    "extrae", "mueve", "actualiza", "cambia", "reemplaza", "sustituye", "envuelve", "convierte",
    "pasa", "pasalo", "migra", "reescribe", "reordena", "ordena", "junta", "une", "comenta",
    "anota", "tipa", "prueba", "testea", "cubre", "maneja", "captura", "valida", "sanea",
    "escapa", "pagina", "cachea", "loguea", "registra", "escribeme", "escribele",
]);

/// Whether the message opens (past politeness) with a verb that changes existing code.
pub(super) fn changes_code(folded: &[String]) -> bool {
    folded
        .iter()
        .find(|w| {
            !FILLER.contains(&w.as_str())
                && !SMALL_TALK.contains(&w.as_str())
                && !matches!(
                    w.as_str(),
                    "can"
                        | "could"
                        | "would"
                        | "u"
                        | "you"
                        | "please"
                        | "pls"
                        | "puedes"
                        | "podrias"
                        | "podes"
                        | "porfa"
                        | "faltan"
                        | "falta"
                )
        })
        .is_some_and(|w| CHANGING_VERBS.contains(&w.as_str()))
}

/// A word (or two) that points at the code: a pointer, a Spanish clitic, a kind of code
/// after a definite article.
pub(super) fn points_at_code(
    words: &[String],
    folded: &[String],
    text: &str,
) -> Option<&'static str> {
    let mut by_kind = false;
    // Found once for the whole message (checked for every pronoun, they made a message of
    // many pronouns quadratic).
    let first_thing = folded.iter().position(|f| names_a_thing(f));
    let names_code = folded.iter().any(|f| CODE_NOUNS.contains(&f.as_str()));
    for (i, w) in words.iter().enumerate() {
        let next = folded.get(i + 1).map(String::as_str);
        match w.as_str() {
            // "is it possible to …" points at nothing.
            "it" if i > 0 && folded[i - 1] == "is" && next == Some("possible") => {}
            // Spanish "lo que …" is an article.
            "lo" if next == Some("que") || next == Some("mismo") => {}
            // "esta" (is) typed without its accent, before how it is.
            "esta"
                if next.is_some_and(|n| {
                    matches!(
                        n,
                        "bien" | "mal" | "correcto" | "correcta" | "ok" | "roto" | "rota"
                    )
                }) =>
            {
                return Some("pointer")
            }
            // "that" joins clauses ("a function that parses"); it points only at a kind
            // of code ("that loop") or at the end of a question ("what does that do?").
            "that"
                if next.is_some_and(|n| CODE_NOUNS.contains(&n))
                    || (i > 0
                        && matches!(
                            folded[i - 1].as_str(),
                            "does" | "is" | "do" | "fix" | "explain"
                        )) =>
            {
                return Some("pointer");
            }
            "that" => {}
            // A pronoun after something it can stand for points at that, not at the code:
            // "is there a native windows runtime or is it wsl only", "qué licencia tiene
            // brisa? lo quiero usar …".
            // So does one after the code named by its kind ("write a function that parses
            // the json and returns it"); "here", "this" still point.
            "it" | "its" | "it's" | "they" | "them" | "their" | "lo" | "la" | "le"
                if by_kind || first_thing.is_some_and(|t| t < i) && !names_code => {}
            w if POINTERS.contains(&w) => return Some("pointer"),
            _ => {}
        }
        let f = &folded[i];
        if let Some(stem) = ["los", "las", "lo", "la", "le"]
            .iter()
            .find_map(|c| f.strip_suffix(c))
        {
            if CLITIC_VERBS.contains(&stem) || CLITIC_VERBS.contains(&stem.trim_end_matches("me")) {
                return Some("clitic");
            }
        }
        // "the second test", "la última función": an ordinal between them.
        let (next, at) = match next {
            Some(n) if ORDINALS.contains(&n) => (folded.get(i + 2).map(String::as_str), i + 1),
            other => (other, i),
        };
        let i = at;
        if DEFINITE.contains(&f.as_str()) && next.is_some_and(|n| CODE_NOUNS.contains(&n)) {
            // "the server port" is not code; "the handler", "la migración" are; "the match
            // statement", "el bloque always" name a construct of the language.
            let construct = next.is_some_and(|n| {
                matches!(
                    n,
                    "block"
                        | "statement"
                        | "keyword"
                        | "operator"
                        | "clause"
                        | "bloque"
                        | "sentencia"
                        | "clausula"
                        | "operador"
                        | "palabra"
                )
            });
            let named = construct
                && folded.get(i + 2).is_some_and(|a| {
                    let a = a.as_str();
                    !(FILLER.contains(&a) || ABOUT_CODE.contains(&a) || POINTERS.contains(&a))
                });
            if !named {
                // A pointer further on says more ("summarize the routes in here").
                by_kind = true;
            }
        }
    }
    if text.contains("selected") || text.contains("seleccionado") {
        return Some("pointer");
    }
    by_kind.then_some("code-by-kind")
}

/// "… un canal de búfer cero", "… a circular import": an indefinite article before a word
/// of its own: the message is about that kind of thing, not the code at hand.
pub(super) fn names_a_thing_of_its_own(folded: &[String]) -> bool {
    folded.windows(2).any(|w| {
        matches!(w[0].as_str(), "a" | "an" | "un" | "una" | "unos" | "unas")
            && names_a_thing(&w[1])
            && !CODE_NOUNS.contains(&w[1].as_str())
    })
}

/// A word that names a thing of its own (a pronoun after it may stand for it).
pub(super) fn names_a_thing(w: &str) -> bool {
    w.len() >= 4
        && !FILLER.contains(&w)
        && !SMALL_TALK.contains(&w)
        && !ABOUT_CODE.contains(&w)
        && !POINTERS.contains(&w)
        && !CHANGING_VERBS.contains(&w)
        && !CLITIC_VERBS.contains(&w)
        && !matches!(
            w,
            "what"
                | "does"
                | "when"
                | "where"
                | "which"
                | "como"
                | "cuando"
                | "donde"
                | "puedo"
                | "quiero"
                | "need"
                | "want"
                | "know"
                | "tell"
                | "dime"
                | "decime"
                | "sabes"
        )
}

/// Whether the message says nothing but what to do with, or ask of, code it does not name.
pub(super) fn only_asks_of_code(folded: &[String]) -> bool {
    let content: Vec<&String> = folded
        .iter()
        .filter(|w| !FILLER.contains(&w.as_str()) && !SMALL_TALK.contains(&w.as_str()))
        .collect();
    !content.is_empty()
        && content.len() <= 8
        && content.iter().all(|w| {
            // Kinds of code count with an article or a pointer only ("explain the
            // function"): "what is an endpoint?" asks about endpoints.
            ABOUT_CODE.contains(&w.as_str()) || w.chars().all(|c| c.is_ascii_digit())
        })
}
