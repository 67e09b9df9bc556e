//! Fitting context sections into a token budget.
//!
//! Sections come in priority order (selected code, open file, knowledge, extra context).
//! Each is kept whole while it fits; the first that does not is cut proportionally: every
//! entry keeps its header and the same share of its text, and says how much was cut.
//! Sections after it get what is left, if anything.
//!
//! Sizes here are estimates (`Estimator`); the pipeline checks the assembled prompt with
//! the upstream's own tokenizer when it has one and scales the estimate to what it learns.

/// Tokens of `text` by a rule calibrated on BPE tokenizers (SmolLM2, Qwen2.5) over prose
/// in English and Spanish, code in six languages, JSON and minified JavaScript, meant to
/// err on the high side: a run of Latin letters costs one token per four letters and one
/// more per accented letter, any other letter (CJK, Cyrillic, …) one and a half, every
/// digit, punctuation mark, symbol and line break one, a run of spaces one per four after
/// the first (which joins the next word). Measured against SmolLM2's tokenizer it reads
/// 1.05–1.5 times the real count on prose and code (JSON 1.13, dense Rust 1.17), where
/// four characters a token read 0.43–0.92: too few, so prompts overflowed.
pub fn estimate_tokens(text: &str) -> usize {
    // Byte by byte (a prompt is estimated several times a turn): ASCII as it is, a
    // character decoded only where a byte is not ASCII.
    let bytes = text.as_bytes();
    let n = bytes.len();
    let (mut tokens, mut other) = (0usize, 0usize);
    let mut i = 0;
    while i < n {
        let b = bytes[i];
        if b == b' ' {
            let start = i;
            while i < n && bytes[i] == b' ' {
                i += 1;
            }
            tokens += (i - start - 1).div_ceil(4);
            continue;
        }
        if b.is_ascii() && !b.is_ascii_alphabetic() {
            tokens += 1;
            i += 1;
            continue;
        }
        // A run of letters (Latin, accented or other), or one character beyond ASCII.
        let start = i;
        let (mut latin, mut accented) = (0usize, 0usize);
        loop {
            while i < n && bytes[i].is_ascii_alphabetic() {
                latin += 1;
                i += 1;
            }
            if i >= n || bytes[i].is_ascii() {
                break;
            }
            let c = text[i..].chars().next().unwrap_or(' ');
            if !c.is_alphabetic() {
                break;
            }
            match c as u32 {
                0x80..=0x24f => accented += 1,
                _ => other += 1,
            }
            i += c.len_utf8();
        }
        if i == start {
            // No letter: one token for the character.
            i += text[i..].chars().next().map_or(1, char::len_utf8);
            tokens += 1;
            continue;
        }
        tokens += (latin + accented).div_ceil(4) + accented;
    }
    // Other letters cost one and a half each, rounded up over the whole text.
    tokens + other + other.div_ceil(2)
}

/// Token estimates scaled to what the upstream's tokenizer was seen to count (1.0: the
/// rule of `estimate_tokens` as it is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimator {
    pub scale: f64,
}

impl Default for Estimator {
    fn default() -> Self {
        Self { scale: 1.0 }
    }
}

impl Estimator {
    pub fn tokens(&self, text: &str) -> usize {
        self.scaled(estimate_tokens(text))
    }

    /// An `estimate_tokens` figure, scaled.
    fn scaled(&self, estimate: usize) -> usize {
        (estimate as f64 * self.scale).ceil() as usize
    }
}

/// A tagged block of the prompt, e.g. `<knowledge>` with one entry per chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub tag: &'static str,
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// A line naming the entry (file, section, lines); may be empty.
    pub header: String,
    pub body: String,
    /// `estimate_tokens` of the body without its trailing whitespace, when it is already
    /// known (a retrieved chunk's, measured once while the chunk's text stays the same).
    pub tokens: Option<usize>,
}

impl Entry {
    pub fn new(header: String, body: String) -> Self {
        Self {
            header,
            body,
            tokens: None,
        }
    }
}

/// What became of a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionReport {
    pub tag: &'static str,
    pub chars: usize,
    pub kept_chars: usize,
    pub dropped: bool,
}

/// Smallest share of a section worth sending, in tokens.
const MIN_USEFUL_TOKENS: usize = 48;

/// Sections fitted to a budget.
#[derive(Debug)]
pub struct Fitted {
    pub text: String,
    /// The text of each section kept, by tag, in order (`text` is their concatenation).
    pub parts: Vec<(&'static str, String)>,
    /// What was kept of each section.
    pub reports: Vec<SectionReport>,
    /// The text's estimate: what the sections kept were measured at (at least what
    /// `Estimator::tokens` gives for the text, so a caller need not measure it again).
    pub tokens: usize,
}

/// The sections rendered within `budget` tokens, and what was kept of each.
pub fn fit(sections: &[Section], budget: usize, estimate: &Estimator) -> Fitted {
    let mut out = String::new();
    let mut parts = Vec::new();
    let mut reports = Vec::new();
    let mut left = budget;
    for section in sections.iter().filter(|s| !s.entries.is_empty()) {
        let chars: usize = section.entries.iter().map(|e| e.body.chars().count()).sum();
        // Each body measured once, for the whole section and for the share to cut.
        let bodies: Vec<usize> = section
            .entries
            .iter()
            .map(|e| {
                e.tokens
                    .unwrap_or_else(|| estimate_tokens(e.body.trim_end()))
            })
            .collect();
        let whole_tokens = estimate.scaled(whole_estimate(section, &bodies));
        if whole_tokens <= left {
            left -= whole_tokens;
            let rendered = render(section, None);
            out.push_str(&rendered);
            parts.push((section.tag, rendered));
            reports.push(SectionReport {
                tag: section.tag,
                chars,
                kept_chars: chars,
                dropped: false,
            });
            continue;
        }
        // Headers, tags and cut markers stay; the bodies share what remains.
        let frame_tokens = estimate.tokens(&render(section, Some(0.0))) + section.entries.len();
        let room = left.saturating_sub(frame_tokens);
        let body_tokens = estimate.scaled(bodies.iter().sum());
        if room < MIN_USEFUL_TOKENS || chars == 0 {
            reports.push(SectionReport {
                tag: section.tag,
                chars,
                kept_chars: 0,
                dropped: true,
            });
            continue;
        }
        // Bodies are cut by characters; dense and sparse parts of a body even out.
        let mut ratio = (room as f64 / body_tokens.max(1) as f64).min(1.0);
        let (cut, cut_tokens) = loop {
            let cut = render(section, Some(ratio));
            let tokens = estimate.tokens(&cut);
            if tokens <= left || ratio <= 0.0 {
                break (cut, tokens);
            }
            ratio = (ratio - 0.1).max(0.0);
        };
        // Nothing of the bodies left (headers and markers only) is not worth sending.
        if cut_tokens > left || ratio <= 0.0 {
            reports.push(SectionReport {
                tag: section.tag,
                chars,
                kept_chars: 0,
                dropped: true,
            });
            continue;
        }
        let kept_chars = (chars as f64 * ratio) as usize;
        left -= cut_tokens;
        out.push_str(&cut);
        parts.push((section.tag, cut));
        reports.push(SectionReport {
            tag: section.tag,
            chars,
            kept_chars,
            dropped: false,
        });
    }
    Fitted {
        text: out,
        parts,
        reports,
        tokens: budget - left,
    }
}

/// `estimate_tokens` of `render(section, None)` from its parts, given each body's
/// (trimmed) estimate: the rule counts no run of letters or spaces across a line break,
/// so the parts, joined by line breaks, add up (to a token more a part at most, where
/// each part rounds its letters of other scripts up).
fn whole_estimate(section: &Section, bodies: &[usize]) -> usize {
    let frame = estimate_tokens(&format!("<{0}>\n</{0}>\n\n", section.tag));
    let headers: usize = section
        .entries
        .iter()
        .filter(|e| !e.header.is_empty())
        .map(|e| estimate_tokens(&e.header) + 1)
        .sum();
    frame + headers + bodies.iter().map(|b| b + 1).sum::<usize>()
}

/// `<tag>` entries `</tag>`; with `ratio`, each body cut to that share of its characters.
fn render(section: &Section, ratio: Option<f64>) -> String {
    let mut s = format!("<{}>\n", section.tag);
    for entry in &section.entries {
        if !entry.header.is_empty() {
            s.push_str(&entry.header);
            s.push('\n');
        }
        match ratio {
            None => s.push_str(entry.body.trim_end()),
            Some(r) => {
                let total = entry.body.chars().count();
                let keep = ((total as f64) * r).floor() as usize;
                let body = cut_at_line(&entry.body, keep);
                let cut = total - body.chars().count();
                s.push_str(body.trim_end());
                if cut > 0 {
                    if !body.trim().is_empty() {
                        s.push('\n');
                    }
                    s.push_str(&format!(
                        "[… {cut} characters cut to fit the context window]"
                    ));
                }
            }
        }
        s.push('\n');
    }
    s.push_str(&format!("</{}>\n\n", section.tag));
    s
}

/// At most `keep` characters of `text`, ending at a line break when one is near.
fn cut_at_line(text: &str, keep: usize) -> &str {
    let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    if end == text.len() {
        return head;
    }
    match head.rfind('\n') {
        Some(nl) if nl >= head.len() / 2 => &head[..nl],
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn section(tag: &'static str, bodies: &[&str]) -> Section {
        Section {
            tag,
            entries: bodies
                .iter()
                .enumerate()
                .map(|(i, b)| Entry {
                    tokens: None,
                    header: format!("### [{}] file{i}.md", i + 1),
                    body: b.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn everything_fits_untouched() {
        let s = [
            section("selected_code", &["fn a() {}"]),
            section("knowledge", &["x", "y"]),
        ];
        let Fitted { text, reports, .. } = fit(&s, 1000, &Estimator::default());
        assert!(text.starts_with("<selected_code>\n### [1] file0.md\nfn a() {}\n</selected_code>"));
        assert!(text.contains("<knowledge>"));
        assert!(reports
            .iter()
            .all(|r| r.kept_chars == r.chars && !r.dropped));
    }

    #[test]
    fn the_first_section_that_overflows_is_cut_proportionally_keeping_headers() {
        let long_a = "alpha line\n".repeat(200);
        let long_b = "beta line\n".repeat(100);
        let s = [
            section("selected_code", &["let x = 1;"]),
            section("knowledge", &[&long_a, &long_b]),
            section("extra_context", &["lang=rust"]),
        ];
        let Fitted { text, reports, .. } = fit(&s, 400, &Estimator::default());
        assert!(estimate_tokens(&text) <= 400);
        assert!(
            text.contains("let x = 1;"),
            "the selection is first and whole"
        );
        assert!(text.contains("### [1] file0.md") && text.contains("### [2] file1.md"));
        assert_eq!(
            text.matches("characters cut to fit the context window")
                .count(),
            2
        );
        let kept_a = text.matches("alpha line").count();
        let kept_b = text.matches("beta line").count();
        assert!(kept_a > 0 && kept_b > 0);
        // Same share of each: twice as many alpha lines as beta lines, give or take one.
        assert!(
            (kept_a as i64 - 2 * kept_b as i64).abs() <= 3,
            "{kept_a} vs {kept_b}"
        );
        assert!(reports[1].kept_chars < reports[1].chars);
        assert!(reports[2].dropped, "nothing was left for the extra context");
    }

    #[test]
    fn a_section_with_too_little_room_is_dropped_and_reported() {
        let s = [section("selected_code", &[&"x".repeat(2000)])];
        let Fitted { text, reports, .. } = fit(&s, 20, &Estimator::default());
        assert!(text.is_empty());
        assert!(reports[0].dropped);
    }

    #[test]
    fn the_estimate_errs_high_on_text_that_tokenizers_split_finely() {
        // Counted by SmolLM2-135M's own tokenizer (llama.cpp's server, /extras/tokenize):
        // 150 lines of dense Rust are 5,250 tokens, 50 Chinese sentences 1,450, a Spanish
        // manual page (examples/knowledge/docs/es/primeros-pasos.md) 1,478.
        let dense = "fn f(x: &[u8]) -> u32 { x.iter().map(|b| *b as u32).sum() }\n".repeat(150);
        assert!(
            estimate_tokens(&dense) >= 5250,
            "{}",
            estimate_tokens(&dense)
        );
        assert!(
            dense.chars().count().div_ceil(4) < 5250,
            "four characters a token fell short"
        );
        let cjk = "这是一个测试句子，用于检查分词器的行为。".repeat(50);
        assert!(estimate_tokens(&cjk) >= 1450, "{}", estimate_tokens(&cjk));
        let spanish = include_str!("../../examples/knowledge/docs/es/primeros-pasos.md");
        assert!(
            estimate_tokens(spanish) >= 1478,
            "{}",
            estimate_tokens(spanish)
        );
        // Indentation is cheap, a single space between words free.
        assert_eq!(estimate_tokens("        return"), 2 + 2);
        assert_eq!(estimate_tokens("one two"), 2);
        assert_eq!(estimate_tokens(""), 0);
    }

    #[test]
    fn a_scaled_estimate_fits_the_scaled_budget() {
        let long = "word ".repeat(400);
        let s = [section("knowledge", &[&long])];
        let half = Estimator { scale: 0.5 };
        let text = fit(&s, 100, &half).text;
        assert!(half.tokens(&text) <= 100);
        let unscaled = fit(&s, 100, &Estimator::default()).text;
        assert!(
            text.len() > unscaled.len(),
            "a tokenizer that counts less leaves room for more"
        );
    }

    /// The rule as first written, character by character: the reference the byte-wise
    /// estimate is held to.
    fn estimate_by_chars(text: &str) -> usize {
        let mut tokens = 0.0f64;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphabetic() {
                let (mut latin, mut accented, mut other) = (0usize, 0usize, 0usize);
                let mut count = |c: char| match c as u32 {
                    0..=0x7f => latin += 1,
                    0x80..=0x24f => accented += 1,
                    _ => other += 1,
                };
                count(c);
                while let Some(&next) = chars.peek().filter(|n| n.is_alphabetic()) {
                    count(next);
                    chars.next();
                }
                tokens +=
                    (latin + accented).div_ceil(4) as f64 + accented as f64 + other as f64 * 1.5;
            } else if c == ' ' {
                let mut run = 1usize;
                while chars.next_if_eq(&' ').is_some() {
                    run += 1;
                }
                tokens += (run - 1).div_ceil(4) as f64;
            } else {
                tokens += 1.0;
            }
        }
        tokens.ceil() as usize
    }

    proptest! {
        #[test]
        fn ascii_text_is_estimated_as_by_the_rule(text in "[a-zA-Z0-9 \n\t_(){};:.,'\"-]{0,300}") {
            prop_assert_eq!(estimate_tokens(&text), estimate_by_chars(&text));
        }

        #[test]
        fn any_text_is_estimated_as_by_the_rule(
            text in "[a-zA-Z0-9 \n_(){}.,'ñáéíóúüÑÁ¿¡€—漢字Жд😀\u{301}]{0,300}",
        ) {
            prop_assert_eq!(estimate_tokens(&text), estimate_by_chars(&text));
        }

        #[test]
        fn arbitrary_text_is_estimated_as_by_the_rule(text in any::<String>()) {
            prop_assert_eq!(estimate_tokens(&text), estimate_by_chars(&text));
        }

        #[test]
        fn a_section_is_estimated_by_its_parts_as_rendered_whole(
            entries in prop::collection::vec(("[a-zé \n]{0,20}", "[ a-zñ\n.]{0,200}"), 1..5),
            other in "[漢字]{0,3}",
        ) {
            let section = Section {
                tag: "knowledge",
                entries: entries
                    .into_iter()
                    .map(|(header, body)| Entry::new(header, format!("{body}{other}")))
                    .collect(),
            };
            let bodies: Vec<usize> = section
                .entries
                .iter()
                .map(|e| estimate_tokens(e.body.trim_end()))
                .collect();
            let (parts, whole) = (whole_estimate(&section, &bodies), estimate_tokens(&render(&section, None)));
            prop_assert!((whole..=whole + 2 * section.entries.len()).contains(&parts), "{parts} by parts, {whole} whole");
        }

        #[test]
        fn never_exceeds_the_budget(
            bodies in prop::collection::vec("[a-z \\n]{0,600}", 1..6),
            budget in 0usize..800,
        ) {
            let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
            let s = [section("selected_code", &refs[..1]), section("knowledge", &refs)];
            let fitted = fit(&s, budget, &Estimator::default());
            let tokens = estimate_tokens(&fitted.text);
            prop_assert!(tokens <= fitted.tokens, "{tokens} > {}", fitted.tokens);
            prop_assert!(fitted.tokens <= budget, "{} > {budget}", fitted.tokens);
        }
    }
}
