//! The layers of `src/` depend one way: each top-level module uses only modules of lower
//! layers (docs/architecture.md draws them; `docs.rs` checks that it draws these). Read
//! from the source, so a `use` that points up fails here, naming the file and the module
//! it reaches. Test code (`#[cfg(test)]` modules, and `tests.rs` files beside a module's
//! code) may reach anywhere.

use std::path::Path;

/// Each top-level module's layer, lowest first.
pub(crate) const LAYERS: &[(&str, u8)] = &[
    ("config", 0),
    ("json", 0),
    ("llm", 1),
    ("embed", 2),
    ("error", 2),
    ("telemetry", 2),
    ("trace", 2),
    ("privacy", 3),
    ("retrieval", 4),
    ("sessions", 4),
    ("context", 4),
    ("ingest", 5),
    ("pipeline", 6),
    ("eval", 7),
    ("serve", 8),
    ("http", 9),
    ("grpc", 9),
    ("app", 10),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            // Not build output (a fuzz target directory of its own).
            if !path.ends_with("target") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_depends_only_on_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    let mut unknown = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if matches!(module.as_str(), "lib" | "main") || file.ends_with("tests.rs") {
            continue;
        }
        let Some(own) = layer(&module) else {
            unknown.push(module);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        // Test modules may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let used: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if used == module || used.is_empty() {
                continue;
            }
            match layer(&used) {
                Some(l) if l < own => {}
                Some(_) => wrong.push(format!(
                    "{} ({module}, layer {own}) uses crate::{used} (layer {})",
                    relative.display(),
                    layer(&used).unwrap_or_default()
                )),
                None => unknown.push(used),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "modules without a layer: {unknown:?}");
    assert!(
        wrong.is_empty(),
        "dependencies that point up:\n{}",
        wrong.join("\n")
    );
}

/// No Rust file of the project (the gateway, its tests, its benchmarks, its fuzz checks)
/// is over 800 lines: a file that grows past it holds more than one concern.
#[test]
fn no_rust_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![];
    for dir in ["src", "tests", "benches", "fuzz"] {
        if root.join(dir).is_dir() {
            sources(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 100, "{} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > 800).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over 800 lines: {long:?}");
}
