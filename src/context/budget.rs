//! Fitting context sections into a token budget.
//!
//! Sections come in priority order (selected code, open file, knowledge, extra context).
//! Each is kept whole while it fits; the first that does not is cut proportionally: every
//! entry keeps its header and the same share of its text, and says how much was cut.
//! Sections after it get what is left, if anything. Tokens are estimated at four
//! characters each, the usual rule of thumb for English prose and code with BPE
//! tokenizers; the answer reserve absorbs the estimate's error.

/// Estimated tokens of `text`.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
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

/// The sections rendered within `budget` tokens, and what was kept of each.
pub fn fit(sections: &[Section], budget: usize) -> (String, Vec<SectionReport>) {
    let mut out = String::new();
    let mut reports = Vec::new();
    let mut left = budget;
    for section in sections.iter().filter(|s| !s.entries.is_empty()) {
        let chars: usize = section.entries.iter().map(|e| e.body.chars().count()).sum();
        let whole = render(section, None);
        let whole_tokens = estimate_tokens(&whole);
        if whole_tokens <= left {
            left -= whole_tokens;
            out.push_str(&whole);
            reports.push(SectionReport {
                tag: section.tag,
                chars,
                kept_chars: chars,
                dropped: false,
            });
            continue;
        }
        // Headers, tags and cut markers stay; the bodies share what remains.
        let frame_tokens = estimate_tokens(&render(section, Some(0.0))) + section.entries.len();
        let room = left.saturating_sub(frame_tokens);
        if room < MIN_USEFUL_TOKENS || chars == 0 {
            reports.push(SectionReport {
                tag: section.tag,
                chars,
                kept_chars: 0,
                dropped: true,
            });
            continue;
        }
        let ratio = (room * 4) as f64 / chars as f64;
        let cut = render(section, Some(ratio.min(1.0)));
        let kept_chars = (chars as f64 * ratio.min(1.0)) as usize;
        left = left.saturating_sub(estimate_tokens(&cut));
        out.push_str(&cut);
        reports.push(SectionReport {
            tag: section.tag,
            chars,
            kept_chars,
            dropped: false,
        });
    }
    (out, reports)
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
        let (text, reports) = fit(&s, 1000);
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
        let (text, reports) = fit(&s, 400);
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
        let (text, reports) = fit(&s, 20);
        assert!(text.is_empty());
        assert!(reports[0].dropped);
    }

    proptest! {
        #[test]
        fn never_exceeds_the_budget(
            bodies in prop::collection::vec("[a-z \\n]{0,600}", 1..6),
            budget in 0usize..800,
        ) {
            let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
            let s = [section("selected_code", &refs[..1]), section("knowledge", &refs)];
            let (text, _) = fit(&s, budget);
            prop_assert!(estimate_tokens(&text) <= budget, "{} > {budget}", estimate_tokens(&text));
        }
    }
}
