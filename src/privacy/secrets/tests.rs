//! The rules against the shapes they must find and the code they must leave alone.

use super::*;

fn redacted(s: &Secrets, text: &str) -> String {
    s.redact(text).map_or_else(|| text.to_string(), |(t, _)| t)
}

#[test]
fn provider_shapes_and_assignments_are_redacted() {
    let s = Secrets::load(None).unwrap();
    // Built by concatenation so scanners of this repository do not flag the fakes.
    let ghp = format!("gh{}_Ta0nRUyw4sBypiCZrMnQShoeHG7FYZfZq7za", "p");
    let cases = [
        (
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string(),
            "AWS_SECRET_ACCESS_KEY=[REDACTED aws_secret_key]".to_string(),
        ),
        (
            format!("token: {ghp}"),
            "token: [REDACTED github_token]".into(),
        ),
        (
            "postgres://app:s3cr3t-pw@db.internal:5432/app".into(),
            "postgres://app:[REDACTED db_password]@db.internal:5432/app".into(),
        ),
        (
            "DB_PASSWORD=hunter2!x".into(),
            "DB_PASSWORD=[REDACTED generic_password]".into(),
        ),
        (
            "export API_TOKEN=\"B7VZchAv1Sl9nlu7przoAE0dX6jRjzXW\"".into(),
            "export API_TOKEN=\"[REDACTED generic_secret]\"".into(),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(redacted(&s, &input), want, "{input}");
    }
    // Glued after `_` into a name, where `\b` alone found no edge.
    let glued = format!("MY_KEY_AKIA{} TOKEN_{ghp}_old", "Z3MOSQ7RV2HXLPQW");
    assert_eq!(
        redacted(&s, &glued),
        "MY_KEY_[REDACTED aws_access_key_id] TOKEN_[REDACTED github_token]_old"
    );
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98Z1KpVqYdR3mNcW8uSx0wLq1AbCdEfGhIjKlMnOpQrStUvWx\nYz0123456789abcdefghij\n-----END RSA PRIVATE KEY-----";
    assert_eq!(redacted(&s, pem), "[REDACTED private_key]");
}

#[test]
fn long_values_are_redacted_whole() {
    let s = Secrets::load(None).unwrap();
    // Longer than the rules' old bounds (256 characters in a URL, 300 in an
    // assignment): such values were once left whole or cut at the bound.
    let long: String = "x7Qm9Lp2".repeat(50);
    let url = format!("DATABASE=postgres://app:{long}@db.internal:5432/shop");
    assert_eq!(
        redacted(&s, &url),
        "DATABASE=postgres://app:[REDACTED db_password]@db.internal:5432/shop"
    );
    let assignment = format!("client_secret = \"{long}\"");
    let out = redacted(&s, &assignment);
    assert!(!out.contains("x7Qm9Lp2"), "{out}");
}

/// Kubernetes Secrets' base64 keys, short key blocks and Markdown tables of settings:
/// each had reached the upstream whole.
#[test]
fn encoded_keys_short_blocks_and_table_rows_are_redacted() {
    use base64::Engine as _;
    let s = Secrets::load(None).unwrap();
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    for kind in [
        "RSA PRIVATE KEY",
        "PRIVATE KEY",
        "EC PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
    ] {
        let pem =
            format!("-----BEGIN {kind}-----\nMC4CAQAwBQYDK2VwBCIEIBx\n-----END {kind}-----\n");
        assert_eq!(redacted(&s, &pem), "[REDACTED private_key]\n", "{kind}");
        let secret = format!("data:\n  tls.key: {}\n", b64(&pem));
        assert_eq!(
            redacted(&s, &secret),
            "data:\n  tls.key: [REDACTED private_key]\n",
            "{kind}"
        );
    }
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n";
    let shown = format!("tls.crt: {}", b64(cert));
    assert_eq!(redacted(&s, &shown), shown);
    for (row, want) in [
        (
            "| DB password | hunter2!x |",
            "| DB password | [REDACTED generic_password] |",
        ),
        (
            "| `API_KEY` | `a8f3k2m9x7q1w5e4r6t0` |",
            "| `API_KEY` | `[REDACTED generic_secret]` |",
        ),
        (
            "| contraseña | Qz8rt66pWv |",
            "| contraseña | [REDACTED generic_password] |",
        ),
    ] {
        let table = format!("| name | value |\n|---|---|\n| host | db.internal |\n{row}\n");
        let want = format!("| name | value |\n|---|---|\n| host | db.internal |\n{want}\n");
        assert_eq!(redacted(&s, &table), want);
    }
    // A table documenting settings names them without a value.
    for doc in [
        "| password | string | The user's password |",
        "| `api_key` | `str` | required |",
        "| token | 4096 |",
        "| password | ******** |",
        "cat secrets.txt | grep password | head",
    ] {
        assert_eq!(redacted(&s, doc), doc);
    }
}

#[test]
fn ordinary_code_is_left_alone() {
    let s = Secrets::load(None).unwrap();
    for code in [
        "password = request.form['password']",
        "token = get_token()",
        "max_tokens = 4096",
        "TOKEN_TYPE = \"bearer\"",
        "let api_key = std::env::var(\"API_KEY\")?;",
        "pub api_key: Option<String>,",
        "csrf_token = \"a8f5f167f44f4964e6c998dee827110c\"",
        "password: \"********\"",
        "DB_PASSWORD=${DB_PASSWORD}",
        "postgres://app:${DB_PASSWORD}@db/app",
        "if password == confirm_password:",
        "tokenizer = AutoTokenizer.from_pretrained(\"gpt2\")",
        "private_key_path = \"/etc/ssl/private/server.key\"",
        "La contraseña debe tener al menos 8 caracteres.",
        "id = \"3f2504e0-4f89-11d3-9a0c-0305e82c3301\"",
    ] {
        assert_eq!(redacted(&s, code), code);
    }
}

#[test]
fn extra_rules_come_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(
        &path,
        "[[rule]]\nid = \"acme\"\nkind = \"acme_key\"\npattern = '''\\b(?P<secret>acme_[0-9a-f]{16})\\b'''\n",
    )
    .unwrap();
    let s = Secrets::load(Some(&path)).unwrap();
    assert_eq!(
        redacted(&s, "key acme_0123456789abcdef here"),
        "key [REDACTED acme_key] here"
    );
    std::fs::write(
        &path,
        "[[rule]]\nid = \"bad\"\nkind = \"x\"\npattern = 'no group'\n",
    )
    .unwrap();
    assert!(Secrets::load(Some(&path)).is_err());
}
