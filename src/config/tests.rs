use std::time::Duration;

use super::*;

fn write(toml: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), toml).unwrap();
    f
}

#[test]
fn embedded_defaults_are_valid() {
    let s = Settings::load_without_env(None).unwrap();
    assert_eq!(s.server.addr, "127.0.0.1:8080");
    assert_eq!(s.assistant.model, "brunix");
    assert_eq!(s.llm.provider, Provider::Ollama);
    assert!(s.server.api_keys.is_empty());
    assert_eq!(s.classifier.mode, ClassifierMode::Rules);
    assert_eq!(s.reformulator.mode, ReformulatorMode::Off);
    assert_eq!(s.sessions.backend, SessionBackend::Embedded);
    assert!(s.sessions.window_turns <= s.sessions.max_turns);
}

#[test]
fn file_overrides_only_the_keys_it_sets() {
    let f = write("[llm]\nprovider = \"openai\"\nbase_url = \"http://h:1/v1\"\n");
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    assert_eq!(s.llm.provider, Provider::Openai);
    assert_eq!(s.llm.base_url, "http://h:1/v1");
    assert_eq!(s.server.addr, "127.0.0.1:8080");
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn environment_overrides_file() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("c.toml", "[server]\naddr = \"127.0.0.1:9000\"\n")?;
        jail.set_env("ASSIST__SERVER__ADDR", "0.0.0.0:7000");
        jail.set_env("ASSIST__SERVER__API_KEYS", "k1, k2");
        jail.set_env("ASSIST__DATA_DIR", "/tmp/x");
        let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
        assert_eq!(s.server.addr, "0.0.0.0:7000");
        assert_eq!(s.server.api_keys, vec!["k1", "k2"]);
        assert_eq!(s.data_dir, PathBuf::from("/tmp/x"));
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn keys_from_the_environment_are_a_list_or_refused() {
    figment::Jail::expect_with(|jail| {
        // A JSON list with a table: read whole.
        jail.set_env(
            "ASSIST__SERVER__API_KEYS",
            r#"[{"name":"alice","key":"key-a","tokens_per_day":400},"key-b"]"#,
        );
        let s = Settings::load(None).unwrap();
        let keys: Vec<&str> = s.server.api_keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["key-a", "key-b"]);
        assert_eq!(s.server.api_keys[0].name.as_deref(), Some("alice"));
        assert_eq!(s.server.api_keys[0].tokens_per_day, 400);
        // Broken JSON, or a list's fragments: the start stops, naming the setting.
        for broken in [
            r#"[{"name":"alice","key":"key-a""#,
            r#"{"name":"alice","key":"key-a"},key-b"#,
        ] {
            jail.set_env("ASSIST__SERVER__API_KEYS", broken);
            let e = Settings::load(None).unwrap_err();
            assert_eq!(e.key, "server.api_keys", "{broken}: {e}");
            assert!(e.reason.contains("comma-separated"), "{e}");
        }
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn per_language_weights_are_set_one_language_at_a_time() {
    figment::Jail::expect_with(|jail| {
        let defaults = Settings::load_without_env(None).unwrap().retrieval;
        assert_eq!(defaults.bm25_weight_by_language.en, None);
        assert_eq!(defaults.bm25_weight_by_language.es, None);
        jail.create_file(
            "c.toml",
            "[retrieval]\nbm25_weight_by_language = { en = 0.8 }\n",
        )?;
        let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
        let by_language = s.retrieval.bm25_weight_by_language;
        assert_eq!(by_language.en, Some(0.8));
        assert_eq!(by_language.es, None, "the other language keeps bm25_weight");
        jail.set_env("ASSIST__RETRIEVAL__BM25_WEIGHT_BY_LANGUAGE__ES", "1");
        let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
        assert_eq!(s.retrieval.bm25_weight_by_language.es, Some(1.0));
        assert_eq!(s.retrieval.bm25_weight_by_language.en, Some(0.8));
        Ok(())
    });
}

#[test]
fn api_keys_come_from_the_list_and_the_file() {
    let keys = write("# team keys\nkey-one\n\n  key-two  \n");
    let f = write(&format!(
        "[server]\napi_keys = [\"inline\"]\napi_keys_file = \"{}\"\n",
        keys.path().display()
    ));
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    assert_eq!(s.server.api_keys, ["inline", "key-one", "key-two"]);
    let f = write("[server]\napi_keys_file = \"/nonexistent/keys\"\n");
    let e = Settings::load_without_env(Some(f.path())).unwrap_err();
    assert_eq!(e.key, "server.api_keys_file");
}

#[test]
fn keys_have_names_and_limits_checked() {
    let keys = write("ci sk-ci-1\nsk-plain\n");
    let f = write(&format!(
        "[server]\napi_keys = [\"k1\", {{ name = \"alice\", key = \"sk-a\", tokens_per_day = 100, requests_per_minute = 5 }}]\napi_keys_file = \"{}\"\n",
        keys.path().display()
    ));
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    let k = &s.server.api_keys;
    assert_eq!(k[0], "k1");
    assert_eq!(k[1].name.as_deref(), Some("alice"));
    assert_eq!((k[1].tokens_per_day, k[1].requests_per_minute), (100, 5));
    assert_eq!(
        (k[2].name.as_deref(), k[2].key.as_str()),
        (Some("ci"), "sk-ci-1")
    );
    assert_eq!(k[3], "sk-plain");
    // Written back as TOML (tests spawn the binary so), read the same.
    let again: Settings = toml::from_str(&toml::to_string(&s).unwrap()).unwrap();
    assert_eq!(again.server.api_keys, s.server.api_keys);
    for (bad, why) in [
        ("{ name = \"a b\", key = \"k\" }", "ASCII"),
        (
            "{ name = \"x\", key = \"k\" }, { name = \"x\", key = \"j\" }",
            "same name",
        ),
        (
            "{ name = \"k2\", key = \"k\" }, \"k2\"",
            "must not be a key",
        ),
        ("{ name = \"x\", key = \"k\", tokens = 3 }", "unknown"),
        ("{ name = \"key-2\", key = \"k\" }, \"j\"", "without a name"),
        ("{ name = \"key-0a1b2c3d\", key = \"k\" }", "without a name"),
    ] {
        let f = write(&format!("[server]\napi_keys = [{bad}]\n"));
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert!(e.key.starts_with("server.api_keys"), "{bad}: {e}");
        assert!(format!("{e:#}").contains(why), "{bad}: {e:#}");
    }
}

#[test]
fn telemetry_settings_are_checked() {
    let s = Settings::load_without_env(None).unwrap();
    assert!(
        s.telemetry.otlp_endpoint.is_none(),
        "traces are off by default"
    );
    assert!(!s.telemetry.capture_content, "no content by default");
    for bad in [
        "otlp_endpoint = \"collector:4318\"",
        "otlp_protocol = \"thrift\"",
        "max_queue_spans = 1",
        "otlp_headers = { \"bad header\" = \"x\" }",
    ] {
        let f = write(&format!("[telemetry]\n{bad}\n"));
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert!(e.key.starts_with("telemetry"), "{bad}: {e}");
    }
}

#[test]
fn cors_origins_are_checked() {
    let f = write("[server]\ncors_origins = [\"chat.example.com\"]\n");
    let e = Settings::load_without_env(Some(f.path())).unwrap_err();
    assert_eq!(e.key, "server.cors_origins");
    let f = write("[server]\ncors_origins = [\"*\", \"http://localhost:3000\"]\n");
    assert_eq!(
        Settings::load_without_env(Some(f.path()))
            .unwrap()
            .server
            .cors_origins
            .len(),
        2
    );
}

#[test]
fn allowed_hosts_are_names_or_addresses_without_ports() {
    let f = write("[server]\nallowed_hosts = [\"gw.internal\", \"10.0.0.5\", \"fd00::5\", \"[fd00::6]\", \"*.corp.example\"]\n");
    assert_eq!(
        Settings::load_without_env(Some(f.path()))
            .unwrap()
            .server
            .allowed_hosts
            .len(),
        5
    );
    for bad in ["gw.internal:8080", "http://gw", "a b", ""] {
        let f = write(&format!("[server]\nallowed_hosts = [\"{bad}\"]\n"));
        let e = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert_eq!(e.key, "server.allowed_hosts", "{bad}");
    }
}

#[test]
fn tls_needs_both_files() {
    let cert = write("not checked here");
    let f = write(&format!(
        "[server]\ntls_cert = \"{}\"\n",
        cert.path().display()
    ));
    let e = Settings::load_without_env(Some(f.path())).unwrap_err();
    assert_eq!(e.key, "server.tls_cert / server.tls_key");
    let f =
        write("[server]\ntls_cert = \"/nonexistent/c.pem\"\ntls_key = \"/nonexistent/k.pem\"\n");
    let e = Settings::load_without_env(Some(f.path())).unwrap_err();
    assert_eq!(e.key, "server.tls_cert");
    let s = Settings::load_without_env(None).unwrap();
    assert_eq!(
        s.server.rate_limit_per_minute, 0,
        "limits are off by default"
    );
    assert_eq!(s.server.max_streams_per_key, 0);
    assert!(s.server.tls_cert.is_none());
}

#[test]
fn errors_name_the_key() {
    let cases = [
        ("[llm]\nprovider = \"bedrock\"\n", "llm.provider"),
        ("[server]\naddr = \"nonsense\"\n", "server.addr"),
        (
            "[server]\nmax_body_bytes = \"big\"\n",
            "server.max_body_bytes",
        ),
        ("[llm]\nbase_url = \"ftp://x\"\n", "llm.base_url"),
        ("[llm]\nmodle = \"x\"\n", "llm"),
        ("[assistant]\nmodel = \"\"\n", "assistant.model"),
        (
            "[retrieval]\nbm25_weight_by_language = { fr = 0.5 }\n",
            "retrieval.bm25_weight_by_language",
        ),
        (
            "[retrieval]\nbm25_weight_by_language = { es = -1 }\n",
            "retrieval.bm25_weight_by_language.es",
        ),
    ];
    for (toml, key) in cases {
        let f = write(toml);
        let err = Settings::load_without_env(Some(f.path())).unwrap_err();
        assert!(
            err.to_string().contains(key),
            "{toml:?}: error '{err}' does not name {key}"
        );
    }
}

#[test]
fn fallbacks_and_retries_are_read_and_checked() {
    let f = write(
        "[llm]\nretries = 1\n\n[[llm.fallbacks]]\nprovider = \"openai\"\nbase_url = \"http://b:1/v1\"\nmodel = \"m2\"\n",
    );
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    assert_eq!(s.llm.retries, 1);
    assert_eq!(s.llm.fallbacks.len(), 1);
    assert_eq!(s.llm.fallbacks[0].provider, Provider::Openai);
    assert_eq!(s.llm.fallbacks[0].api_key, None);
    let cases = [
        (
            "[[llm.fallbacks]]\nprovider = \"openai\"\nbase_url = \"ftp://b\"\nmodel = \"m\"\n",
            "llm.fallbacks[0].base_url",
        ),
        (
            "[[llm.fallbacks]]\nprovider = \"ollama\"\nbase_url = \"http://b\"\nmodel = \" \"\n",
            "llm.fallbacks[0].model",
        ),
        (
            "[[llm.fallbacks]]\nprovider = \"ollama\"\nbase_url = \"http://b\"\nmodle = \"m\"\n",
            "llm.fallbacks",
        ),
        (
            "[llm]\nretry_max_ms = 10\n",
            "llm.retry_base_ms / llm.retry_max_ms",
        ),
        ("[llm]\nretries = 99\n", "llm.retries"),
        ("[llm]\nmax_answer_secs = 0\n", "llm.max_answer_secs"),
        ("[llm]\nmax_chunk_bytes = 10\n", "llm.max_chunk_bytes"),
        ("[llm]\ncooldown_secs = 0\n", "llm.cooldown_secs"),
    ];
    for (toml, key) in cases {
        let err = Settings::load_without_env(Some(write(toml).path())).unwrap_err();
        assert!(
            err.to_string().contains(key),
            "{toml:?}: error '{err}' does not name {key}"
        );
    }
}

#[test]
fn the_judge_falls_back_to_the_llm_section() {
    let s = Settings::load_without_env(None).unwrap();
    let c = s.judge.connection(&s.llm);
    assert_eq!(
        (c.provider, c.base_url.as_str(), c.model.as_str()),
        (
            s.llm.provider,
            s.llm.base_url.as_str(),
            s.llm.model.as_str()
        )
    );
    let f = write(
        "[judge]\nprovider = \"openai\"\nbase_url = \"http://j:1/v1\"\nmodel = \"big\"\napi_key = \"k\"\n",
    );
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    let c = s.judge.connection(&s.llm);
    assert_eq!(c.provider, Provider::Openai);
    assert_eq!(
        (c.base_url.as_str(), c.model.as_str(), c.api_key.as_deref()),
        ("http://j:1/v1", "big", Some("k"))
    );
    for (toml, key) in [
        ("[judge]\nbase_url = \"ftp://x\"\n", "judge.base_url"),
        (
            "[judge]\nrelevancy_questions = 0\n",
            "judge.relevancy_questions",
        ),
        ("[eval]\ndatset = \"x\"\n", "eval"),
    ] {
        let err = Settings::load_without_env(Some(write(toml).path())).unwrap_err();
        assert!(err.to_string().contains(key), "{toml:?}: {err}");
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn empty_means_unset_and_durations_are_read_once() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            "[server]\nheader_read_timeout_secs = 7\ntls_cert = \"  \"\n\n[llm]\nretry_base_ms = 250\napi_key = \" sk-x \"\n",
        )?;
        jail.set_env("ASSIST__QDRANT__URL", "");
        jail.set_env("ASSIST__EMBEDDINGS__BASE_URL", "http://e:1");
        let s = Settings::load(Some(Path::new("c.toml"))).unwrap();
        assert_eq!(s.server.header_read_timeout, Duration::from_secs(7));
        assert_eq!(s.llm.retry_base, Duration::from_millis(250));
        assert_eq!(s.server.tls_cert, None, "blank is unset");
        assert_eq!(s.llm.api_key.as_deref(), Some("sk-x"), "values are trimmed");
        assert_eq!(s.qdrant.url, None);
        assert_eq!(s.embeddings.base_url.as_deref(), Some("http://e:1"));
        assert_eq!(s.sessions.ttl, Duration::from_secs(604_800));
        Ok(())
    });
}

#[test]
fn missing_config_file_is_an_error() {
    let err = Settings::load_without_env(Some(Path::new("/nonexistent/x.toml"))).unwrap_err();
    assert!(err.to_string().contains("does not exist"));
}

#[test]
fn a_duration_past_ten_years_is_refused_with_its_key() {
    for (toml, key) in [
        (
            "[llm]\nmax_answer_secs = 9223372036854775807\n",
            "llm.max_answer_secs",
        ),
        (
            "[telemetry]\nexport_timeout_secs = 400000000\n",
            "telemetry.export_timeout_secs",
        ),
    ] {
        let f = write(toml);
        let e = Settings::load_without_env(Some(f.path()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 315360000 seconds"), "{e}");
        assert!(e.contains(key), "{e}");
    }
    let f = write("[llm]\nmax_answer_secs = 315360000\n");
    let s = Settings::load_without_env(Some(f.path())).unwrap();
    assert_eq!(s.llm.max_answer.as_secs(), 315_360_000);
}

#[test]
fn a_completion_template_the_gateway_does_not_know_is_refused_by_name() {
    for good in ["auto", "none", "Qwen", " starcoder "] {
        let f = write(&format!("[completion]\ntemplate = \"{good}\"\n"));
        assert!(Settings::load_without_env(Some(f.path())).is_ok(), "{good}");
    }
    let f = write("[completion]\ntemplate = \"qwen2.5\"\n");
    let e = Settings::load_without_env(Some(f.path())).unwrap_err();
    assert_eq!(e.key, "completion.template", "{e}");
}
