//! Real servers the tests run beside the gateway: Redis, and the Qdrant gRPC API.

use std::path::Path;
use std::time::Duration;

use super::python_for;

/// A real `redis-server` (Debian's package, installed by scripts/system-deps.sh) on a free
/// port, stopped when dropped. `None` (the test says it was skipped) when it is missing,
/// outside CI.
pub struct RedisServer {
    child: std::process::Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Option<Self> {
        let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .find(|p| Path::new(p).exists());
        let Some(binary) = binary else {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server is missing: scripts/system-deps.sh installs it"
            );
            eprintln!("SKIPPED: redis-server is not installed");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Qdrant gRPC API served by tests/qdrant_grpc_server.py (the qdrant-client PyPI
/// package's servicers in front of its in-memory engine).
pub struct QdrantTestServer {
    child: std::process::Child,
    pub url: String,
}

impl QdrantTestServer {
    pub fn start() -> Option<Self> {
        use std::io::BufRead;
        let python = python_for("the Qdrant server tests")?;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/qdrant_grpc_server.py");
        let mut child = std::process::Command::new(python)
            .args([script, "0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the Qdrant test server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("unexpected: {line:?}"));
        Some(Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
        })
    }
}

impl Drop for QdrantTestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
