//! The documentation stays true to the code: `docs/configuration.md` holds every setting
//! of `config/default.toml` (its tables are generated from the file's own comments, so
//! they cannot drift), every relative link in `README.md` and `docs/*.md` resolves (the
//! file exists, and a `#section` is one of its headings), the README stays short, and the
//! layer table of `docs/architecture.md` is the one `layers.rs` checks.
//!
//! After changing `config/default.toml`, regenerate the tables with
//! `ASSIST_UPDATE_DOCS=1 cargo test --release --test it docs::`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- begin: generated from config/default.toml by tests/it/docs.rs -->";
const END: &str = "<!-- end: generated -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One row of a settings table: keys that share one comment, their defaults, the comment.
struct Row {
    keys: Vec<String>,
    defaults: Vec<String>,
    meaning: String,
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The settings tables, one per section, from `config/default.toml`: each key with its
/// default as written there and the comment above it. Keys written one after another
/// under one comment share a row.
fn settings_tables(toml: &str) -> String {
    let mut sections: Vec<(String, Vec<Row>)> = vec![(String::new(), Vec::new())];
    let mut comment: Vec<String> = Vec::new();
    let mut after_key = false;
    for line in toml.lines() {
        let line = line.trim();
        if line.is_empty() {
            comment.clear();
            after_key = false;
        } else if let Some(text) = line.strip_prefix('#') {
            comment.push(text.trim().to_string());
            after_key = false;
        } else if line.starts_with('[') {
            let name = line.trim_matches(|c| c == '[' || c == ']').to_string();
            sections.push((name, Vec::new()));
            comment.clear();
            after_key = false;
        } else if let Some((key, value)) = line.split_once('=') {
            let (section, rows) = sections.last_mut().unwrap();
            let key = if section.is_empty() {
                key.trim().to_string()
            } else {
                format!("{section}.{}", key.trim())
            };
            let value = value.trim().to_string();
            match rows.last_mut() {
                Some(row) if after_key && comment.is_empty() => {
                    row.keys.push(key);
                    row.defaults.push(value);
                }
                _ => rows.push(Row {
                    keys: vec![key],
                    defaults: vec![value],
                    meaning: comment.join(" "),
                }),
            }
            comment.clear();
            after_key = true;
        }
    }
    let mut out = String::new();
    for (section, rows) in sections.iter().filter(|(_, rows)| !rows.is_empty()) {
        let title = if section.is_empty() {
            "Top level".to_string()
        } else {
            format!("`[{section}]`")
        };
        out.push_str(&format!(
            "\n### {title}\n\n| key | default | meaning |\n| --- | --- | --- |\n"
        ));
        for row in rows {
            let keys: Vec<String> = row.keys.iter().map(|k| format!("`{k}`")).collect();
            let defaults: Vec<String> = row.defaults.iter().map(|d| format!("`{d}`")).collect();
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                cell(&keys.join(", ")),
                cell(&defaults.join(", ")),
                cell(&row.meaning)
            ));
        }
    }
    out
}

#[test]
fn the_configuration_reference_holds_every_setting_of_the_defaults() {
    let toml = read(&root().join("config/default.toml"));
    let path = root().join("docs/configuration.md");
    let doc = read(&path);
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("docs/configuration.md has the generated section's start marker");
    let (_, tail) = rest
        .split_once(END)
        .expect("docs/configuration.md has the generated section's end marker");
    let expected = format!("{head}{BEGIN}\n{}\n{END}{tail}", settings_tables(&toml));
    if std::env::var_os("ASSIST_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        doc == expected,
        "docs/configuration.md is not what config/default.toml says: run \
         ASSIST_UPDATE_DOCS=1 cargo test --release --test it docs:: and commit the result"
    );
    // And every key the settings read is in the file (a key the code reads with a serde
    // default could be missing from it).
    let settings = assist_gateway::config::Settings::load_without_env(None).unwrap();
    let value = serde_json::to_value(&settings).unwrap();
    let mut missing = Vec::new();
    for (section, body) in value.as_object().unwrap() {
        match body.as_object() {
            Some(keys) => {
                for key in keys.keys() {
                    let name = format!("`{section}.{key}`");
                    if !doc.contains(&name) {
                        missing.push(name);
                    }
                }
            }
            None if !doc.contains(&format!("`{section}`")) => missing.push(section.clone()),
            None => {}
        }
    }
    assert!(
        missing.is_empty(),
        "settings missing from docs/configuration.md: {missing:?}"
    );
}

/// GitHub's anchor for a heading: lowercase, spaces to hyphens, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' | '-' => Some('-'),
            '_' => Some('_'),
            c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap_or(c)),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            let mut anchor = slug(heading);
            // A heading repeated in one file gets -1, -2, … after the first.
            let base = anchor.clone();
            let mut n = 0;
            while out.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            out.insert(anchor);
        }
    }
    out
}

/// The targets of the markdown links and images in `text` (outside code blocks and code
/// spans).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Leave out code spans.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            files.push(entry.path());
        }
    }
    files.sort();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = read(file);
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let shown = format!("{}: {target}", file.strip_prefix(&root).unwrap().display());
            if !linked.exists() {
                broken.push(format!("{shown} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                let is_markdown = linked.extension().is_some_and(|e| e == "md");
                if is_markdown && !anchors(&read(&linked)).contains(anchor) {
                    broken.push(format!("{shown} (no such heading)"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: keep it to what a user needs first, the rest in docs/"
    );
}

#[test]
fn the_architecture_document_draws_the_layers_the_test_checks() {
    let doc = read(&root().join("docs/architecture.md"));
    let mut drawn = BTreeSet::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | layer | modules | what they own |
        let Some(layer) = cells.get(1).and_then(|c| c.parse::<u8>().ok()) else {
            continue;
        };
        for module in cells[2].split('`').skip(1).step_by(2) {
            drawn.insert((module.to_string(), layer));
        }
    }
    let checked: BTreeSet<(String, u8)> = crate::layers::LAYERS
        .iter()
        .map(|(m, l)| (m.to_string(), *l))
        .collect();
    assert_eq!(
        drawn, checked,
        "docs/architecture.md's layer table and tests/it/layers.rs disagree"
    );
}

#[test]
fn the_slugs_are_githubs() {
    assert_eq!(slug(" `[server]`"), "server");
    assert_eq!(
        slug(" nginx as the floor, one core each"),
        "nginx-as-the-floor-one-core-each"
    );
    assert_eq!(slug(" Fill-in-the-middle (FIM)"), "fill-in-the-middle-fim");
    assert_eq!(
        links("see [a](b.md#c) and `[x](y)` ![i](d.png)"),
        vec!["b.md#c", "d.png"]
    );
}
