//! Every input of the fuzz corpus (`fuzz/corpus/TARGET`: seeds shaped like what real
//! clients send) and every crash input kept after its fix (`fuzz/regressions/TARGET`),
//! through the very checks the fuzz targets run (`fuzz/targets.rs`), as ordinary tests:
//! no instrumented build. Fuzzing campaigns run apart (`scripts/fuzz.sh`, docs/development.md).

use std::path::Path;

#[path = "../../fuzz/targets.rs"]
mod targets;

/// Runs `check` on each input of the target's folders; a failure names the input.
fn replay(target: &str, check: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs = 0;
    for folder in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(folder).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{} fails {target}: {why}", path.display());
            }
            inputs += 1;
        }
    }
    assert!(
        inputs > 0,
        "no inputs for {target} under {}",
        fuzz.display()
    );
}

#[test]
fn openai_request_inputs() {
    replay("openai_request", targets::openai_request);
}

#[test]
fn ollama_request_inputs() {
    replay("ollama_request", targets::ollama_request);
}

#[test]
fn anthropic_request_inputs() {
    replay("anthropic_request", targets::anthropic_request);
}

#[test]
fn responses_request_inputs() {
    replay("responses_request", targets::responses_request);
}

#[test]
fn user_field_inputs() {
    replay("user_field", targets::user_field);
}
