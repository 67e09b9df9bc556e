//! Fill-in-the-middle for the assistant's completion model: a completion request with a
//! `suffix` becomes the model family's FIM prompt (with snippets of the repository in the
//! template's repository form when there are any), sent raw; the middle is ended where it
//! should be: at the template's end tokens, where the model starts writing the suffix's
//! next line again, and at the end of the line for a completion inside a line.

use std::collections::HashSet;

use crate::retrieval::hybrid::Scored;

/// A model family's FIM format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// Qwen2.5-Coder (and Granite, CodeGemma-like pipes): `<|fim_prefix|>…`.
    Qwen,
    /// CodeLlama: `<PRE> … <SUF>… <MID>`.
    CodeLlama,
    /// DeepSeek-Coder: `<｜fim▁begin｜>…`.
    DeepSeek,
    /// StarCoder, StarCoder2 and their kin: `<fim_prefix>…`.
    StarCoder,
    /// Codestral: suffix first, `[SUFFIX]…[PREFIX]…`.
    Codestral,
    /// CodeGemma: Qwen's markers, its own separators and end tokens.
    CodeGemma,
}

impl Template {
    /// `completion.template`: a name, or `auto` to tell it from the model's name.
    pub fn choose(setting: &str, model: &str) -> Option<Self> {
        match setting.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Self::of_model(model),
            "none" => None,
            "qwen" => Some(Self::Qwen),
            "codellama" => Some(Self::CodeLlama),
            "deepseek" => Some(Self::DeepSeek),
            "starcoder" => Some(Self::StarCoder),
            "codestral" => Some(Self::Codestral),
            "codegemma" => Some(Self::CodeGemma),
            _ => None,
        }
    }

    /// The family a model's name says (`qwen2.5-coder:1.5b`, `codellama:7b-code`, …).
    pub fn of_model(model: &str) -> Option<Self> {
        let m = model.to_ascii_lowercase();
        if m.contains("codegemma") {
            Some(Self::CodeGemma)
        } else if m.contains("qwen") || m.contains("granite") {
            Some(Self::Qwen)
        } else if m.contains("codellama") || m.contains("code-llama") {
            Some(Self::CodeLlama)
        } else if m.contains("deepseek") {
            Some(Self::DeepSeek)
        } else if m.contains("starcoder") || m.contains("stable-code") || m.contains("santacoder") {
            Some(Self::StarCoder)
        } else if m.contains("codestral") {
            Some(Self::Codestral)
        } else {
            None
        }
    }

    /// Strings that end the middle.
    pub fn stops(self) -> &'static [&'static str] {
        match self {
            Self::Qwen => &[
                "<|endoftext|>",
                "<|fim_prefix|>",
                "<|fim_middle|>",
                "<|fim_suffix|>",
                "<|fim_pad|>",
                "<|repo_name|>",
                "<|file_sep|>",
                "<|im_start|>",
                "<|im_end|>",
            ],
            Self::CodeLlama => &["<EOT>", "<PRE>", "<SUF>", "<MID>"],
            Self::DeepSeek => &[
                "<｜end▁of▁sentence｜>",
                "<｜fim▁begin｜>",
                "<｜fim▁hole｜>",
                "<｜fim▁end｜>",
            ],
            Self::StarCoder => &[
                "<|endoftext|>",
                "<file_sep>",
                "<fim_prefix>",
                "<fim_suffix>",
                "<fim_middle>",
            ],
            Self::Codestral => &["</s>", "[PREFIX]", "[SUFFIX]"],
            Self::CodeGemma => &[
                "<|file_separator|>",
                "<|fim_prefix|>",
                "<|fim_suffix|>",
                "<|fim_middle|>",
                "<end_of_turn>",
                "<eos>",
            ],
        }
    }

    /// The prompt for the middle between `prefix` and `suffix`, with `repo` (path, code)
    /// snippets before the current file when the template has a place for them.
    pub fn render(self, prefix: &str, suffix: &str, repo: &[(String, String)]) -> String {
        match self {
            Self::Qwen => {
                let mut s = String::new();
                if !repo.is_empty() {
                    s.push_str("<|repo_name|>repository\n");
                    for (path, code) in repo {
                        s.push_str(&format!("<|file_sep|>{path}\n{}\n", code.trim_end()));
                    }
                    s.push_str("<|file_sep|>current\n");
                }
                s.push_str(&format!(
                    "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
                ));
                s
            }
            Self::StarCoder => {
                let mut s = String::new();
                if !repo.is_empty() {
                    s.push_str("<repo_name>repository");
                    for (path, code) in repo {
                        s.push_str(&format!("<file_sep>{path}\n{}\n", code.trim_end()));
                    }
                    s.push_str("<file_sep>");
                }
                s.push_str(&format!(
                    "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
                ));
                s
            }
            Self::CodeGemma => {
                let mut s = String::new();
                for (path, code) in repo {
                    s.push_str(&format!("<|file_separator|>{path}\n{}\n", code.trim_end()));
                }
                if !repo.is_empty() {
                    s.push_str("<|file_separator|>current\n");
                }
                s.push_str(&format!(
                    "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
                ));
                s
            }
            // Repository context as comments in the prefix, each file headed by its path.
            Self::CodeLlama | Self::DeepSeek | Self::Codestral => {
                let mut head = String::new();
                for (path, code) in repo {
                    head.push_str(&format!("// {path}\n{}\n\n", code.trim_end()));
                }
                let prefix = format!("{head}{prefix}");
                match self {
                    Self::CodeLlama => format!("<PRE> {prefix} <SUF>{suffix} <MID>"),
                    Self::DeepSeek => {
                        format!("<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>")
                    }
                    _ => format!("[SUFFIX]{suffix}[PREFIX]{prefix}"),
                }
            }
        }
    }

    /// The template as Ollama's `/api/show` reports one (Go's text/template): the FIM
    /// prompt when the request has a suffix, the prompt alone otherwise. Clients read
    /// `.Suffix` in it as "this model fills in the middle" (continue turns its FIM on).
    pub fn as_ollama(self) -> String {
        format!(
            "{{{{- if .Suffix }}}}{}{{{{- else }}}}{{{{ .Prompt }}}}{{{{- end }}}}",
            self.render("{{ .Prompt }}", "{{ .Suffix }}", &[])
        )
    }
}

/// Where the middle of a completion ends, by the gateway's own rules.
#[derive(Debug, Clone)]
pub struct Ender {
    stops: &'static [&'static str],
    /// The suffix's next non-empty line, trimmed: the model writing it again has passed
    /// the middle.
    suffix_line: String,
    /// The cursor is inside a line, or after a statement's start that opens no block:
    /// one line only.
    single_line: bool,
    /// Several lines: the indentation of the cursor's line before the cursor, in
    /// columns; the block the middle writes ends at a line indented less than its first.
    indent: usize,
    /// The cursor stands after its line's indentation, nothing else before it: blanks
    /// the model writes first would indent the line a second time.
    after_indent: bool,
}

/// Columns of a line's leading blanks (a tab counts as four).
fn indentation(line: &str) -> usize {
    line.chars()
        .take_while(|c| c.is_whitespace())
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

impl Ender {
    pub fn new(template: Template, prefix: &str, suffix: &str) -> Self {
        let rest_of_line = suffix.split('\n').next().unwrap_or_default();
        let line_before = prefix.rsplit('\n').next().unwrap_or_default();
        // One line when the cursor is inside a line, or after the start of a statement
        // that does not open a block (as continue decides): `return width * ` wants the
        // rest of its line; `def f():` or `{` may want a body. At the start of a line the
        // line above decides: a body after one that opens a block, else one statement.
        let opens_block = |line: &str| line.trim_end().ends_with(['{', ':', '(', '[']);
        let above = prefix[..prefix.len() - line_before.len()]
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty());
        let single_line = if line_before.trim().is_empty() {
            // (What follows the cursor there is the line's own code, moved on by the middle.)
            above.is_some_and(|l| !opens_block(l))
        } else {
            !rest_of_line.trim().is_empty() || !opens_block(line_before)
        };
        let suffix_line = suffix
            .lines()
            // Inside a line the suffix's first line is the rest of the cursor's line;
            // at the start of one it is the next line.
            .skip(usize::from(single_line))
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default()
            .to_string();
        Self {
            stops: template.stops(),
            suffix_line,
            single_line,
            indent: indentation(line_before),
            // Below a line that opens a block, only when the cursor is already deeper
            // than that line: at its level the body's blanks are still to be written.
            after_indent: !line_before.is_empty()
                && line_before.trim().is_empty()
                && above
                    .is_none_or(|l| !opens_block(l) || indentation(l) < indentation(line_before)),
        }
    }

    /// Where the middle starts in `text` (what the model wrote so far): after the blanks
    /// it wrote first when the cursor already stands after its line's indentation (small
    /// models often indent the line again); `None` while `text` is only such blanks.
    pub fn start(&self, text: &str) -> Option<usize> {
        if !self.after_indent {
            return Some(0);
        }
        let blanks = text.len() - text.trim_start_matches([' ', '\t']).len();
        (blanks < text.len()).then_some(blanks)
    }

    /// Where a middle of several lines has ended by its own shape: at its first blank
    /// line (what follows is another statement the user did not ask for), or at a line
    /// indented less than its first (the block it was writing has closed).
    fn shape_end(&self, text: &str) -> Option<usize> {
        let mut at = 0;
        let mut block: Option<usize> = None;
        for line in text.split_inclusive('\n') {
            let written = !line.trim().is_empty();
            match block {
                // The middle's first line continues the cursor's.
                None if written => block = Some(self.indent + indentation(line)),
                None => {}
                Some(_) if !written && line.ends_with('\n') => return Some(at),
                Some(level) if written && indentation(line) < level => return Some(at),
                Some(_) => {}
            }
            at += line.len();
        }
        None
    }

    /// Where `text` (the middle so far) ends, if it has ended.
    pub fn end(&self, text: &str) -> Option<usize> {
        let mut end = self.stops.iter().filter_map(|s| text.find(s)).min();
        if self.single_line {
            if let Some(nl) = text.find('\n') {
                end = Some(end.map_or(nl, |e| e.min(nl)));
            }
        } else if let Some(shape) = self.shape_end(text) {
            end = Some(end.map_or(shape, |e| e.min(shape)));
        }
        if self.suffix_line.chars().count() >= 3 {
            let mut at = 0;
            for line in text.split_inclusive('\n') {
                if line.ends_with('\n') && line.trim() == self.suffix_line {
                    end = Some(end.map_or(at, |e| e.min(at)));
                    break;
                }
                at += line.len();
            }
        }
        end
    }

    /// How much of `text` may be sent now: all but what could still turn into an end
    /// (the start of a stop string, or a line that may become the suffix's line).
    pub fn safe(&self, text: &str) -> usize {
        let mut keep = text.len();
        for stop in self.stops {
            for n in (1..stop.len()).rev() {
                if let Some(head) = stop.get(..n) {
                    if text.ends_with(head) {
                        keep = keep.min(text.len() - n);
                        break;
                    }
                }
            }
        }
        let line_start = text.rfind('\n').map_or(0, |i| i + 1);
        let current = text[line_start..].trim_start();
        if !self.suffix_line.is_empty() && self.suffix_line.starts_with(current) {
            keep = keep.min(line_start);
        }
        // Blanks starting a line may yet turn into a blank line or a closed block.
        if !self.single_line && line_start > 0 && current.is_empty() {
            keep = keep.min(line_start);
        }
        keep
    }
}

/// The prefix and suffix of a prompt a client already wrote in a FIM template (continue's
/// OpenAI provider does, in StarCoder's form for a model name it does not know), to be
/// written again in the completion model's own.
pub fn split_templated(prompt: &str) -> Option<(String, String)> {
    const MARKERS: [(&str, &str, &str); 4] = [
        ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
        ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
        ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
        ("<PRE> ", " <SUF>", " <MID>"),
    ];
    // The template's own markers are its first `pre` and its last `suf` and `mid` (the
    // prompt ends with `mid`): code that holds the markers itself (FIM tooling being
    // edited) sits between them. Markers in the suffix would stay ambiguous.
    let body = prompt.trim_end();
    for (pre, suf, mid) in MARKERS {
        let Some(before_mid) = body
            .strip_suffix(mid)
            .or_else(|| body.strip_suffix(mid.trim()))
        else {
            continue;
        };
        let Some(at) = before_mid.find(pre) else {
            continue;
        };
        let after = &before_mid[at + pre.len()..];
        let Some(s) = after.rfind(suf) else {
            continue;
        };
        return Some((after[..s].to_string(), after[s + suf.len()..].to_string()));
    }
    None
}

/// Snippets of the repository for the prompt: the hits' code, best first, within
/// `max_chars`, leaving out what the prefix or suffix already holds (the file being edited).
pub fn repository(
    hits: &[Scored],
    prefix: &str,
    suffix: &str,
    max_chars: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut used = 0;
    for hit in hits {
        let code = hit.chunk.text.trim();
        let probe: String = code
            .lines()
            .find(|l| l.trim().len() >= 12)
            .unwrap_or(code)
            .trim()
            .to_string();
        if code.is_empty() || prefix.contains(&probe) || suffix.contains(&probe) {
            continue;
        }
        // What fits of it, whole lines first.
        let room = max_chars.saturating_sub(used);
        if room < 80 {
            break;
        }
        let mut code = code;
        if code.len() > room {
            let mut end = room;
            while !code.is_char_boundary(end) {
                end -= 1;
            }
            code = code[..end]
                .rfind('\n')
                .map_or(&code[..end], |nl| &code[..nl]);
        }
        used += code.len();
        out.push((defanged(&hit.chunk.source_file), defanged(code)));
    }
    out
}

/// `text` with every FIM or chat-template marker of any family broken up (`<|fim_prefix|>`
/// → `< |fim_prefix|>`), so a snippet cannot rewrite the prompt's structure.
fn defanged(text: &str) -> String {
    let mut out = text.to_string();
    for marker in [
        "<|",
        "<｜",
        "<fim_",
        "<file_sep>",
        "<repo_name>",
        "<PRE>",
        "<SUF>",
        "<MID>",
        "<EOT>",
        "[PREFIX]",
        "[SUFFIX]",
        "</s>",
    ] {
        if out.contains(marker) {
            let broken = format!("{} {}", &marker[..1], &marker[1..]);
            out = out.replace(marker, &broken);
        }
    }
    out
}

/// The search for repository context: the identifiers nearest the cursor (the prefix's
/// last lines and the suffix's first), nearest first: the cursor's own line right to left,
/// the suffix's first line, then the lines above, each right to left.
pub fn query(prefix: &str, suffix: &str) -> String {
    let before: Vec<&str> = prefix.lines().rev().take(4).collect();
    let after = suffix.lines().next().unwrap_or_default();
    let mut words: Vec<&str> = Vec::new();
    // Repeats found in a set (a scan of the words so far made a long line quadratic).
    let mut seen: HashSet<&str> = HashSet::new();
    let mut lines: Vec<(&str, bool)> = before.iter().map(|l| (*l, true)).collect();
    lines.insert(lines.len().min(1), (after, false));
    for (text, backwards) in lines {
        let from = words.len();
        let mut rest = text;
        while !rest.is_empty() {
            let start = rest
                .find(|c: char| c.is_alphanumeric() || c == '_')
                .unwrap_or(rest.len());
            rest = &rest[start..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            // A called name keeps its parenthesis: the search finds its definition.
            let w = if rest[end..].starts_with('(') {
                &rest[..end + 1]
            } else {
                &rest[..end]
            };
            rest = &rest[end..];
            let name = w.trim_end_matches('(');
            if name.len() >= 3 && !name.chars().all(|c| c.is_ascii_digit()) && seen.insert(w) {
                words.push(w);
            }
        }
        if backwards {
            words[from..].reverse();
        }
    }
    words.join(" ")
}

/// `prefix` and `suffix` cut to `budget` estimated tokens together, as editors cut them:
/// the prefix loses its start and the suffix its end (the text nearest the cursor is what
/// a middle depends on), each at a line's edge, the suffix keeping at most a quarter of
/// the budget unless the prefix leaves more.
pub fn fit(prefix: &str, suffix: &str, budget: usize) -> (String, String) {
    use crate::context::budget::estimate_tokens as tokens;
    let (before, after) = (tokens(prefix), tokens(suffix));
    if before + after <= budget {
        return (prefix.to_string(), suffix.to_string());
    }
    let suffix_room = after.min((budget / 4).max(budget.saturating_sub(before)));
    let prefix_room = budget - suffix_room;
    (
        tail_within(prefix, prefix_room).to_string(),
        head_within(suffix, suffix_room).to_string(),
    )
}

/// The longest end of `text` within `budget` tokens that starts a line (or, when no
/// whole line fits, the longest end of the last line).
fn tail_within(text: &str, budget: usize) -> &str {
    use crate::context::budget::estimate_tokens as tokens;
    // No estimate reads fewer than a token per 8 bytes: what lies before is never kept.
    let mut from = text.len().saturating_sub(budget.saturating_mul(8));
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let text = &text[from..];
    let starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .filter(|&i| i < text.len() && (i > 0 || from == 0))
        .collect();
    // Fewer tokens from later starts: the first start that fits, by bisection.
    let at = starts.partition_point(|&i| tokens(&text[i..]) > budget);
    if let Some(&i) = starts.get(at) {
        return &text[i..];
    }
    let positions: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let at = positions.partition_point(|&i| tokens(&text[i..]) > budget);
    positions.get(at).map_or("", |&i| &text[i..])
}

/// The longest start of `text` within `budget` tokens that ends a line (or, when no
/// whole line fits, the longest start of the first line).
fn head_within(text: &str, budget: usize) -> &str {
    use crate::context::budget::estimate_tokens as tokens;
    let mut to = text.len().min(budget.saturating_mul(8));
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    let cut = to < text.len();
    let text = &text[..to];
    let ends: Vec<usize> = text
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .chain((!cut).then_some(text.len()))
        .collect();
    let at = ends.partition_point(|&i| tokens(&text[..i]) <= budget);
    if let Some(k) = at.checked_sub(1) {
        return &text[..ends[k]];
    }
    let positions: Vec<usize> = text.char_indices().map(|(i, c)| i + c.len_utf8()).collect();
    let at = positions.partition_point(|&i| tokens(&text[..i]) <= budget);
    at.checked_sub(1).map_or("", |k| &text[..positions[k]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_too_long_for_the_window_keeps_the_lines_nearest_the_cursor() {
        use crate::context::budget::estimate_tokens as tokens;
        let prefix: String = (0..20_000).map(|i| format!("let a{i} = {i};\n")).collect();
        let suffix: String = (0..20_000).map(|i| format!("print(b{i})\n")).collect();
        let (p, s) = fit(&prefix, &suffix, 2_000);
        assert!(tokens(&p) + tokens(&s) <= 2_000);
        assert!(p.ends_with("let a19999 = 19999;\n") && prefix.ends_with(&p));
        assert!(p.starts_with("let a"), "whole lines: {}", &p[..20]);
        assert!(s.starts_with("print(b0)\n") && suffix.starts_with(&s) && s.ends_with('\n'));
        assert!(
            tokens(&s) <= 500 && tokens(&s) > 400,
            "a quarter for the suffix"
        );
        assert!(tokens(&p) > 1_400, "the rest for the prefix");
        // A short suffix leaves its room to the prefix; what fits is untouched.
        let (p, s) = fit(&prefix, "}\n", 2_000);
        assert_eq!(s, "}\n");
        assert!(tokens(&p) > 1_900);
        assert_eq!(
            fit("a\n", "b\n", 10),
            ("a\n".to_string(), "b\n".to_string())
        );
        // One line longer than the budget: the end of it nearest the cursor.
        let long = format!("{}\n{}", "a".repeat(100), "x y ".repeat(10_000));
        let (p, _) = fit(&long, "", 100);
        assert!(
            long.ends_with(&p) && tokens(&p) <= 100 && tokens(&p) > 90,
            "{}",
            p.len()
        );
        let (_, s) = fit("", &"ñ y ".repeat(10_000), 100);
        assert!(s.starts_with("ñ y ") && tokens(&s) <= 100 && tokens(&s) > 90);
    }

    #[test]
    fn show_reports_each_familys_fim_template_with_suffix_and_prompt() {
        assert_eq!(
            Template::CodeLlama.as_ollama(),
            "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>{{- else }}{{ .Prompt }}{{- end }}"
        );
        // Every family the settings accept is one the gateway writes.
        for setting in crate::config::COMPLETION_TEMPLATES {
            let shown = Template::choose(setting, "").unwrap().as_ollama();
            let fim = shown
                .strip_prefix("{{- if .Suffix }}")
                .and_then(|t| t.strip_suffix("{{- else }}{{ .Prompt }}{{- end }}"))
                .unwrap_or_else(|| panic!("{setting}: {shown}"));
            assert!(
                fim.contains("{{ .Prompt }}") && fim.contains("{{ .Suffix }}"),
                "{setting}: {shown}"
            );
        }
    }

    #[test]
    fn templates_by_family() {
        assert_eq!(
            Template::choose("auto", "qwen2.5-coder:0.5b"),
            Some(Template::Qwen)
        );
        assert_eq!(
            Template::choose("auto", "codellama:7b-code"),
            Some(Template::CodeLlama)
        );
        assert_eq!(
            Template::choose("starcoder", "anything"),
            Some(Template::StarCoder)
        );
        assert_eq!(Template::choose("auto", "smollm2"), None);
        assert_eq!(Template::choose("none", "qwen2.5-coder:0.5b"), None);
        assert_eq!(
            Template::Qwen.render("def f():\n    ", "\n    return x\n", &[]),
            "<|fim_prefix|>def f():\n    <|fim_suffix|>\n    return x\n<|fim_middle|>"
        );
        let repo = vec![(
            "lib/util.py".to_string(),
            "def helper(): pass\n".to_string(),
        )];
        assert_eq!(
            Template::Qwen.render("a", "b", &repo),
            "<|repo_name|>repository\n<|file_sep|>lib/util.py\ndef helper(): pass\n<|file_sep|>current\n<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"
        );
        assert_eq!(
            Template::CodeLlama.render("a", "b", &[]),
            "<PRE> a <SUF>b <MID>"
        );
        assert_eq!(
            Template::Codestral.render("a", "b", &[]),
            "[SUFFIX]b[PREFIX]a"
        );
    }

    #[test]
    fn the_middle_ends_where_it_should() {
        // Inside a line: one line.
        let e = Ender::new(Template::Qwen, "x = compute(", ")\nprint(x)\n");
        assert_eq!(e.end("a, b)\nmore"), Some(5));
        // A block: until the model writes the suffix's next line again.
        let e = Ender::new(Template::Qwen, "def f(a):\n", "    return total\n");
        let text = "    total = a * 2\n    return total\n";
        assert_eq!(e.end(text), Some("    total = a * 2\n".len()));
        assert_eq!(
            e.safe("    total = a * 2\n    ret"),
            "    total = a * 2\n".len()
        );
        // At a line's start after a statement: that statement's next one, one line.
        let e = Ender::new(Template::Qwen, "x = 1\n", "\nprint(x)\n");
        assert_eq!(e.end("y = 2\nz = 3\n"), Some(5));
        // Several lines end with the block they write, or at a blank line.
        let e = Ender::new(Template::Qwen, "def f(a):\n", "");
        let body = "    if a:\n        return 1\n    return 2\n";
        assert_eq!(e.end(&format!("{body}print(f(1))\n")), Some(body.len()));
        assert_eq!(e.end(&format!("{body}\n    x = 3\n")), Some(body.len()));
        assert_eq!(e.end(body), None);
        assert_eq!(e.safe(&format!("{body}   ")), body.len());
        let e = Ender::new(Template::Qwen, "if ready:\n    ", "\n");
        assert_eq!(
            e.end("go()\n    wait()\nstop()\n"),
            Some("go()\n    wait()\n".len())
        );
        // The cursor after its line's indentation: the blanks the model writes first
        // are not the middle's (the line would be indented twice).
        assert_eq!(e.start("  "), None);
        assert_eq!(e.start("    go()\n"), Some(4));
        assert_eq!(e.start("go()"), Some(0));
        assert_eq!(e.start("\n"), Some(0));
        let e = Ender::new(Template::Qwen, "    if ready:\n    ", "\n");
        assert_eq!(e.start("    go()\n"), Some(0), "the body's own indentation");
        let inside = Ender::new(Template::Qwen, "x = f(", ")\n");
        assert_eq!(inside.start("  a"), Some(0));
        let at_column_zero = Ender::new(Template::Qwen, "x = 1\n", "\n");
        assert_eq!(at_column_zero.start("  a"), Some(0));
        // End tokens, also split across pieces.
        assert_eq!(e.end("x = 1<|endoftext|>junk"), Some(5));
        assert_eq!(e.safe("x = 1<|endo"), 5);
        assert_eq!(e.end("x = 1"), None);
    }

    #[test]
    fn prompts_written_in_a_template_are_read_back() {
        assert_eq!(
            split_templated("<fim_prefix>def f():\n<fim_suffix>\n<fim_middle>"),
            Some(("def f():\n".to_string(), "\n".to_string()))
        );
        assert_eq!(
            split_templated("<|repo_name|>r\n<|file_sep|>a.py\n<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>"),
            Some(("x = ".to_string(), "\n".to_string()))
        );
        assert_eq!(split_templated("How do I configure retries?"), None);
        // Code that holds the markers itself (FIM tooling being edited): the template's
        // own are the first prefix marker and the last suffix and middle markers.
        assert_eq!(
            split_templated(
                "<fim_prefix>s = \"<fim_suffix>\"\nm = \"<fim_middle>\"\nx = <fim_suffix>\n<fim_middle>"
            ),
            Some((
                "s = \"<fim_suffix>\"\nm = \"<fim_middle>\"\nx = ".to_string(),
                "\n".to_string()
            ))
        );
        // A miss on one form does not stop the others from being tried.
        assert_eq!(
            split_templated("<|fim_prefix|>t = \"<fim_prefix>\"\n<|fim_suffix|>\n<|fim_middle|>"),
            Some(("t = \"<fim_prefix>\"\n".to_string(), "\n".to_string()))
        );
        // Not ending with the middle marker: not a template.
        assert_eq!(
            split_templated("<fim_prefix>a<fim_suffix>b<fim_middle> and then a question?"),
            None
        );
    }

    #[test]
    fn the_query_is_the_identifiers_near_the_cursor() {
        let q = query(
            "import os\n\ndef load(path):\n    data = read_config(",
            ")\n",
        );
        assert!(
            q.contains("read_config") && q.contains("load") && q.contains("path"),
            "{q}"
        );
        // Called names keep their parenthesis, so their definitions are looked up; the
        // call at the cursor comes first.
        assert!(q.starts_with("read_config( data"), "{q}");
        assert!(q.contains("load(") && !q.contains("path("), "{q}");
    }
}
