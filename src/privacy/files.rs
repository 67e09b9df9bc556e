//! Files that are credentials by their name (`.env`, `id_rsa`, `*.pem`, `.npmrc`,
//! `credentials.json`, cloud CLIs' token caches, shell histories, …): never indexed,
//! whatever the folder walk allows. Public material (`*.pub`, `*.crt`, `known_hosts`) and
//! templates (`.env.example`, `*.sample`) are allowed, and still go through redaction.

use std::sync::LazyLock;

use regex::Regex;

#[rustfmt::skip]
const DENY: &str = r#"(?i)(?:^|/)(?:\.env|\.env\.(?:local|dev|development|prod|production|stage|staging|test|ci|backup|bak|old|save|[a-z0-9_-]+\.local)|[^/]+\.env|\.envrc|\.flaskenv\.local|\.netrc|_netrc|\.npmrc|\.yarnrc(?:\.yml)?|\.pypirc|\.pgpass|\.my\.cnf|\.mylogin\.cnf|\.git-credentials|\.dockercfg|\.s3cfg|\.boto|\.htpasswd|\.vault-token|\.terraformrc|terraform\.rc|\.?credentials(?:\.(?:json|xml|ya?ml|toml|db|csv))?|access_tokens\.db|application_default_credentials\.json|accesstokens\.json|msal_token_cache\.(?:json|bin)|client_secrets?(?:[._-][^/]*)?\.json|[^/]*service[-_]?account[^/]*\.json|kubeconfig(?:\.[a-z]+)?|[^/]+\.kubeconfig|secrets?\.(?:ya?ml|json|toml|env|ini|txt)|[^/]*[-_.]secrets?\.(?:ya?ml|json|toml|env)|id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?|identity|[^/]+_(?:rsa|dsa|ecdsa|ed25519)|otr\.private_key|secret_token\.rb|master\.key|wp-config\.php|local\.settings\.json|sftp-config\.json|filezilla\.xml|recentservers\.xml|sitemanager\.xml|terraform\.tfvars(?:\.json)?|[^/]+\.auto\.tfvars(?:\.json)?|[^/]+\.tfstate(?:\.backup)?|\.(?:bash|zsh|sh|psql|mysql|python|node_repl|rediscli|sqlite|irb)_history|\.history|[^/]+\.(?:pem|key|p12|pfx|pkcs12|p8|jks|keystore|bks|ppk|kdbx?|keychain|agilekeychain|kwallet|psafe3|ovpn|gpg|asc))$|(?:^|/)(?:\.ssh/(?:[^/]+)|\.gnupg/.*|\.aws/(?:credentials|config|sso/cache/.*|cli/cache/.*)|\.azure/.*|\.config/gcloud/.*|\.kube/config|\.docker/config\.json|\.cargo/credentials(?:\.toml)?|\.gem/credentials|\.config/gh/hosts\.yml|\.config/hub|\.m2/settings(?:-security)?\.xml|\.gradle/gradle\.properties|\.password-store/.*|\.terraform\.d/credentials\.tfrc\.json|\.chef/[^/]+\.pem)$"#;

#[rustfmt::skip]
const ALLOW: &str = r#"(?i)(?:^|/)(?:\.env\.(?:example|sample|template|dist|defaults|schema)|[^/]+\.(?:pub|crt|cer)|known_hosts(?:\.old)?|authorized_keys|[^/]+\.example\.[a-z]+|[^/]*\.sample)$"#;

static PATTERNS: LazyLock<Option<(Regex, Regex)>> =
    LazyLock::new(|| Some((Regex::new(DENY).ok()?, Regex::new(ALLOW).ok()?)));

/// Whether the file at `path` (relative to the indexed folder, `/`-separated) holds
/// credentials by its name.
pub fn is_credentials(path: &str) -> bool {
    let path = path.replace('\\', "/");
    match &*PATTERNS {
        Some((deny, allow)) => deny.is_match(&path) && !allow.is_match(&path),
        // Unreachable (the patterns are tested); refuse everything rather than leak.
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_files_by_name() {
        assert!(PATTERNS.is_some());
        for path in [
            ".env",
            "app/.env.production",
            "deploy/prod.env",
            "home/.ssh/id_ed25519",
            "certs/server.key",
            "keys/tls.pem",
            ".npmrc",
            "config/credentials.json",
            ".aws/credentials",
            "gcp/my-service-account.json",
            "infra/terraform.tfvars",
            ".bash_history",
            "store/keystore.p12",
        ] {
            assert!(is_credentials(path), "{path}");
        }
        for path in [
            ".env.example",
            "home/.ssh/id_ed25519.pub",
            "certs/ca.crt",
            "docs/keys.md",
            "src/token.rs",
            "config/prod.toml",
            "README.md",
            "src/secrets_test.py",
        ] {
            assert!(!is_credentials(path), "{path}");
        }
    }
}
