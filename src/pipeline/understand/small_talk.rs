//! Small talk: a message that is nothing but greetings, thanks and acknowledgements, or
//! that asks about the conversation itself, is answered without a search.

use std::sync::LazyLock;

use super::*;
use crate::context::EditorContext;

/// Words and phrases of greeting, thanks, acknowledgement and praise: a message made of
/// nothing else is small talk.
#[rustfmt::skip]
pub(super) static SMALL_TALK: WordSet = WordSet::new(&[
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
    "brb", "afk", "coffee", "cafe", "cafecito", "lunch",
]);

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
pub(super) fn is_small_talk_word(w: &str) -> bool {
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
pub(super) const ABOUT_THE_CONVERSATION: &[&str] = &[
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
pub(super) static CONVERSATION_WORDS: WordSet = WordSet::new(&[
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
    "sin", "tanto", "rollo", "less", "fluff", "paja",
]);

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
    static PHRASES: LazyLock<Option<aho_corasick::AhoCorasick>> =
        LazyLock::new(|| phrase_automaton(ABOUT_THE_CONVERSATION));
    let phrases = phrases_in(&folded, ABOUT_THE_CONVERSATION, PHRASES.as_ref());
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
pub(super) const ANCHORS: &[&str] = &[
    "thanks", "thank", "thx", "ty", "tysm", "thanx", "thnx", "cheers", "bye", "goodbye",
    "night", "later", "tomorrow", "lifesaver", "legend", "awesome", "perfect", "great",
    "brilliant", "amazing", "excellent", "appreciate", "appreciated", "gracias", "adios",
    "chao", "hasta", "luego", "manana", "perfecto", "perfecta", "genial", "buenisimo",
    "excelente", "crack", "estupendo", "vale", "listo", "done", "todo", "hoy", "cheers",
    "grande", "maquina", "idolo", "buenas", "noches", "finde", "weekend", "ciao",
    "sorry", "apologies", "apologize", "bad", "oops", "whoops", "perdona", "perdon", "disculpa", "disculpas", "siento", "culpa", "saved", "salvaste", "salvado", "salvada", "hours", "horas",
    "lol", "lmao", "haha", "jaja", "jajaja", "wow", "damn", "crazy", "wild", "interesting", "interesante", "curioso", "loco", "locura", "omg",
];

/// Verbs that ask for something to be done, as infinitives (how Spanish is typed into a
/// search box: "apagar la máquina dentro de diez minutos") and as imperatives ("show the
/// last commits", "borra los logs de ayer"). A message with one is a request, whatever
/// words of time, leaving or thanks it also holds. Left out: verbs that also close a
/// conversation or ask about the answers ("see you", "take care", "call it a day",
/// "explain it again", "write it shorter"), and words as often news as requests ("all
/// set", "build passes now", "fix worked", "lo voy a probar", "a ver", "para" = "for").
#[rustfmt::skip]
static TASK_INFINITIVES: WordSet = WordSet::new(&[
    "apagar", "encender", "prender", "reiniciar", "mostrar", "listar", "copiar", "mover",
    "renombrar", "borrar", "eliminar", "buscar", "encontrar", "crear", "instalar",
    "desinstalar", "actualizar", "arrancar", "iniciar", "detener", "matar",
    "ejecutar", "comprimir", "descomprimir", "extraer", "montar", "desmontar", "formatear",
    "programar", "respaldar", "restaurar", "cambiar", "configurar", "activar", "desactivar",
    "habilitar", "deshabilitar", "contar", "ordenar", "comparar", "descargar", "subir",
    "abrir", "editar", "convertir", "generar", "arreglar", "limpiar", "vaciar", "fusionar",
    "deshacer", "revertir", "vigilar", "medir", "comprobar", "verificar", "desplegar",
    "compilar", "migrar", "conectar", "desconectar", "exportar", "importar",
    "archivar", "sincronizar", "sustituir", "reemplazar", "imprimir", "anadir", "agregar",
    "quitar", "guardar", "cifrar", "descifrar", "calcular", "liberar", "cancelar",
    "enviar", "recuperar", "agendar", "automatizar", "ocultar", "filtrar", "redirigir",
    "averiguar", "consultar", 
]);

/// Imperatives that ask for something to be done: a request when one opens the message
/// (after any greeting, thanks or "please").
#[rustfmt::skip]
static TASK_IMPERATIVES: WordSet = WordSet::new(&[
    "show", "list", "print", "display", "copy", "move", "rename", "delete", "remove", "erase",
    "find", "search", "grep", "locate", "create", "add", "install", "uninstall", "update",
    "upgrade", "restart", "reboot", "shutdown", "shut", "power", "start", "stop", "kill",
    "run", "execute", "compress", "extract", "unzip", "zip", "mount", "unmount", "format",
    "schedule", "backup", "restore", "change", "configure", "enable", "disable",
    "count", "sort", "compare", "diff", "download", "upload", "open", "edit", "convert",
    "generate", "clean", "merge", "commit", "push", "pull", "revert", "undo",
    "monitor", "measure", "check", "deploy", "migrate", "connect",
    "disconnect", "export", "import", "archive", "sync", "tail", "truncate", "split",
    "replace", "ping", "resize", "encrypt", "decrypt", "verify", "validate", "free", "empty",
    "cancel", "send", "recover", "automate", "hide", "filter", "redirect", "turn", "get",
    "muestra", "muestrame", "listame", "copia", "mueve", "renombra", "borra",
    "borrame", "elimina", "busca", "buscame", "encuentra", "crea", "creame", "instala",
    "desinstala", "actualiza", "reinicia", "apaga", "enciende", "arranca", "deten", "mata",
    "ejecuta", "comprime", "descomprime", "extrae", "monta", "desmonta", "formatea",
    "respalda", "restaura", "cambia", "cambiame", "configura", "activa",
    "desactiva", "habilita", "deshabilita", "ordena", "compara", "descarga", "sube",
    "abre", "edita", "convierte", "genera", "generame", "arregla", "limpia", "vacia",
    "fusiona", "deshaz", "revierte", "comprueba", "verifica", "despliega", "compila",
    "migra", "conecta", "desconecta", "exporta", "importa", "archiva",
    "sincroniza", "sustituye", "reemplaza", "imprime", "anade", "agrega", "quita", "cierra",
    "guarda", "cifra", "descifra", "calcula", "libera", "cancela", "envia", "recupera",
    "ensename", "ensena",
]);

/// Whether the message asks for something to be done: a task infinitive anywhere, a task
/// imperative with its object anywhere, or a clause that opens with an order (a task
/// imperative, or any verb with its object) past any greeting, thanks or "please".
fn asks_for_a_task(message: &str, words: &[String]) -> bool {
    if words.iter().any(|w| TASK_INFINITIVES.contains(&w.as_str())) {
        return true;
    }
    if words
        .windows(2)
        .any(|p| is_task_imperative(&p[0]) && OBJECT_OPENERS.contains(&p[1].as_str()))
    {
        // "en diez minutos apaga la máquina".
        return true;
    }
    fold(message)
        .split([',', ';', '.', '!', ':', '\n'])
        .any(|clause| opens_with_an_order(&folded_words(clause)))
}

/// A task imperative, alone or with the pronouns Spanish writes onto it ("fusiónala",
/// "elimínalos", "bórrame").
fn is_task_imperative(word: &str) -> bool {
    TASK_IMPERATIVES.contains(&word)
        || ["las", "los", "les", "la", "lo", "le", "me", "nos"]
            .iter()
            .any(|clitic| {
                word.strip_suffix(clitic)
                    .is_some_and(|verb| verb.len() >= 4 && TASK_IMPERATIVES.contains(&verb))
            })
}

/// Words that open what a verb acts on. A clause that opens with a verb no list knows and
/// one of these is an order or a search-box task: "stash my changes", "reattach to my tmux
/// session", "ver las tareas programadas", "volver a mi sesión", "cerrar todos los
/// programas".
#[rustfmt::skip]
static OBJECT_OPENERS: WordSet = WordSet::new(&[
    "my", "the", "all", "this", "these", "those", "every", "to", "our", "any", "some",
    "la", "el", "los", "las", "mi", "mis", "tu", "tus", "todos", "todas", "todo", "un",
    "una", "unos", "unas", "a", "al", "este", "esta", "estos", "estas", "ese", "esa", "esos",
    "esas", "cada", "nuestro", "nuestra", "everything", "anything",
]);

/// Verbs that open a clause of leaving, resting or wishing well, objects and all ("enjoy
/// the weekend", "off to bed", "me voy a dormir", "disfruta el finde"): never an order.
#[rustfmt::skip]
static CLOSING_VERBS: WordSet = WordSet::new(&[
    "enjoy", "off", "back", "heading", "going", "headed", "wish", "sleep", "rest", "relax",
    "talk", "speak", "chat", "hope", "hit", "signing", "calling", "leaving", "go", "gotta",
    "voy", "vamos", "me", "nos", "ire", "disfruta", "disfrutad", "disfruten", "descansa",
    "descansar", "dormir", "irme", "ir", "hablamos", "seguimos", "sigo", "vuelvo", "espero",
    "ojala", "feliz", "felices", "saludos", "recuerdos", "un", "una", "to",
]);

/// Whether a clause's first word past greetings, thanks and "please" is a verb with its
/// object: an unknown word followed by an article, possessive or "to"/"a" ("stash my
/// changes", "volver a mi sesión"), never a word of leaving or wishing well.
fn opens_with_an_order(words: &[String]) -> bool {
    let at = words.iter().position(|w| {
        !is_small_talk_word(w) && !matches!(w.as_str(), "porfa" | "please" | "pls" | "plz")
    });
    let Some(at) = at else { return false };
    let (verb, next) = (&words[at], words.get(at + 1));
    if is_task_imperative(verb) {
        return true;
    }
    !CLOSING_VERBS.contains(&verb.as_str())
        && !ANCHORS.contains(&verb.as_str())
        && !OBJECT_OPENERS.contains(&verb.as_str())
        && verb.chars().all(|c| c.is_alphabetic())
        && next.is_some_and(|n| OBJECT_OPENERS.contains(&n.as_str()))
}

pub(super) fn thanks_or_goodbye(message: &str, words: &[String]) -> bool {
    if asks_for_a_task(message, words) {
        return false;
    }
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
    // "que", "como" and "por" thank too ("gracias por todo", "funcionó como lo dijiste");
    // after an "and" that goes on past the thanks, they ask ("vale gracias. y el Mutex
    // cómo se usa", "y luego cómo lo arranco").
    let and = words
        .iter()
        .rposition(|w| matches!(w.as_str(), "y" | "and"));
    if and.is_some_and(|at| {
        words[at + 1..]
            .iter()
            .any(|w| matches!(w.as_str(), "que" | "como" | "cual" | "cuales"))
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
pub(super) static ABOUT_ANSWERS: WordSet = WordSet::new(&[
    "repeat", "rephrase", "reword", "summarize", "summarise", "shorten", "shorter", "tldr",
    "translate", "clarify", "elaborate", "repite", "repitelo", "repetir", "resume",
    "resumelo", "resumir", "acorta", "acortalo", "traduce", "traducelo", "traduci", "dilo",
    "dimelo", "decimelo", "reformula", "reformulalo", "aclara", "aclaralo",
    "eli5", "contestarme", "responderme", "contesta", "responde", "answer", "reply",
    "resumemelo", "resumime", "simplify", "simplifica", "simplificalo", "version",
]);

/// "repeat the last part", "too long, summarize", "resúmelo en una línea", "from now on
/// keep the answers short": a request about the answers, with nothing of code in it.
pub(super) fn about_the_answers(folded: &str, words: &[String]) -> bool {
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
pub(super) fn asks_about_something_at_hand(words: &[String]) -> bool {
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
