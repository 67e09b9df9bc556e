//! The benchmark's settings (the `BENCH_*` variables) and CPU pinning.

use super::*;

pub(crate) struct Knobs {
    pub(crate) targets: Vec<String>,
    pub(crate) secs: f64,
    pub(crate) step_secs: f64,
    pub(crate) ladder: Vec<f64>,
    pub(crate) bounds_ms: Vec<f64>,
    pub(crate) ttft_rate: f64,
    pub(crate) concurrency: usize,
    pub(crate) stream_concurrency: Vec<usize>,
    pub(crate) streams: u64,
    pub(crate) hold_tokens: usize,
    pub(crate) hold_delay: Duration,
    pub(crate) tokens: usize,
    pub(crate) timeout: Duration,
    pub(crate) max_inflight: u64,
    pub(crate) litellm: PathBuf,
    pub(crate) litellm_workers: usize,
    pub(crate) nginx: PathBuf,
    pub(crate) gateway_log: String,
    pub(crate) pin: bool,
    /// oha's executable for the closed-loop runs (`None`: the bench's own client).
    pub(crate) oha: Option<PathBuf>,
    /// Fixed rates of the latency columns, req/s.
    pub(crate) rates: Vec<f64>,
}

pub(crate) fn list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.to_string());
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}: {s:?} is not a valid value"))
        })
        .collect()
}

impl Knobs {
    pub(crate) fn from_env() -> Self {
        let home = std::env::var("HOME").unwrap_or_default();
        let pin = match env_or("BENCH_PIN", "on".to_string()).as_str() {
            "on" | "1" | "true" | "yes" => true,
            "off" | "0" | "false" | "no" => false,
            other => panic!("BENCH_PIN={other:?}: on or off"),
        };
        Self {
            targets: list("BENCH_TARGETS", "direct,nginx,litellm,passthrough,brunix"),
            secs: env_or("BENCH_SECS", 5.0),
            step_secs: env_or("BENCH_STEP_SECS", 2.0),
            ladder: list(
                "BENCH_LADDER",
                "25,50,100,150,200,300,400,600,800,1000,1500,2000,3000,4000,6000,8000,12000,16000",
            ),
            bounds_ms: list("BENCH_P99_BOUNDS_MS", "10,50,250"),
            ttft_rate: env_or("BENCH_TTFT_RATE", 100.0),
            concurrency: env_or("BENCH_CONCURRENCY", 32),
            stream_concurrency: list("BENCH_STREAM_CONCURRENCY", "50,200"),
            streams: env_or("BENCH_STREAMS", 2000),
            hold_tokens: env_or("BENCH_HOLD_TOKENS", 10),
            hold_delay: Duration::from_millis(env_or("BENCH_HOLD_DELAY_MS", 500)),
            tokens: env_or("BENCH_TOKENS", 20),
            timeout: Duration::from_secs(env_or("BENCH_TIMEOUT_SECS", 10)),
            max_inflight: env_or("BENCH_MAX_INFLIGHT", 4000),
            litellm: env_or(
                "BENCH_LITELLM",
                PathBuf::from(format!(
                    "{home}/.cache/assist-gateway/bench-venv/bin/litellm"
                )),
            ),
            // One core to itself when pinned: one worker, as the gateway gets one core.
            litellm_workers: env_or(
                "BENCH_LITELLM_WORKERS",
                if pin {
                    1
                } else {
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                },
            ),
            nginx: env_or("BENCH_NGINX", find_nginx()),
            gateway_log: env_or("BENCH_GATEWAY_LOG", "warn".to_string()),
            pin,
            oha: match env_or("BENCH_OHA", String::new()).as_str() {
                "off" => None,
                "" => Some(PathBuf::from(format!(
                    "{home}/.cache/assist-gateway/oha/bin/oha"
                )))
                .filter(|p| p.is_file()),
                path => Some(PathBuf::from(path)),
            },
            rates: list("BENCH_RATES", "20,100,1000"),
        }
    }
}

/// `nginx` on PATH (Debian puts it in /usr/sbin, often not on a user's PATH), else
/// /usr/sbin/nginx.
pub(crate) fn find_nginx() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("nginx"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// Where the target and the load run (CPU lists as taskset takes them).
pub(crate) struct Pinning {
    /// The target under test (nginx, the gateway, LiteLLM).
    pub(crate) target: Option<String>,
    /// For the table's header.
    pub(crate) note: String,
}

/// The CPUs this process may run on (`Cpus_allowed_list`, e.g. "0-1" or "0,2-3").
pub(crate) fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// Pins this process to every allowed CPU but the first, which is left to the targets
/// (see the module doc). Must run before any other thread is started.
pub(crate) fn pin_self(knobs: &Knobs) -> Pinning {
    let cpus = allowed_cpus();
    let unpinned = |why: &str| Pinning {
        target: None,
        note: format!(
            "not pinned ({why}): load client, scripted upstream and the target share the CPUs"
        ),
    };
    if !knobs.pin {
        return unpinned("BENCH_PIN=off");
    }
    if cpus.len() < 2 {
        return unpinned(&format!("{} CPU allowed", cpus.len()));
    }
    let join = |c: &[u32]| c.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let (target, load) = (join(&cpus[..1]), join(&cpus[1..]));
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &load, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("taskset (util-linux) to pin the load, or BENCH_PIN=off: {e}"));
    assert!(status.success(), "taskset -a -p -c {load} failed: {status}");
    let now = join(&allowed_cpus());
    assert_eq!(now, load, "this process's CPUs after taskset");
    Pinning {
        note: format!(
            "pinned with taskset: the target (nginx, gateway, LiteLLM) on CPU {target}, load client and scripted upstream on CPU {load} (the direct row has no target: client and upstream share CPU {load})"
        ),
        target: Some(target),
    }
}
