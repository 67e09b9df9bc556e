//! The rules classifier on a labelled set (tests/classifier_set.jsonl: English and
//! Spanish, all three types, with and without references to the editor). Prints the
//! per-class accuracy and requires at least 90% overall for the type and for the flag.

use std::collections::BTreeMap;

use assist_gateway::pipeline::classify::{QueryType, RulesClassifier};
use serde_json::Value;

#[test]
fn rules_classifier_accuracy() {
    let set = include_str!("../classifier_set.jsonl");
    let classifier = RulesClassifier;
    let mut per_class: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let (mut type_ok, mut flag_ok, mut total) = (0, 0, 0);
    let mut misses = Vec::new();
    for line in set.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).unwrap();
        let query = case["query"].as_str().unwrap();
        let want = QueryType::parse(case["type"].as_str().unwrap()).unwrap();
        let want_editor = case["editor"].as_bool().unwrap();
        let got = classifier.classify(query);
        total += 1;
        let entry = per_class.entry(want.as_str()).or_default();
        entry.1 += 1;
        if got.query_type == want {
            type_ok += 1;
            entry.0 += 1;
        }
        if got.refers_to_editor == want_editor {
            flag_ok += 1;
        }
        if got.query_type != want || got.refers_to_editor != want_editor {
            misses.push(format!(
                "{query:?}: got {} / {}",
                got.query_type.as_str(),
                got.refers_to_editor
            ));
        }
    }
    println!("rules classifier on {total} labelled queries:");
    for (class, (ok, n)) in &per_class {
        println!(
            "  {class:<16} {ok}/{n} = {:.1}%",
            100.0 * *ok as f64 / *n as f64
        );
    }
    let type_acc = type_ok as f64 / total as f64;
    let flag_acc = flag_ok as f64 / total as f64;
    println!(
        "  type accuracy {:.1}%, editor-reference accuracy {:.1}%",
        100.0 * type_acc,
        100.0 * flag_acc
    );
    for m in &misses {
        println!("  miss: {m}");
    }
    assert!(total >= 60, "the labelled set has {total} queries");
    assert!(type_acc >= 0.9, "type accuracy {type_acc:.3} < 0.9");
    assert!(
        flag_acc >= 0.9,
        "editor-reference accuracy {flag_acc:.3} < 0.9"
    );
}
