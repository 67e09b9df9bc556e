//! Understanding a turn without a model call, in English and Spanish: whether the message
//! points at the code in the editor, whether the whole message is small talk, and whether
//! it is a follow-up whose subject is in the turns before it.
//!
//! Each decision says which rule made it (logged and counted, never the text). Measured on
//! `examples/eval/turns.jsonl` with `assist-gateway eval turns` (see README, "Understanding
//! the turn").
//!
//! - **The editor.** A selection is the user's explicit pointer: with one, the message is
//!   about it unless it is plainly a question of its own (a how-to, a definition, a request
//!   for new code with an object of its own). The message is about the editor's code when
//!   it points at it (this / it / here / these lines / esto / aquí / explícalo), names an
//!   identifier that is in it, names the code by its kind with a definite article ("the
//!   handler", "la migración"), or says nothing but what to do or ask of it ("explain",
//!   "tests pls", "any bugs?", "¿por qué falla?"). With an open file and no selection the
//!   same signals count, without the benefit of the doubt.
//! - **Small talk** only when nothing is left once greetings, thanks and acknowledgements
//!   are taken away, or when the message asks about the conversation itself ("say that
//!   again, shorter").
//! - **Follow-ups.** A message that does not carry its subject (short, generic, anaphoric,
//!   or starting "and …" / "y …") is searched together with the earlier user messages that
//!   do.

use crate::context::EditorContext;
use crate::llm::{Message, Role};

/// A decision and the rule that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Why {
    pub yes: bool,
    pub rule: &'static str,
}

const fn yes(rule: &'static str) -> Why {
    Why { yes: true, rule }
}

const fn no(rule: &'static str) -> Why {
    Why { yes: false, rule }
}

/// Lowercase, without accents (á → a, ñ → n, ü → u), so that a word is found however it
/// was typed.
fn fold(text: &str) -> String {
    text.chars()
        .flat_map(char::to_lowercase)
        .map(|c| match c {
            'á' | 'à' | 'ä' | 'â' => 'a',
            'é' | 'è' | 'ë' | 'ê' => 'e',
            'í' | 'ì' | 'ï' | 'î' => 'i',
            'ó' | 'ò' | 'ö' | 'ô' => 'o',
            'ú' | 'ù' | 'ü' | 'û' => 'u',
            'ñ' => 'n',
            other => other,
        })
        .collect()
}

/// The words of a message as typed (lowercase, accents kept), split on anything that is
/// not a letter, a digit or `_`.
fn words_of(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The message as folded words.
fn folded_words(text: &str) -> Vec<String> {
    words_of(text).iter().map(|w| fold(w)).collect()
}

/// Words and phrases of greeting, thanks, acknowledgement and praise: a message made of
/// nothing else is small talk.
#[rustfmt::skip]
const SMALL_TALK: &[&str] = &[
    "hi", "hello", "hey", "heya", "yo", "hiya", "howdy", "thanks", "thank", "thx", "ty", "tysm",
    "cheers", "ok", "okay", "okey", "k", "kk", "cool", "nice", "great", "awesome", "perfect",
    "excellent", "brilliant", "amazing", "wonderful", "fantastic", "superb", "neat", "sweet",
    "good", "morning", "afternoon", "evening", "night", "bye", "goodbye", "later", "see", "ya",
    "got", "it", "sure", "yes", "yep", "yeah", "yup", "no", "nope", "lol", "haha", "wow", "you",
    "rock", "are", "the", "best", "a", "lot", "so", "much", "very", "really", "works", "worked",
    "working", "now", "that", "this", "did", "trick", "makes", "sense", "all", "right",
    "alright", "fine", "understood", "gotcha", "noted", "appreciate", "helpful", "help",
    "again", "man", "dude", "buddy", "friend", "mate", "team", "there", "everyone", "np",
    "problem", "worries", "welcome", "thumbs", "up", "love", "it's", "its", "is", "was", "and",
    "for", "your", "we", "re", "m", "s", "i", "me", "my", "just", "what", "needed", "exactly",
    "hola", "gracias", "muchas", "mil", "muchisimas", "vale", "perfecto", "perfecta", "genial",
    "buenas", "buenos", "buena", "dias", "tardes", "noches", "adios", "chao", "hasta", "luego",
    "pronto", "si", "claro", "de", "acuerdo", "entendido", "guay", "excelente", "funciona",
    "funciono", "ya", "bien", "muy", "crack", "eres", "un", "una", "todo", "ahora", "por",
    "fin", "eso", "era", "lo", "que", "necesitaba", "me", "sirvio", "sirve", "ayuda", "ayudado",
    "has", "ha", "sido", "super", "util", "ok", "okey", "oki", "vaya", "jaja", "jajaja",
    "listo", "hecho", "entiendo", "ahi", "va", "dale", "venga", "estupendo", "fenomenal",
    "maravilla", "gran", "trabajo", "gracia", "tio", "amigo", "saludos", "que", "tal", "como",
    "estas", "bro", "merci", "tu", "te", "lo", "la", "el", "pues", "oh", "ah", "uh", "hmm",
    "mm", "bueno", "well", "good", "job", "work", "nicely", "done",
    "nvm", "never", "mind", "figured", "out", "sorted", "solved", "fixed", "worries", "anyway", "anyways", "olvidalo", "olvida", "resuelto", "arreglado", "solucionado", "nada", "dejalo", "da", "igual",
    "tomorrow", "manana", "tonight", "soon", "weekend", "nos", "vemos", "catch", "cya", "ttyl", "gn", "gm", "lifesaver", "legend", "hero", "genius", "champ", "star", "king", "queen", "saved", "saviour", "savior", "godsend", "wait", "hold", "on", "um", "umm", "er", "erm", "ohh", "oof", "ooh", "yay", "woo", "woohoo", "hurray", "coolio", "tks", "thnx", "thanx", "thks", "ta", "danke", "grazie", "obrigado", "lmao", "lmfao", "rofl", "xd", "xdd", "jeje", "jiji", "jajajaja", "hahaha", "hehe", "buenisimo", "buenisima", "genialisimo", "increible", "brutal", "maquina", "grande", "fenomeno", "idolo", "capo", "jefe", "maestro", "figura", "maximo", "top", "mola", "molo", "mola", "chulo", "chula", "graciass", "totales", "vaaale", "thankyou", "appreciated", "appreciated", "kudos", "props", "respect", "have", "day", "weekend", "take", "care", "luck", "cuidate", "suerte", "feliz", "dia", "noche", "buen", "finde", "abrazo", "besos",
    "esta", "está", "estoy", "eran", "ser", "hoy", "days", "call", "calling", "gonna", "wanna", "gotta", "paciencia", "patience", "time", "tiempo", "rato", "todos", "terminado", "acabado", "finished", "finally", "porfa", "plis", "pliss", "please", "pls",
    "sorry", "apologies", "bad", "oops", "whoops", "perdona", "perdon", "disculpa", "disculpas", "siento", "culpa", "mea", "salvaste", "salvado", "horas", "hours", "🙏",
    "wild", "crazy", "damn", "omg", "interesting", "interesante", "curioso", "loco", "locura",
];

/// Whether the whole message is small talk or about the conversation (no search), with
/// this editor context: "explain like I'm five", "shorter", "in Spanish" with code in the
/// editor ask it of the code, unless they name the answer ("your last answer").
pub fn conversation_only(message: &str, editor: &EditorContext) -> Option<&'static str> {
    let rule = small_talk(message)?;
    if rule == "about-the-conversation" && editor.has_code() {
        let folded = fold(message);
        let names_the_answer = [
            "answer",
            "respuesta",
            "reply",
            "said",
            "told",
            "tell me",
            "you say",
            "dijiste",
            "dicho",
            "last part",
            "lo ultimo",
            "that again",
            "eso otra",
            "repeat",
            "repite",
            "from now on",
            "a partir de ahora",
        ]
        .iter()
        .any(|p| folded.contains(p));
        if !names_the_answer {
            return None;
        }
    }
    Some(rule)
}

/// Whether a word is small talk, however stretched ("graciasss", "holaaa", "okkk") or
/// laughed ("jajaja", "hahaha").
fn is_small_talk_word(w: &str) -> bool {
    if SMALL_TALK.contains(&w) {
        return true;
    }
    let laugh = w.len() >= 4
        && w.len().is_multiple_of(2)
        && w.as_bytes()
            .chunks(2)
            .all(|p| matches!(p, b"ja" | b"ha" | b"je" | b"he" | b"ji" | b"hi" | b"jo"));
    if laugh {
        return true;
    }
    // Runs of three or more of a letter, squeezed to one and to two.
    let squeeze = |keep: usize| {
        let mut out = String::with_capacity(w.len());
        let mut run = 0;
        let mut last = None;
        for c in w.chars() {
            run = if Some(c) == last { run + 1 } else { 1 };
            last = Some(c);
            if run <= keep {
                out.push(c);
            }
        }
        out
    };
    let one = squeeze(1);
    let two = squeeze(2);
    (one != w && SMALL_TALK.contains(&one.as_str()))
        || (two != w && SMALL_TALK.contains(&two.as_str()))
}

/// Phrases that ask about the conversation itself: answered from it, with no search.
#[rustfmt::skip]
const ABOUT_THE_CONVERSATION: &[&str] = &[
    "repeat that", "say that again", "say it again", "repeat your answer", "repeat the answer",
    "shorter", "more briefly", "in fewer words", "summarize your answer", "summarize that",
    "summarise that", "summarize what you said", "tl;dr", "tldr", "what did you mean",
    "what do you mean by that", "i don't understand", "i dont understand", "didn't understand",
    "didnt understand", "in other words", "other words", "your previous answer",
    "your last answer", "the last answer", "your answer", "in english", "in spanish",
    "reply in", "answer in", "translate your", "who are you", "what can you do", "how are you",
    "are you a bot", "what model are you", "repite", "repitelo", "repetir", "mas corto",
    "mas breve", "resumelo", "resume tu respuesta", "resumen de tu respuesta",
    "que quisiste decir", "que quieres decir", "no entendi", "no te entendi", "no he entendido",
    "no lo entiendo", "con otras palabras", "otras palabras", "tu respuesta anterior",
    "tu ultima respuesta", "lo que dijiste", "lo ultimo", "en ingles", "en espanol",
    "en castellano", "responde en", "contesta en", "traduce tu", "quien eres",
    "que puedes hacer", "como estas", "eres un bot",
    "de otra forma", "de otra manera", "de otro modo", "otra forma", "otra manera", "dilo", "dimelo", "say it", "explain it differently", "explain that differently", "in plain", "in simpler terms", "mas claro", "mas sencillo", "mas simple", "i'm confused", "im confused", "i am confused", "estoy perdido", "no lo pillo", "no lo capto", "what do you mean", "what did you say", "que dijiste", "como dices", "huh",
    "like i'm five", "like im five", "like i am five", "como si tuviera cinco", "explain like",
    "i asked you", "asked you", "did i ask", "te pregunte", "te he preguntado", "le pregunte", "last answer", "bullet points", "en una frase", "in one sentence", "in a sentence", "shorter version",
    "what did you tell me", "what did you say", "what you told me", "tell me before", "told me before", "que me dijiste", "lo que me dijiste", "que me has dicho",
];

/// Words a message about the conversation may carry besides its phrase.
#[rustfmt::skip]
const CONVERSATION_WORDS: &[&str] = &[
    "please", "pls", "plz", "can", "could", "you", "would", "again", "that", "it", "this",
    "now", "from", "on", "and", "but", "by", "the", "a", "an", "me", "for", "to", "with", "so",
    "just", "bit", "little", "more", "less", "one", "point", "sentence", "sentences", "words",
    "explanation", "answer", "response", "reply", "what", "said", "told", "last", "previous",
    "part", "say", "means", "mean", "meant", "i", "we", "do", "did", "understand", "por",
    "favor", "porfa", "puedes", "podrias", "me", "lo", "la", "eso", "esto", "otra", "vez", "de",
    "nuevo", "y", "pero", "en", "un", "una", "poco", "mas", "menos", "frase", "frases",
    "palabras", "respuesta", "explicacion", "lo", "que", "dijiste", "ultimo", "anterior",
    "parte", "decir", "dices", "quiero", "quieres", "entendido", "entiendo", "now", "ahora",
    "partir", "desde", "aqui", "contestame", "respondeme", "dimelo", "explicamelo", "please",
    "thanks", "gracias", "ok", "vale", "sorry", "perdon",
    "he", "has", "dices", "dime", "decirlo", "summarize", "summarise", "resume", "resumir", "rephrase", "reword", "explain", "simpler", "simple", "briefly", "brief", "short", "version", "ingles", "espanol", "english", "spanish", "idioma", "language",
    "wait", "hold", "um", "hmm", "oh", "dilo", "decirmelo", "explicarlo", "explicarmelo", "forma", "manera", "modo", "saying", "meaning", "clarify", "clarification", "confused", "lost", "follow", "huh", "eh", "como", "otro", "differently", "different", "plainer", "plain", "terms", "clearer", "clear",
    "podes", "podria", "nada", "entendi", "entendiste", "repetirlo",
    "contestarme", "responderme", "contestar", "responder", "adelante", "like", "five", "cinco", "anos", "years", "old", "nino",
    "give", "versions", "put", "bullet", "bullets", "points", "list", "format", "formato", "asked", "ask", "first", "thing", "things", "today", "hoy", "oracion", "lista", "puntos", "vinetas", "was", "were",
    "tell", "told", "before", "antes", "dicho", "dijiste", "has", "me",
];

/// Whether the whole message is small talk or about the conversation itself (no search
/// needed); the rule that says so, or `None`.
pub fn small_talk(message: &str) -> Option<&'static str> {
    let folded = fold(message);
    let words = folded_words(message);
    if words.is_empty() {
        // Emoji, punctuation: "👍", "!!".
        return Some("no-words");
    }
    if asks_about_something_at_hand(&words) {
        // "is this right", "does it work?": a question, however small its words.
        return None;
    }
    if words.iter().all(|w| is_small_talk_word(w)) {
        return Some("greeting-only");
    }
    if thanks_or_goodbye(message, &words) {
        return Some("thanks-or-goodbye");
    }
    if about_the_answers(&folded, &words) {
        return Some("about-the-conversation");
    }
    let phrases: Vec<&str> = ABOUT_THE_CONVERSATION
        .iter()
        .filter(|p| contains_phrase(&folded, p))
        .copied()
        .collect();
    if phrases.is_empty() {
        return None;
    }
    let rest_is_talk = words.iter().all(|w| {
        phrases
            .iter()
            .any(|p| p.split_whitespace().any(|pw| pw == w))
            || CONVERSATION_WORDS.contains(&w.as_str())
            || is_small_talk_word(w)
    });
    rest_is_talk.then_some("about-the-conversation")
}

/// Words that close a conversation or thank for it: with one of them, a message that asks
/// nothing and names no code is small talk whatever else it says ("gonna call it a day,
/// good night", "mil gracias por la paciencia", "eso era todo por hoy").
#[rustfmt::skip]
const ANCHORS: &[&str] = &[
    "thanks", "thank", "thx", "ty", "tysm", "thanx", "thnx", "cheers", "bye", "goodbye",
    "night", "later", "tomorrow", "lifesaver", "legend", "awesome", "perfect", "great",
    "brilliant", "amazing", "excellent", "appreciate", "appreciated", "gracias", "adios",
    "chao", "hasta", "luego", "manana", "perfecto", "perfecta", "genial", "buenisimo",
    "excelente", "crack", "estupendo", "vale", "listo", "done", "todo", "hoy", "cheers",
    "grande", "maquina", "idolo", "buenas", "noches", "finde", "weekend", "ciao",
    "sorry", "apologies", "apologize", "bad", "oops", "whoops", "perdona", "perdon", "disculpa", "disculpas", "siento", "culpa", "saved", "salvaste", "salvado", "salvada", "hours", "horas",
    "lol", "lmao", "haha", "jaja", "jajaja", "wow", "damn", "crazy", "wild", "interesting", "interesante", "curioso", "loco", "locura", "omg",
];

fn thanks_or_goodbye(message: &str, words: &[String]) -> bool {
    const ASKING: &[&str] = &[
        "what", "whats", "how", "why", "where", "when", "which", "who", "can", "could", "does",
        "do", "is", "are", "que", "como", "por", "donde", "cuando", "cual", "cuanto", "quien",
        "puedo", "puedes", "hay",
    ];
    if words.iter().any(|w| {
        ASKING.contains(&w.as_str()) && !matches!(w.as_str(), "is" | "que" | "por" | "como")
    }) {
        return false;
    }
    let anchored = words.iter().any(|w| {
        ANCHORS.contains(&w.as_str())
            || is_small_talk_word(w) && ANCHORS.iter().any(|a| w.starts_with(a))
    });
    if !anchored || message.contains('?') || message.contains('¿') {
        return false;
    }
    // Nothing asked or named: no code, no request, no identifier, no number.
    let technical = words.iter().any(|w| {
        (ABOUT_CODE.contains(&w.as_str()) && !is_small_talk_word(w))
            || CODE_NOUNS.contains(&w.as_str())
            || w.chars().any(|c| c.is_ascii_digit())
    });
    let code_like = message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(looks_like_identifier)
        || message.contains(['(', ')', '{', '}', '=', '/', '`']);
    !technical && !code_like && words.len() <= 14
}

/// Verbs that ask for the answers themselves to change: repeated, shortened, summarised,
/// reworded, translated; and preferences for the answers to come.
#[rustfmt::skip]
const ABOUT_ANSWERS: &[&str] = &[
    "repeat", "rephrase", "reword", "summarize", "summarise", "shorten", "shorter", "tldr",
    "translate", "clarify", "elaborate", "repite", "repitelo", "repetir", "resume",
    "resumelo", "resumir", "acorta", "acortalo", "traduce", "traducelo", "traduci", "dilo",
    "dimelo", "decimelo", "reformula", "reformulalo", "aclara", "aclaralo",
    "eli5", "contestarme", "responderme", "contesta", "responde", "answer", "reply",
    "resumemelo", "resumime", "simplify", "simplifica", "simplificalo", "version",
];

/// "repeat the last part", "too long, summarize", "resúmelo en una línea", "from now on
/// keep the answers short": a request about the answers, with nothing of code in it.
fn about_the_answers(folded: &str, words: &[String]) -> bool {
    let preference = [
        "from now on",
        "a partir de ahora",
        "de ahora en adelante",
        "keep the answers",
        "keep your answers",
        "always answer",
        "siempre responde",
        "responde siempre",
    ]
    .iter()
    .any(|p| contains_phrase(folded, p));
    let asks = preference || words.iter().any(|w| ABOUT_ANSWERS.contains(&w.as_str()));
    if !asks {
        return false;
    }
    // Of code, at most the word itself ("no code unless I ask").
    let technical = words
        .iter()
        .filter(|w| {
            !ABOUT_ANSWERS.contains(&w.as_str())
                && !CONVERSATION_WORDS.contains(&w.as_str())
                && !is_small_talk_word(w)
                && !FILLER.contains(&w.as_str())
                && !matches!(
                    w.as_str(),
                    "too"
                        | "long"
                        | "largo"
                        | "larga"
                        | "part"
                        | "parte"
                        | "line"
                        | "linea"
                        | "una"
                        | "one"
                        | "code"
                        | "codigo"
                        | "unless"
                        | "ask"
                        | "pida"
                        | "pido"
                        | "keep"
                        | "answers"
                        | "respuestas"
                        | "short"
                        | "cortas"
                        | "corto"
                        | "cortos"
                        | "breve"
                        | "breves"
                        | "last"
                        | "final"
                        | "end"
                        | "all"
                        | "whole"
                )
        })
        .count();
    technical == 0 && words.len() <= 16
}

/// "is this right", "does it work", "¿esto está bien?": an auxiliary beside a pointer.
fn asks_about_something_at_hand(words: &[String]) -> bool {
    const AUXILIARIES: &[&str] = &[
        "is", "are", "does", "do", "can", "could", "should", "will", "would", "was", "did", "es",
        "está", "esta", "funciona", "puede", "hay", "va",
    ];
    words.windows(2).any(|w| {
        let (a, b) = (w[0].as_str(), w[1].as_str());
        (AUXILIARIES.contains(&a) && POINTERS.contains(&b) && b != "lo")
            || (POINTERS.contains(&a) && !matches!(a, "lo" | "it") && AUXILIARIES.contains(&b))
    })
}

/// Whether `phrase` (folded) stands in `text` (folded) as whole words.
fn contains_phrase(text: &str, phrase: &str) -> bool {
    let mut from = 0;
    while let Some(at) = text[from..].find(phrase) {
        let start = from + at;
        let end = start + phrase.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + phrase.len().max(1);
        if from >= text.len() {
            break;
        }
        while !text.is_char_boundary(from) {
            from += 1;
        }
    }
    false
}

/// Words that point at something at hand (as typed, lowercase).
#[rustfmt::skip]
const POINTERS: &[&str] = &[
    "this", "these", "those", "it", "its", "it's", "here", "above", "below", "esto", "este",
    "esta", "estos", "estas", "eso", "ese", "esa", "esos", "esas", "aqui", "aquí", "aca", "acá",
    "ahi", "ahí", "lo",
    "they", "them", "their", "theirs",
    "le",
];

/// Spanish imperatives that take the code as a clitic (`explícalo`, `optimízalo`).
#[rustfmt::skip]
const CLITIC_VERBS: &[&str] = &[
    "explica", "explicame", "optimiza", "arregla", "haz", "hazme", "prueba", "documenta",
    "refactoriza", "revisa", "simplifica", "mejora", "traduce", "convierte", "comenta",
    "corrige", "reescribe", "limpia", "testea", "cambia", "divide", "ordena", "pasa", "muestra",
    "analiza", "depura", "formatea", "renombra", "acorta", "resume", "reduce", "ejecuta",
    "valida", "comprueba", "mira", "chequea", "adapta", "migra", "porta", "tipa", "parte",
    "separa", "extrae", "ordena",
    "agrega", "agregale", "anade", "pon", "ponle", "quita", "quitale", "mete", "metele", "saca", "sacale", "cambiale", "borra", "elimina", "mueve", "copia", "pega", "integra", "conecta", "envuelve", "encapsula", "factoriza", "paraleliza", "cachea", "memoiza", "anota", "comentale", "escribe", "escribele", "genera", "generale", "crea", "creale", "implementa", "completa", "termina", "sigue", "continua", "lee", "leele", "corre", "fijate", "hace", "haceme", "decime", "traduci", "traducime", "mejorame", "usa", "sube", "baja",
];

/// Kinds of code a message may name the code in the editor by ("the handler", "la
/// migración"), after a definite article or a possessive.
#[rustfmt::skip]
const CODE_NOUNS: &[&str] = &[
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
];

#[rustfmt::skip]
const ORDINALS: &[&str] = &[
    "first", "second", "third", "fourth", "last", "next", "previous", "other", "same", "1st",
    "2nd", "3rd", "4th", "top", "bottom", "inner", "outer", "primer", "primera", "primero",
    "segundo", "segunda", "tercer", "tercera", "ultimo", "ultima", "siguiente", "anterior",
    "otro", "otra", "mismo", "misma",
];

const DEFINITE: &[&str] = &[
    "the", "my", "our", "that", "el", "la", "los", "las", "mi", "mis", "nuestro", "nuestra",
];

/// What a message may ask of code without naming anything else: instructions, aspects of
/// code to add or check, and how code behaves. A message made only of these (and filler)
/// is about the code at hand.
#[rustfmt::skip]
const ABOUT_CODE: &[&str] = &[
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
];

/// Words that carry no subject: articles, pronouns, auxiliaries, politeness.
#[rustfmt::skip]
const FILLER: &[&str] = &[
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
];

/// Openings of a question or request with a subject of its own: a how-to, a definition,
/// a request for new code.
#[rustfmt::skip]
const OWN_SUBJECT: &[&str] = &[
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
    let code = editor_code(editor);
    if names_an_identifier(message, &code) {
        return yes("identifier");
    }
    if only_asks_of_code(&folded) {
        return yes("bare-instruction");
    }
    // A request for new code, or how to do something of one's own, is its own subject
    // even when it names kinds of code ("hazme un middleware que loguee el método").
    if NEW_CODE.iter().any(|o| starts_with_phrase(&text, o))
        || HOW_DO_I.iter().any(|o| starts_with_phrase(&text, o))
        || asks_how_i_do(&folded)
    {
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
fn asks_which_thing(folded: &[String]) -> bool {
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
fn asks_how_i_do(folded: &[String]) -> bool {
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
    // programo, subo, activo, devuelvo, creo, leo, uso (not "como lo", "qué hace esto"),
    // within a few words ("qué endpoint uso para …").
    folded.iter().skip(start + 1).take(3).any(|verb| {
        verb.len() >= 3
            && verb.ends_with('o')
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

/// The text of the code a message may refer to.
fn editor_code(editor: &EditorContext) -> String {
    let mut code = String::new();
    for part in [
        &editor.selected_text,
        &editor.editor_content,
        &editor.extra_context,
    ] {
        code.push_str(part);
        code.push('\n');
    }
    for item in &editor.items {
        code.push_str(&item.content);
        code.push('\n');
    }
    code
}

/// "in brisa", "en brisa", "brisa's": a question about the language, not the code.
fn mentions_the_language(folded: &[String]) -> bool {
    folded.iter().any(|w| w == "brisa")
}

/// Asking how to do something of one's own, with no pointer at the code.
const HOW_DO_I: &[&str] = &[
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
const UNRELATED: &[&str] = &[
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
const NEW_CODE: &[&str] = &[
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
const CHANGING_VERBS: &[&str] = &[
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
];

/// Whether the message opens (past politeness) with a verb that changes existing code.
fn changes_code(folded: &[String]) -> bool {
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

/// The words of code, folded, with identifiers split into their parts
/// (`readinessProbe` → readinessprobe, readiness, probe).
fn code_words(code: &str) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for word in code.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.len() < 4 {
            continue;
        }
        out.insert(fold(word));
        let mut part = String::new();
        let mut previous_lower = false;
        for c in word.chars() {
            if c == '_' || (c.is_uppercase() && previous_lower) {
                if part.len() >= 4 {
                    out.insert(fold(&part));
                }
                part.clear();
            }
            if c != '_' {
                part.push(c);
            }
            previous_lower = c.is_lowercase();
        }
        if part.len() >= 4 {
            out.insert(fold(&part));
        }
    }
    out
}

/// Whether the message shares two words of its own (or its only one) with the code, as a
/// word or by the start of one ("probes" / readinessProbe, "peticiones" in a string).
fn shares_words(folded: &[String], code: &str) -> bool {
    let own: Vec<&String> = folded
        .iter()
        .filter(|w| {
            w.len() >= 4
                && w.as_str() != "brisa"
                && !FILLER.contains(&w.as_str())
                && !SMALL_TALK.contains(&w.as_str())
                && !ABOUT_CODE.contains(&w.as_str())
        })
        .collect();
    if own.is_empty() || code.trim().is_empty() {
        return false;
    }
    let words = code_words(code);
    let stems: std::collections::HashSet<&str> = words
        .iter()
        .filter(|w| w.len() >= 5)
        .filter_map(|w| w.get(..5))
        .collect();
    let shared = own
        .iter()
        .filter(|w| {
            words.contains(w.as_str())
                || w.get(..5)
                    .is_some_and(|s| w.len() >= 5 && stems.contains(s))
        })
        .count();
    shared >= 2 || (shared == 1 && own.len() == 1)
}

/// Whether a folded text starts with a folded phrase, past a greeting or politeness.
fn starts_with_phrase(text: &str, phrase: &str) -> bool {
    let mut rest = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    for _ in 0..8 {
        if rest.starts_with(phrase)
            && rest[phrase.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric())
        {
            return true;
        }
        // Past one leading word of greeting or politeness ("hey, how do I …").
        let first = rest
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("");
        let skippable = SMALL_TALK.contains(&first)
            || matches!(
                first,
                "can"
                    | "could"
                    | "would"
                    | "will"
                    | "u"
                    | "you"
                    | "please"
                    | "pls"
                    | "plz"
                    | "kindly"
                    | "i"
                    | "need"
                    | "want"
                    | "puedes"
                    | "podrias"
                    | "podes"
                    | "me"
                    | "necesito"
                    | "quiero"
                    | "ok"
                    | "okay"
                    | "btw"
                    | "hmm"
                    | "oh"
                    | "wait"
                    | "disculpa"
                    | "disculpe"
                    | "perdon"
                    | "sorry"
                    | "por"
                    | "favor"
                    | "porfa"
            )
            || matches!(
                first,
                "so" | "and"
                    | "but"
                    | "also"
                    | "quick"
                    | "question"
                    | "q"
                    | "y"
                    | "pero"
                    | "entonces"
                    | "oye"
                    | "una"
                    | "pregunta"
                    | "otra"
                    | "another"
                    | "one"
                    | "more"
                    | "btw"
                    | "pues"
                    | "mira"
            );
        if !skippable || first.is_empty() {
            return false;
        }
        rest = rest[first.len()..].trim_start_matches(|c: char| !c.is_alphanumeric());
    }
    false
}

/// A word (or two) that points at the code: a pointer, a Spanish clitic, a kind of code
/// after a definite article.
fn points_at_code(words: &[String], folded: &[String], text: &str) -> Option<&'static str> {
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
            "it" | "its" | "it's" | "they" | "them" | "their" | "lo" | "la" | "le"
                if folded[..i].iter().any(|f| names_a_thing(f))
                    && !folded.iter().any(|f| CODE_NOUNS.contains(&f.as_str())) => {}
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
                return Some("code-by-kind");
            }
        }
    }
    if text.contains("selected") || text.contains("seleccionado") {
        return Some("pointer");
    }
    None
}

/// "… un canal de búfer cero", "… a circular import": an indefinite article before a word
/// of its own: the message is about that kind of thing, not the code at hand.
fn names_a_thing_of_its_own(folded: &[String]) -> bool {
    folded.windows(2).any(|w| {
        matches!(w[0].as_str(), "a" | "an" | "un" | "una" | "unos" | "unas")
            && names_a_thing(&w[1])
            && !CODE_NOUNS.contains(&w[1].as_str())
    })
}

/// A word that names a thing of its own (a pronoun after it may stand for it).
fn names_a_thing(w: &str) -> bool {
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

/// Whether the message names an identifier of the code: a word that looks like one
/// (camelCase, snake_case, a call) found in the code, or any word of five letters or more
/// that the code uses as an identifier.
fn names_an_identifier(message: &str, code: &str) -> bool {
    if code.trim().is_empty() {
        return false;
    }
    // Code quoted in backticks that the code holds: "what's the `?` doing in `row?[\"qty\"]`".
    let quoted = message
        .split('`')
        .skip(1)
        .step_by(2)
        .any(|q| !q.trim().is_empty() && code.contains(q.trim()));
    if quoted {
        return true;
    }
    let words: std::collections::HashSet<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 3)
        .collect();
    let named = defined_or_called(code);
    message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 3 && !w.eq_ignore_ascii_case("brisa"))
        .any(|w| {
            (looks_like_identifier(w) && words.contains(w))
                || (w.len() >= 4 && !is_common_word(w) && named.contains(w))
                // A number of three digits or more that the code holds (a port, a status).
                || (w.len() >= 3 && w.chars().all(|c| c.is_ascii_digit()) && words.contains(w))
        })
}

/// camelCase, snake_case, letters with digits: a name only code gives.
fn looks_like_identifier(w: &str) -> bool {
    w.len() >= 3
        && (w.contains('_')
            || w.chars().skip(1).any(char::is_uppercase)
            || (w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(char::is_alphabetic)))
}

/// The names code defines (`fn x`, `def x`, `let x`, `class X`, …) or calls (`x(`), where a
/// plain word ("total", "ventas") is an identifier and not prose in a comment.
fn defined_or_called(code: &str) -> std::collections::HashSet<&str> {
    const KEYWORDS: &[&str] = &[
        "fn",
        "def",
        "function",
        "func",
        "let",
        "const",
        "var",
        "class",
        "struct",
        "record",
        "enum",
        "type",
        "interface",
        "mut",
        "async",
        "pub",
        "static",
        "val",
        "trait",
        "impl",
    ];
    let mut names = std::collections::HashSet::new();
    let mut previous = "";
    let mut rest = code;
    while let Some(start) = rest.find(|c: char| c.is_alphanumeric() || c == '_') {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let word = &tail[..end];
        if KEYWORDS.contains(&previous) || tail[end..].trim_start().starts_with('(') {
            names.insert(word);
        }
        previous = word;
        rest = &tail[end..];
    }
    names
}

/// Words of five letters or more that code and prose share ("return", "error"), which
/// name no identifier of their own.
fn is_common_word(w: &str) -> bool {
    let f = fold(w);
    ABOUT_CODE.contains(&f.as_str())
        || FILLER.contains(&f.as_str())
        || CODE_NOUNS.contains(&f.as_str())
        || matches!(
            f.as_str(),
            "const"
                | "while"
                | "false"
                | "async"
                | "await"
                | "import"
                | "export"
                | "class"
                | "struct"
                | "print"
                | "string"
                | "number"
                | "value"
                | "param"
                | "params"
                | "request"
                | "response"
                | "where"
                | "select"
                | "update"
                | "delete"
                | "insert"
                | "limit"
                | "order"
                | "table"
                | "users"
                | "items"
                | "total"
                | "count"
                | "start"
                | "stop"
                | "first"
                | "other"
                | "every"
                | "after"
                | "before"
                | "which"
                | "there"
                | "their"
                | "about"
                | "these"
                | "those"
                | "would"
                | "could"
                | "should"
        )
}

/// Whether the message says nothing but what to do with, or ask of, code it does not name.
fn only_asks_of_code(folded: &[String]) -> bool {
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

/// Words that say "the same subject as before" and nothing of their own.
#[rustfmt::skip]
const FOLLOW_UP_WORDS: &[&str] = &[
    "example", "examples", "sample", "show", "more", "details", "detail", "another", "other",
    "same", "also", "else", "again", "instead", "case", "cases", "one", "ones", "way", "ways",
    "option", "options", "alternative", "alternatives", "difference", "explain", "elaborate",
    "expand", "continue", "go", "on", "further", "deeper", "test", "use", "using", "usage",
    "undo", "configure", "config", "set", "change", "handle", "fails", "fail", "error",
    "errors", "return", "returns", "work", "works", "mean", "why", "what", "how", "when",
    "where", "which", "who", "about", "and", "but", "then", "if", "or", "ejemplo", "ejemplos",
    "muestra", "muestrame", "ensename", "dame", "mas", "detalles", "otro", "otra", "otros",
    "otras", "mismo", "misma", "tambien", "caso", "casos", "forma", "formas", "manera",
    "opcion", "opciones", "alternativa", "diferencia", "explica", "explicame", "sigue",
    "continua", "prueba", "pruebo", "probar", "usa", "uso", "usar", "deshacer", "deshago",
    "configura", "configuro", "cambio", "cambiar", "maneja", "manejo", "falla", "fallar",
    "falle", "error", "errores", "devuelve", "devolver", "funciona", "significa", "porque",
    "que", "como", "cuando", "donde", "cual", "quien", "sobre", "y", "pero", "entonces", "si",
    "o", "hago", "hacer", "puedo", "pasa", "ocurre",
    "das", "dar", "give", "gives", "do", "does", "did", "make", "get", "gets", "got", "have", "has", "had", "then", "there", "puede", "pueden", "se", "tiene", "tienen", "hace", "hacen", "sirve", "need", "needs", "necesito", "quiero", "want", "back", "possible", "posible",
    "any", "some", "know", "should", "must", "alguna", "alguno", "algun", "deba", "debo", "conocer", "saber", "sepa", "compruebo", "comprobar", "check", "checks", "verify", "verifico", "verificar", "funcionado", "worked", "working", "tip", "tips", "trick", "tricks", "gotcha", "gotchas", "caveat", "caveats", "consejo", "consejos", "truco", "trucos", "pega", "pegas", "cuidado", "careful", "watch",
];

/// Pronouns that stand for the subject of the turn before.
#[rustfmt::skip]
const ANAPHORA: &[&str] = &[
    "it", "that", "this", "them", "those", "these", "they", "its", "one", "eso", "esto", "ese",
    "esa", "esos", "esas", "lo", "la", "los", "las", "le", "les", "ello",
];

/// A message's own words: not filler, not small talk, not generic follow-up words.
fn own_words(message: &str) -> Vec<String> {
    folded_words(message)
        .into_iter()
        .filter(|w| {
            !FILLER.contains(&w.as_str())
                && !SMALL_TALK.contains(&w.as_str())
                && !FOLLOW_UP_WORDS.contains(&w.as_str())
                && !infinitive_with_clitic(w)
        })
        .collect()
}

/// Openings that continue the turn before: "and …", "y …", "what about …".
const CONTINUING: &[&str] = &[
    "and ",
    "y ",
    "what about",
    "how about",
    "and what",
    "e ",
    "tambien ",
    "also ",
    "then ",
    "entonces ",
    "pero ",
    "but ",
];

/// Whether the message needs the turns before it for its subject: it starts "and …" /
/// "y …" / "what about …"; or it names no identifier and has at most one word of its
/// own ("¿se puede cambiar el prefijo?", "is there a shorter way?"), or at most three
/// with a pronoun standing for the subject before ("what does the client get back when
/// it's empty?").
pub fn lacks_subject(message: &str) -> bool {
    let folded = folded_words(message);
    let text = fold(message);
    let mut text = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    // Past "ok", "vale", "thanks": "vale, ¿y cómo deshago la última?".
    while let Some(first) = text.split(|c: char| !c.is_alphanumeric()).next() {
        if first.is_empty() || !SMALL_TALK.contains(&first) || first == "and" {
            break;
        }
        text = text[first.len()..].trim_start_matches(|c: char| !c.is_alphanumeric());
    }
    if CONTINUING.iter().any(|p| text.starts_with(p)) {
        return true;
    }
    let names_something = message
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(looks_like_identifier);
    if names_something {
        return false;
    }
    let own = own_words(message).len();
    let anaphoric = folded
        .iter()
        .any(|w| ANAPHORA.contains(&w.as_str()) || infinitive_with_clitic(w));
    own <= 1 || (anaphoric && own <= 3)
}

/// "hacerlo", "probarla", "usarlos": a Spanish infinitive carrying its object as a pronoun.
fn infinitive_with_clitic(w: &str) -> bool {
    ["los", "las", "lo", "la"].iter().any(|c| {
        w.strip_suffix(c).is_some_and(|stem| {
            stem.len() >= 4 && ["ar", "er", "ir"].iter().any(|e| stem.ends_with(e))
        })
    })
}

/// Most earlier user messages a follow-up's search reaches back over.
const FOLLOW_UP_REACH: usize = 3;

/// The search query for a message whose subject is in the conversation: the message with
/// the earlier user messages back to (and including) the last one that carries its own
/// subject; `None` when the message carries its own, or there is nothing before it.
pub fn follow_up_query(message: &str, history: &[Message]) -> Option<String> {
    if !lacks_subject(message) {
        return None;
    }
    let mut earlier = Vec::new();
    for m in history
        .iter()
        .rev()
        .filter(|m| m.role == Role::User && !m.content.trim().is_empty())
        .take(FOLLOW_UP_REACH)
    {
        if small_talk(&m.content).is_some() {
            continue;
        }
        earlier.push(m.content.trim());
        if !lacks_subject(&m.content) {
            break;
        }
    }
    if earlier.is_empty() {
        return None;
    }
    // The subject first; of the follow-up, only its own words ("example", "show me"
    // would find every page with an example in it).
    earlier.reverse();
    let mut query = earlier.join("\n");
    let own = own_words(message);
    if !own.is_empty() {
        query.push('\n');
        query.push_str(&own.join(" "));
    }
    Some(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(code: &str) -> EditorContext {
        EditorContext {
            selected_text: code.into(),
            ..EditorContext::default()
        }
    }

    fn open(code: &str) -> EditorContext {
        EditorContext {
            editor_content: code.into(),
            ..EditorContext::default()
        }
    }

    const CODE: &str = "let ep = registerEndpoint(\"GET\", \"/books/{id}\", get_book)\naddParam(ep, \"id\", Int, from: \"path\")";

    /// The reference's own sentences (architecture, "Intent detection examples"; PRD-0002's
    /// scenarios), verbatim, with the decision the documents give them.
    #[test]
    fn the_references_sentences_get_the_references_decisions() {
        for (message, want) in [
            ("Que significa AVAP?", false),
            ("dame un API de hello world", false),
            ("que hace este codigo?", true),
            ("fix this", true),
            ("como mejoro esto?", true),
            ("how does addVar work?", false),
            ("why is this not catching my error?", true),
            ("how does addVar work?", false),
        ] {
            assert_eq!(
                editor_reference(message, &selected(CODE)).yes,
                want,
                "{message}"
            );
        }
        // Scenario 2: a function open in the editor, nothing selected.
        assert!(editor_reference("what HTTP status codes can this return?", &open(CODE)).yes);
        // Without code there is nothing to refer to.
        assert!(!editor_reference("fix this", &EditorContext::default()).yes);
    }

    #[test]
    fn bare_instructions_and_questions_about_behaviour_mean_the_selection() {
        for message in [
            "explain",
            "refactor",
            "tests pls",
            "lgtm?",
            "any bugs?",
            "can this return null?",
            "why is it slow?",
            "what does it do?",
            "add logging to this",
            "¿por qué falla?",
            "optimízalo",
            "escribe un test para esto",
            "explícamelo",
            "what does get_book return when the id is missing?",
        ] {
            let why = editor_reference(message, &selected(CODE));
            assert!(why.yes, "{message}: {why:?}");
        }
    }

    #[test]
    fn general_questions_with_a_selection_are_their_own() {
        for message in [
            "How do I configure the server port?",
            "¿Cómo cancelo una tarea si tarda demasiado?",
            "write a function that parses ISO dates",
            "is it possible to run brisa on windows?",
        ] {
            let why = editor_reference(message, &selected(CODE));
            assert!(!why.yes, "{message}: {why:?}");
        }
    }

    #[test]
    fn asking_what_was_said_is_about_the_conversation_even_with_a_selection() {
        for message in [
            "and what did you tell me before that?",
            "what did you say before?",
            "¿qué me dijiste antes?",
        ] {
            assert!(
                conversation_only(message, &selected(CODE)).is_some(),
                "{message}"
            );
        }
        // Without naming what was said, the same kind of request is about the code.
        assert!(conversation_only("explain it differently", &selected(CODE)).is_none());
    }

    #[test]
    fn small_talk_is_only_a_whole_message_of_it() {
        for message in [
            "thanks!",
            "hola",
            "ok 👍",
            "genial, gracias",
            "👍",
            "say that again, shorter",
        ] {
            assert!(small_talk(message).is_some(), "{message}");
        }
        for message in [
            "hey, what does addVar return?",
            "Great, how do I configure retries?",
            "is addVar ok for globals?",
            "Is there a nice way to paginate results?",
            "hola, ¿cómo creo un endpoint?",
            "gracias! ¿y cómo hago una migración?",
        ] {
            assert!(small_talk(message).is_none(), "{message}");
        }
    }

    #[test]
    fn follow_ups_are_searched_with_the_subject_before_them() {
        let history = vec![
            Message::text(Role::User, "What is registerEndpoint?"),
            Message::text(Role::Assistant, "It registers a route."),
        ];
        let q = follow_up_query("Can you show me an example?", &history).unwrap();
        assert!(q.contains("registerEndpoint"), "{q}");
        // A chain of follow-ups reaches back to the subject.
        let mut longer = history.clone();
        longer.push(Message::text(Role::User, "¿y qué devuelve?"));
        longer.push(Message::text(Role::Assistant, "Un id."));
        let q = follow_up_query("and if it fails?", &longer).unwrap();
        assert!(q.contains("registerEndpoint"), "{q}");
        // A question with its own subject is searched as asked.
        assert_eq!(
            follow_up_query("How do I open a database transaction?", &history),
            None
        );
        assert_eq!(follow_up_query("Can you show me an example?", &[]), None);
    }
}
