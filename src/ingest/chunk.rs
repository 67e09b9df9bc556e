//! Turning a file into knowledge chunks with their metadata.
//!
//! - Markdown: one chunk per heading section (with its heading path), long sections cut
//!   into bounded windows that overlap, never inside a fenced code block; a window that
//!   is mostly a fence is a `code_example`.
//! - Code: tree-sitter parses the file and every top-level definition (function, class,
//!   impl, …, with the comments and attributes above it) becomes a chunk; imports and
//!   other glue are grouped; oversized definitions and unknown languages fall back to
//!   line windows.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::retrieval::{DocType, KnowledgeChunk, Lang};

/// Size bounds of a chunk, in characters.
#[derive(Debug, Clone, Copy)]
pub struct ChunkConfig {
    pub max_chars: usize,
    pub overlap_chars: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_chars: 1500,
            overlap_chars: 200,
        }
    }
}

/// What kind of file this is, by its name; `None` for files that are not knowledge.
pub fn kind_of(path: &str) -> Option<FileKind> {
    let lower = path.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    Some(match ext {
        "md" | "markdown" | "mdx" => FileKind::Markdown,
        "txt" | "rst" | "adoc" => FileKind::Text,
        "rs" => FileKind::Code("rust"),
        "py" => FileKind::Code("python"),
        "js" | "mjs" | "cjs" | "jsx" => FileKind::Code("javascript"),
        "ts" | "mts" | "cts" => FileKind::Code("typescript"),
        "tsx" => FileKind::Code("tsx"),
        "go" => FileKind::Code("go"),
        "java" => FileKind::Code("java"),
        "c" | "h" => FileKind::Code("c"),
        "cc" | "cpp" | "cxx" | "hpp" => FileKind::Code("cpp"),
        "cs" => FileKind::Code("csharp"),
        "rb" => FileKind::Code("ruby"),
        "php" => FileKind::Code("php"),
        "kt" | "kts" => FileKind::Code("kotlin"),
        "swift" => FileKind::Code("swift"),
        "scala" => FileKind::Code("scala"),
        "sh" | "bash" => FileKind::Code("shell"),
        "sql" => FileKind::Code("sql"),
        "toml" | "yaml" | "yml" | "json" => FileKind::Code("config"),
        "brisa" | "avap" => FileKind::Code(if ext == "brisa" { "brisa" } else { "avap" }),
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Markdown,
    Text,
    Code(&'static str),
}

/// Chunks one file. `path` is the file's name relative to the ingested root.
pub fn chunk_file(path: &str, text: &str, cfg: &ChunkConfig) -> Vec<KnowledgeChunk> {
    let mut chunks = match kind_of(path) {
        Some(FileKind::Markdown) => markdown(path, text, cfg),
        Some(FileKind::Text) | None => prose_windows(path, text, cfg),
        Some(FileKind::Code(lang)) => code(path, text, lang, cfg),
    };
    assign_ids(path, &mut chunks);
    chunks
}

/// Stable ids: a hash of the file, section and text; repeats get a counter.
fn assign_ids(path: &str, chunks: &mut [KnowledgeChunk]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for c in chunks {
        let mut h = Sha256::new();
        h.update(path.as_bytes());
        h.update([0]);
        h.update(c.section.as_bytes());
        h.update([0]);
        h.update(c.text.as_bytes());
        let digest = h.finalize();
        let mut id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let n = seen.entry(id.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            id.push_str(&format!("-{n}"));
        }
        c.chunk_id = id;
    }
}

fn doc_type_of(path: &str) -> DocType {
    let lower = path.to_ascii_lowercase();
    let spec_words = [
        "spec",
        "reference",
        "referencia",
        "lrm",
        "api-ref",
        "manual",
    ];
    if spec_words.iter().any(|w| lower.contains(w)) {
        DocType::Spec
    } else {
        DocType::Narrative
    }
}

/// A line of a markdown file with what the chunker needs to know about it.
struct MdLine<'a> {
    text: &'a str,
    /// Inside (or delimiting) a fenced code block: the block's index.
    fence: Option<usize>,
}

/// Opening or closing fence: (marker char, run length, info string).
fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let t = line.trim_start();
    if line.len() - t.len() > 3 {
        return None;
    }
    let c = t.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let run = t.chars().take_while(|&x| x == c).count();
    (run >= 3).then(|| (c, run, t[run..].trim()))
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let t = line.trim_start();
    if line.len() - t.len() > 3 {
        return None;
    }
    let level = t.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &t[level..];
    if !rest.is_empty() && !rest.starts_with(' ') && !rest.starts_with('\t') {
        return None;
    }
    Some((level, rest.trim().trim_end_matches('#').trim()))
}

fn markdown(path: &str, text: &str, cfg: &ChunkConfig) -> Vec<KnowledgeChunk> {
    let lang = Lang::detect(text).code();
    let doc_type = doc_type_of(path);
    // Classify lines: fences and their blocks.
    let mut lines = Vec::new();
    let mut open: Option<(char, usize)> = None;
    let mut fence_infos: Vec<String> = Vec::new();
    for l in text.lines() {
        match (open, fence_marker(l)) {
            (None, Some((c, n, info))) => {
                open = Some((c, n));
                fence_infos.push(info.split_whitespace().next().unwrap_or("").to_string());
                lines.push(MdLine {
                    text: l,
                    fence: Some(fence_infos.len() - 1),
                });
            }
            (Some((c, n)), Some((c2, n2, info))) if c == c2 && n2 >= n && info.is_empty() => {
                lines.push(MdLine {
                    text: l,
                    fence: Some(fence_infos.len() - 1),
                });
                open = None;
            }
            (Some(_), _) => lines.push(MdLine {
                text: l,
                fence: Some(fence_infos.len() - 1),
            }),
            (None, None) => lines.push(MdLine {
                text: l,
                fence: None,
            }),
        }
    }
    // Sections: start at every heading outside fences.
    let mut sections: Vec<(Vec<String>, usize, usize)> = Vec::new(); // (path, start, end)
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut start = 0;
    let mut current_path: Vec<String> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.fence.is_some() {
            continue;
        }
        if let Some((level, title)) = heading(l.text) {
            if i > start {
                sections.push((current_path.clone(), start, i));
            }
            while stack.last().is_some_and(|(lv, _)| *lv >= level) {
                stack.pop();
            }
            stack.push((level, title.to_string()));
            current_path = stack.iter().map(|(_, t)| t.clone()).collect();
            start = i;
        }
    }
    if start < lines.len() {
        sections.push((current_path, start, lines.len()));
    }
    let mut out = Vec::new();
    for (path_parts, s, e) in sections {
        let section = path_parts.join(" > ");
        // Units: a whole fenced block, or one other line.
        let mut units: Vec<(usize, usize)> = Vec::new();
        let mut i = s;
        while i < e {
            let j = match lines[i].fence {
                Some(block) => {
                    let mut j = i;
                    while j < e && lines[j].fence == Some(block) {
                        j += 1;
                    }
                    j
                }
                None => i + 1,
            };
            units.push((i, j));
            i = j;
        }
        for (ws, we) in windows(&units, |a, b| line_chars(&lines[a..b]), cfg) {
            let body = lines[ws..we]
                .iter()
                .map(|l| l.text)
                .collect::<Vec<_>>()
                .join("\n");
            if body.trim().is_empty() {
                continue;
            }
            let fenced: usize = lines[ws..we]
                .iter()
                .filter(|l| l.fence.is_some())
                .map(|l| l.text.len() + 1)
                .sum();
            let is_example = fenced * 10 >= (body.len() + 1) * 7;
            let fence_lang = lines[ws..we]
                .iter()
                .find_map(|l| l.fence)
                .map(|b| fence_infos[b].clone());
            out.push(KnowledgeChunk {
                chunk_id: String::new(),
                source_file: path.to_string(),
                start_line: ws + 1,
                end_line: we,
                doc_type: if is_example {
                    DocType::CodeExample
                } else {
                    doc_type
                },
                block_type: if is_example {
                    "code_block".into()
                } else {
                    "section".into()
                },
                section: section.clone(),
                language: match (is_example, fence_lang) {
                    (true, Some(l)) if !l.is_empty() => l,
                    _ => lang.to_string(),
                },
                text: body,
                defines: Vec::new(),
            });
        }
    }
    out
}

fn line_chars(lines: &[MdLine]) -> usize {
    lines.iter().map(|l| l.text.len() + 1).sum()
}

/// Groups consecutive units (half-open line ranges) into windows of at most
/// `max_chars`, each starting with up to `overlap_chars` of the previous window's last
/// units. A unit larger than the bound is a window of its own.
fn windows(
    units: &[(usize, usize)],
    size: impl Fn(usize, usize) -> usize,
    cfg: &ChunkConfig,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < units.len() {
        let first = i;
        let mut total = size(units[i].0, units[i].1);
        let mut j = i + 1;
        while j < units.len() {
            let n = size(units[j].0, units[j].1);
            if total + n > cfg.max_chars {
                break;
            }
            total += n;
            j += 1;
        }
        out.push((units[first].0, units[j - 1].1));
        if j >= units.len() {
            break;
        }
        // Step back over whole units for the overlap, but always move forward.
        let mut back = j;
        let mut overlap = 0;
        while back > first + 1 {
            let n = size(units[back - 1].0, units[back - 1].1);
            if overlap + n > cfg.overlap_chars {
                break;
            }
            overlap += n;
            back -= 1;
        }
        i = back;
    }
    out
}

/// Plain text: paragraphs grouped into windows.
fn prose_windows(path: &str, text: &str, cfg: &ChunkConfig) -> Vec<KnowledgeChunk> {
    let lines: Vec<&str> = text.lines().collect();
    let units: Vec<(usize, usize)> = (0..lines.len()).map(|i| (i, i + 1)).collect();
    let lang = Lang::detect(text).code();
    let size = |a: usize, b: usize| lines[a..b].iter().map(|l| l.len() + 1).sum();
    windows(&units, size, cfg)
        .into_iter()
        .map(|(s, e)| KnowledgeChunk {
            chunk_id: String::new(),
            source_file: path.to_string(),
            start_line: s + 1,
            end_line: e,
            doc_type: doc_type_of(path),
            block_type: "window".into(),
            section: String::new(),
            language: lang.to_string(),
            text: lines[s..e].join("\n"),
            defines: Vec::new(),
        })
        .filter(|c| !c.text.trim().is_empty())
        .collect()
}

fn grammar(lang: &str) -> Option<tree_sitter::Language> {
    Some(match lang {
        "rust" => tree_sitter_rust::LANGUAGE.into(),
        "python" => tree_sitter_python::LANGUAGE.into(),
        "javascript" => tree_sitter_javascript::LANGUAGE.into(),
        "typescript" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        "tsx" => tree_sitter_typescript::LANGUAGE_TSX.into(),
        "go" => tree_sitter_go::LANGUAGE.into(),
        "java" => tree_sitter_java::LANGUAGE.into(),
        _ => return None,
    })
}

/// Comments, attributes and imports: they belong with what follows or with each other.
fn is_glue(kind: &str) -> bool {
    [
        "comment",
        "import",
        "use_declaration",
        "package",
        "attribute",
        "extern_crate",
        "decorator",
    ]
    .iter()
    .any(|g| kind.contains(g))
}

fn block_type(kind: &str) -> &'static str {
    match kind {
        k if k.contains("function") || k.contains("method") => "function",
        k if k.contains("class") => "class",
        k if k.contains("impl") => "impl",
        k if k.contains("struct") => "struct",
        k if k.contains("enum") => "enum",
        k if k.contains("trait") || k.contains("interface") => "interface",
        k if k.contains("mod") => "module",
        k if k.contains("export") => "export",
        k if k.contains("type") => "type",
        k if k.contains("const") || k.contains("static") || k.contains("let") => "constant",
        _ => "block",
    }
}

/// A run of source lines (0-based, half-open) that becomes one chunk or more.
struct CodeUnit {
    start: usize,
    end: usize,
    kind: &'static str,
}

fn code(path: &str, text: &str, lang: &str, cfg: &ChunkConfig) -> Vec<KnowledgeChunk> {
    let lines: Vec<&str> = text.lines().collect();
    let tree = grammar(lang).and_then(|g| {
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&g).ok()?;
        parser.parse(text, None)
    });
    let definitions = tree
        .as_ref()
        .map(|t| super::definitions::in_tree(t, text, lang))
        .unwrap_or_default();
    let units = tree
        .as_ref()
        .map(|t| top_level_units(t, lines.len()))
        .unwrap_or_else(|| {
            vec![CodeUnit {
                start: 0,
                end: lines.len(),
                kind: "window",
            }]
        });
    let mut out = Vec::new();
    for unit in units {
        let size = |a: usize, b: usize| lines[a..b].iter().map(|l| l.len() + 1).sum::<usize>();
        let line_units: Vec<(usize, usize)> = (unit.start..unit.end).map(|i| (i, i + 1)).collect();
        let parts = if size(unit.start, unit.end) <= cfg.max_chars {
            vec![(unit.start, unit.end)]
        } else {
            windows(&line_units, size, cfg)
        };
        let title = lines[unit.start..unit.end]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !is_comment_line(l))
            .unwrap_or("")
            .chars()
            .take(100)
            .collect::<String>();
        for (s, e) in parts {
            let body = lines[s..e].join("\n");
            if body.trim().is_empty() {
                continue;
            }
            out.push(KnowledgeChunk {
                chunk_id: String::new(),
                source_file: path.to_string(),
                start_line: s + 1,
                end_line: e,
                doc_type: DocType::Code,
                block_type: unit.kind.to_string(),
                section: title.trim_end_matches('{').trim().to_string(),
                language: lang.to_string(),
                text: body,
                defines: super::definitions::between(&definitions, s, e),
            });
        }
    }
    out
}

fn is_comment_line(l: &str) -> bool {
    ["//", "#", "/*", "*", "--", "#["]
        .iter()
        .any(|p| l.starts_with(p))
        && !l.starts_with("#!")
}

/// Top-level definitions with the glue above them; runs of glue alone are grouped.
fn top_level_units(tree: &tree_sitter::Tree, n_lines: usize) -> Vec<CodeUnit> {
    let root = tree.root_node();
    let mut cursor = root.walk();
    let mut units: Vec<CodeUnit> = Vec::new();
    let mut pending_glue: Option<usize> = None; // start line of glue waiting for a definition
    let mut last_end = 0;
    for node in root.named_children(&mut cursor) {
        let start = node.start_position().row;
        let end = (node.end_position().row + 1).min(n_lines);
        let kind = node.kind();
        if is_glue(kind) {
            // A blank line between glue and what follows ends the attachment.
            if let Some(g) = pending_glue {
                if start > last_end {
                    units.push(CodeUnit {
                        start: g,
                        end: last_end,
                        kind: "imports",
                    });
                    pending_glue = Some(start);
                }
            } else {
                pending_glue = Some(start);
            }
        } else {
            // Glue right above a definition (doc comments, attributes) belongs to it;
            // glue separated by a blank line (imports) stands alone.
            let begin = match pending_glue.take() {
                Some(g) if start <= last_end => g,
                Some(g) => {
                    units.push(CodeUnit {
                        start: g,
                        end: last_end,
                        kind: "imports",
                    });
                    start
                }
                None => start,
            };
            let kind = match node.child_by_field_name("definition") {
                Some(inner) if kind == "decorated_definition" => inner.kind(),
                _ => kind,
            };
            units.push(CodeUnit {
                start: begin,
                end,
                kind: block_type(kind),
            });
        }
        last_end = end;
    }
    if let Some(g) = pending_glue {
        units.push(CodeUnit {
            start: g,
            end: last_end,
            kind: "imports",
        });
    }
    // Lines after the last node (trailing comments are nodes; this is for odd parses).
    if units.is_empty() && n_lines > 0 {
        units.push(CodeUnit {
            start: 0,
            end: n_lines,
            kind: "window",
        });
    }
    // Merge small neighbouring non-definition units so glue does not become confetti.
    let mut merged: Vec<CodeUnit> = Vec::new();
    for u in units {
        if let Some(prev) = merged.last_mut() {
            if prev.kind == "imports" && u.kind == "imports" {
                prev.end = u.end;
                continue;
            }
        }
        merged.push(u);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_sections_keep_their_heading_path() {
        let md = "# Guide\nIntro text.\n\n## Install\nRun the installer.\n\n### Linux\nUse the package.\n\n## Usage\nCall it.\n";
        let chunks = chunk_file("docs/guide.md", md, &ChunkConfig::default());
        let sections: Vec<&str> = chunks.iter().map(|c| c.section.as_str()).collect();
        assert_eq!(
            sections,
            [
                "Guide",
                "Guide > Install",
                "Guide > Install > Linux",
                "Guide > Usage"
            ]
        );
        assert_eq!((chunks[1].start_line, chunks[1].end_line), (4, 6));
        assert!(chunks
            .iter()
            .all(|c| c.doc_type == DocType::Narrative && c.language == "en"));
        let spec = chunk_file("docs/reference/lang.md", md, &ChunkConfig::default());
        assert!(spec.iter().all(|c| c.doc_type == DocType::Spec));
    }

    #[test]
    fn markdown_never_splits_inside_a_fence_and_marks_examples() {
        let fence: String = (0..40)
            .map(|i| format!("let x{i} = compute({i});\n"))
            .collect();
        let prose: String = (0..30)
            .map(|i| format!("Sentence number {i} about the topic.\n"))
            .collect();
        let md = format!("# T\n{prose}\n```brisa\n# not a heading\n{fence}```\n{prose}");
        let cfg = ChunkConfig {
            max_chars: 600,
            overlap_chars: 120,
        };
        let chunks = chunk_file("doc.md", &md, &cfg);
        assert!(chunks.len() > 3, "{}", chunks.len());
        for c in &chunks {
            let fences = c
                .text
                .lines()
                .filter(|l| l.trim_start().starts_with("```"))
                .count();
            assert!(fences % 2 == 0, "a chunk cuts a fence in half:\n{}", c.text);
            assert!(!c.section.contains("not a heading"));
        }
        let example = chunks.iter().find(|c| c.text.contains("x39")).unwrap();
        assert_eq!(
            (example.doc_type, example.language.as_str()),
            (DocType::CodeExample, "brisa")
        );
        // Consecutive prose windows overlap.
        let windows: Vec<&KnowledgeChunk> = chunks
            .iter()
            .filter(|c| c.doc_type == DocType::Narrative)
            .collect();
        assert!(
            windows.windows(2).any(|w| w[1].start_line <= w[0].end_line),
            "no overlap"
        );
        assert!(chunks
            .iter()
            .all(|c| c.text.len() <= cfg.max_chars || c.doc_type == DocType::CodeExample));
    }

    #[test]
    fn code_splits_at_top_level_definitions() {
        let rust = "use std::fmt;\nuse std::io;\n\n/// Adds.\n#[inline]\npub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\npub struct User { name: String }\n\nimpl User {\n    pub fn get_user_name(&self) -> &str { &self.name }\n}\n";
        let chunks = chunk_file("src/lib.rs", rust, &ChunkConfig::default());
        let kinds: Vec<(&str, usize, usize)> = chunks
            .iter()
            .map(|c| (c.block_type.as_str(), c.start_line, c.end_line))
            .collect();
        assert_eq!(
            kinds,
            [
                ("imports", 1, 2),
                ("function", 4, 8),
                ("struct", 10, 10),
                ("impl", 12, 14)
            ]
        );
        assert!(
            chunks[1].text.starts_with("/// Adds.\n#[inline]"),
            "doc comment and attribute stay with the fn"
        );
        assert_eq!(chunks[1].section, "pub fn add(a: i32, b: i32) -> i32");
        assert!(chunks
            .iter()
            .all(|c| c.doc_type == DocType::Code && c.language == "rust"));

        let py = "import os\n\n\n@cache\ndef get_user(id):\n    return id\n\n\nclass Client:\n    def call(self):\n        pass\n";
        let chunks = chunk_file("client.py", py, &ChunkConfig::default());
        let kinds: Vec<&str> = chunks.iter().map(|c| c.block_type.as_str()).collect();
        assert_eq!(kinds, ["imports", "function", "class"]);
        assert!(chunks[1].text.starts_with("@cache"));
        // Each chunk names what it defines, methods in their class's chunk.
        assert_eq!(chunks[1].defines, ["get_user"]);
        assert_eq!(chunks[2].defines, ["Client", "call"]);
        assert!(chunks[0].defines.is_empty());

        let ts = "export function getUserName(u: User): string {\n  return u.name;\n}\n\nexport class Cart {\n  total(): number { return 0; }\n}\n";
        let chunks = chunk_file("web/user.ts", ts, &ChunkConfig::default());
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].language, "typescript");
    }

    #[test]
    fn long_definitions_and_unknown_languages_use_line_windows() {
        let body: String = (0..200).map(|i| format!("    let v{i} = {i};\n")).collect();
        let rust = format!("fn big() {{\n{body}}}\n");
        let cfg = ChunkConfig {
            max_chars: 800,
            overlap_chars: 100,
        };
        let chunks = chunk_file("big.rs", &rust, &cfg);
        assert!(chunks.len() > 3);
        assert!(chunks
            .iter()
            .all(|c| c.block_type == "function" && c.text.len() <= 800));
        assert_eq!(chunks[0].start_line, 1);
        assert_eq!(chunks.last().unwrap().end_line, 202);
        let brisa = "registerEndpoint(\"/users\", \"GET\")\naddParam(\"id\")\n";
        let chunks = chunk_file("api.brisa", brisa, &cfg);
        assert_eq!(
            (
                chunks.len(),
                chunks[0].block_type.as_str(),
                chunks[0].language.as_str()
            ),
            (1, "window", "brisa")
        );
    }

    #[test]
    fn ids_are_stable_and_change_with_content() {
        let a = chunk_file("a.md", "# A\none\n\n# B\ntwo\n", &ChunkConfig::default());
        let b = chunk_file(
            "a.md",
            "# A\none\n\n# B\ntwo changed\n",
            &ChunkConfig::default(),
        );
        assert_eq!(a[0].chunk_id, b[0].chunk_id);
        assert_ne!(a[1].chunk_id, b[1].chunk_id);
        assert_eq!(a[0].chunk_id.len(), 16);
        let dup = chunk_file("d.md", "# S\nsame\n# S\nsame", &ChunkConfig::default());
        assert_ne!(dup[0].chunk_id, dup[1].chunk_id);
    }
}
