//! The load: open-loop steps at a fixed rate, closed-loop clients, and slow streams held
//! open at once.

use super::*;

/// The result of one open-loop run.
#[derive(Default)]
pub(crate) struct Step {
    pub(crate) offered: f64,
    /// Microseconds from each request's due time to its last byte (successes only).
    pub(crate) latency_us: Vec<u64>,
    /// Microseconds from each request's due time to its first answer token (successes).
    pub(crate) ttft_us: Vec<u64>,
    pub(crate) errors: u64,
    /// Requests never sent because BENCH_MAX_INFLIGHT were outstanding.
    pub(crate) shed: u64,
    pub(crate) first_error: Option<String>,
    /// Successful requests per second, from the first due time to the last answer.
    pub(crate) achieved: f64,
}

impl Step {
    /// Every request answered in full and the target kept up with the offered rate.
    pub(crate) fn reached(&self) -> bool {
        self.errors == 0 && self.shed == 0 && self.achieved >= 0.9 * self.offered
    }

    pub(crate) fn p(&self, q: f64) -> f64 {
        percentile(&self.latency_us, q)
    }

    pub(crate) fn ttft(&self, q: f64) -> f64 {
        percentile(&self.ttft_us, q)
    }

    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "offered {:.0}/s achieved {:.0}/s, p50 {:.3} ms p99 {:.3} ms, {} ok",
            self.offered,
            self.achieved,
            self.p(0.5),
            self.p(0.99),
            self.latency_us.len()
        );
        if self.errors + self.shed > 0 {
            s += &format!(", {} errors, {} shed", self.errors, self.shed);
        }
        if let Some(e) = &self.first_error {
            s += &format!(" (first error: {e})");
        }
        s
    }
}

/// An error with its causes ("error sending request" alone says little).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s += &format!(": {cause}");
        source = cause.source();
    }
    s
}

/// A request for `url`'s dialect: chat completions, Anthropic Messages (`/v1/messages`,
/// `max_tokens` required) or the Responses API (`/v1/responses`).
pub(crate) fn body(url: &str, model: &str, stream: bool) -> Bytes {
    let body = if url.ends_with("/v1/messages") {
        json!({"model": model, "stream": stream, "max_tokens": 4096,
               "messages": [{"role": "user", "content": QUESTION}]})
    } else if url.ends_with("/v1/responses") {
        json!({"model": model, "stream": stream, "input": QUESTION})
    } else {
        json!({"model": model, "stream": stream,
               "messages": [{"role": "user", "content": QUESTION}]})
    };
    Bytes::from(body.to_string())
}

/// A stream that ended as its dialect ends one: OpenAI's `[DONE]`, Anthropic's
/// `message_stop`, the Responses API's `response.completed` event.
pub(crate) fn stream_complete(text: &[u8]) -> bool {
    if text.ends_with(b"data: [DONE]\n\n")
        || text.ends_with(b"data: {\"type\":\"message_stop\"}\n\n")
    {
        return true;
    }
    let Some(events) = text.strip_suffix(b"\n\n") else {
        return false;
    };
    let last = events
        .windows(2)
        .rposition(|w| w == b"\n\n")
        .map_or(0, |i| i + 2);
    events[last..].starts_with(b"event: response.completed\n")
}

/// One request read to its end: microseconds from `due` to the first answer token and
/// to the last byte. The answer must hold every scripted token (and a stream its end).
pub(crate) async fn one(
    client: &reqwest::Client,
    url: &str,
    body: Bytes,
    stream: bool,
    last_token: &str,
    due: Instant,
    timeout: Duration,
) -> Result<(u64, u64), String> {
    let mut r = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("send: {}", chain(&e)))?;
    if r.status() != 200 {
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {:.200}", text));
    }
    let mut text = Vec::with_capacity(4096);
    let mut first = None;
    while let Some(chunk) = r
        .chunk()
        .await
        .map_err(|e| format!("body: {}", chain(&e)))?
    {
        text.extend_from_slice(&chunk);
        if first.is_none() && text.windows(4).any(|w| w == b"tok0") {
            first = Some(due.elapsed());
        }
    }
    let whole = due.elapsed();
    let complete = text
        .windows(last_token.len())
        .any(|w| w == last_token.as_bytes())
        && (!stream || stream_complete(&text));
    match first {
        Some(first) if complete => Ok((first.as_micros() as u64, whole.as_micros() as u64)),
        _ => Err(format!(
            "incomplete answer: {:.200}",
            String::from_utf8_lossy(&text)
        )),
    }
}

/// Sends a target's load.
pub(crate) struct Runner<'a> {
    pub(crate) name: &'a str,
    pub(crate) client: &'a reqwest::Client,
    pub(crate) url: &'a str,
    pub(crate) knobs: &'a Knobs,
}

impl Runner<'_> {
    /// Open-loop load: `rate` requests per second for `secs`, each counted from its due
    /// time, every answer `knobs.tokens` long.
    pub(crate) async fn open_loop(&self, body: &Bytes, stream: bool, rate: f64, secs: f64) -> Step {
        let (client, url, knobs, tokens) = (self.client, self.url, self.knobs, self.knobs.tokens);
        let n = (rate * secs).round().max(1.0) as u64;
        let start = Instant::now() + Duration::from_millis(5);
        let inflight = Arc::new(AtomicU64::new(0));
        let last_done_us = Arc::new(AtomicU64::new(0));
        let last_token = format!("tok{}", tokens - 1);
        let mut tasks = Vec::with_capacity(n as usize);
        let mut shed = 0;
        for i in 0..n {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            tokio::time::sleep_until(due).await;
            if inflight.load(Ordering::Relaxed) >= knobs.max_inflight {
                shed += 1;
                continue;
            }
            inflight.fetch_add(1, Ordering::Relaxed);
            let (client, url, body, inflight, last_done_us, last_token) = (
                client.clone(),
                url.to_string(),
                body.clone(),
                inflight.clone(),
                last_done_us.clone(),
                last_token.clone(),
            );
            let timeout = knobs.timeout;
            tasks.push(tokio::spawn(async move {
                let r = one(&client, &url, body, stream, &last_token, due, timeout).await;
                inflight.fetch_sub(1, Ordering::Relaxed);
                last_done_us.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                r
            }));
        }
        let mut step = Step {
            offered: rate,
            shed,
            ..Default::default()
        };
        for t in tasks {
            match t.await.expect("request task") {
                Ok((first, whole)) => {
                    step.ttft_us.push(first);
                    step.latency_us.push(whole);
                }
                Err(e) => {
                    step.errors += 1;
                    step.first_error.get_or_insert(e);
                }
            }
        }
        let span = (last_done_us.load(Ordering::Relaxed) as f64 / 1e6).max(secs);
        step.achieved = step.latency_us.len() as f64 / span;
        step
    }

    /// Closed loop: `concurrency` clients, each sending its next request as soon as its
    /// last answer is complete (or 10 ms after a failure), for 0.5 s of ramp-up and then
    /// `secs` counted: whole answers per second over the counted part.
    pub(crate) async fn closed_loop(
        &self,
        body: &Bytes,
        stream: bool,
        concurrency: usize,
        secs: f64,
    ) -> Closed {
        if let Some(oha) = &self.knobs.oha {
            return closed_loop_oha(oha, self.url, body, concurrency, secs).await;
        }
        let (client, url, knobs) = (self.client, self.url, self.knobs);
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let first_error = Arc::new(Mutex::new(None::<String>));
        let last_token = format!("tok{}", knobs.tokens - 1);
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, url, body, last_token) = (
                    client.clone(),
                    url.to_string(),
                    body.clone(),
                    last_token.clone(),
                );
                let (done, failed, stop, first_error) = (
                    done.clone(),
                    failed.clone(),
                    stop.clone(),
                    first_error.clone(),
                );
                let timeout = knobs.timeout;
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let due = Instant::now();
                        match one(
                            &client,
                            &url,
                            body.clone(),
                            stream,
                            &last_token,
                            due,
                            timeout,
                        )
                        .await
                        {
                            Ok(_) => {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                first_error.lock().unwrap().get_or_insert(e);
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (done0, failed0, t0) = (
            done.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            Instant::now(),
        );
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let (done1, failed1, span) = (
            done.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
            t0.elapsed().as_secs_f64(),
        );
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("closed-loop client");
        }
        let first_error = first_error.lock().unwrap().take();
        Closed {
            concurrency,
            rate: (done1 - done0) as f64 / span,
            answered: done.load(Ordering::Relaxed),
            cpu: None,
            target_cpus: 1.0,
            errors: failed1 - failed0,
            first_error,
        }
    }

    /// A pause after a run. A target that fell behind may still be working through
    /// requests the client gave up on: then single probes until two in a row answer
    /// within a second (at most two minutes), so the next run does not measure a backlog.
    pub(crate) async fn recover(&self, body: &Bytes, step: &Step) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if step.reached() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let last_token = format!("tok{}", self.knobs.tokens - 1);
        let mut quick = 0;
        while quick < 2 && Instant::now() < deadline {
            let due = Instant::now();
            let probe = one(
                self.client,
                self.url,
                body.clone(),
                false,
                &last_token,
                due,
                self.knobs.timeout,
            )
            .await;
            if probe.is_ok() && due.elapsed() < Duration::from_secs(1) {
                quick += 1;
            } else {
                quick = 0;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        eprintln!(
            "{}: {} after falling behind",
            self.name,
            if quick >= 2 {
                "recovered"
            } else {
                "NOT recovered"
            }
        );
    }
}

/// A closed-loop run: whole answers per second at a fixed concurrency.
pub(crate) struct Closed {
    pub(crate) concurrency: usize,
    pub(crate) rate: f64,
    /// Answers completed over the whole run (ramp-up included): what the target's CPU
    /// time over the run is divided by. With oha, requests still open at the end are cut
    /// off and not counted, though the target worked on them (at most c of them: about
    /// 2 % at c=200), so the CPU time per answer is a little high.
    pub(crate) answered: u64,
    /// The target's CPU time per answer over the run, and how many CPUs it may use (set
    /// by the caller, which knows the target's process and pinning).
    pub(crate) cpu: Option<CpuPerAnswer>,
    pub(crate) target_cpus: f64,
    /// Failed requests in the counted part.
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

impl Closed {
    pub(crate) fn summary(&self) -> String {
        let mut s = format!("c={}: {:.0}/s", self.concurrency, self.rate);
        if self.errors > 0 {
            s += &format!(", {} failed", self.errors);
        }
        if let Some(e) = &self.first_error {
            s += &format!(" (first error: {e})");
        }
        s
    }

    /// For `Runner::recover`: a run with failures may have left a backlog behind.
    pub(crate) fn as_step(&self) -> Step {
        Step {
            errors: self.errors,
            ..Default::default()
        }
    }

    /// How much of its CPUs the target's CPU time filled over the run (its CPU time per
    /// answer times its rate, over the CPUs it may use).
    pub(crate) fn busy(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.total_us() * self.rate / 1e6 / self.target_cpus)
    }

    /// The rate, when every request of the counted part succeeded.
    pub(crate) fn clean_rate(&self) -> Option<f64> {
        (self.errors == 0 && self.rate > 0.0).then_some(self.rate)
    }

    pub(crate) fn cell(&self) -> String {
        match self.clean_rate() {
            Some(r) => thousands(r),
            None => format!("{} ({} failed)", thousands(self.rate), self.errors),
        }
    }
}

/// A target's CPU time per answer, microseconds, split as the kernel accounts it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuPerAnswer {
    pub(crate) user_us: f64,
    pub(crate) system_us: f64,
}

impl CpuPerAnswer {
    /// From a process's CPU ticks (user, system) before and after `answers` answers; none
    /// when there were none, or when the count went down (a worker process ended).
    pub(crate) fn between(before: (u64, u64), after: (u64, u64), answers: u64) -> Option<Self> {
        let user = after.0.checked_sub(before.0)?;
        let system = after.1.checked_sub(before.1)?;
        if answers == 0 {
            return None;
        }
        let us = 1e6 / clock_ticks() / answers as f64;
        Some(Self {
            user_us: user as f64 * us,
            system_us: system as f64 * us,
        })
    }

    pub(crate) fn total_us(&self) -> f64 {
        self.user_us + self.system_us
    }
}

/// Concurrent slow streams: how many are opened, held at once, and answered in full.
pub(crate) struct Held {
    pub(crate) opened: u64,
    pub(crate) served: u64,
    pub(crate) peak_open: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) async fn hold_streams(client: &reqwest::Client, target: &Target, knobs: &Knobs) -> Held {
    let n = knobs.streams;
    let body = body(&target.url, &target.model, true);
    let last_token = format!("tok{}", knobs.hold_tokens - 1);
    let open = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let timeout = knobs.hold_delay * knobs.hold_tokens as u32 + Duration::from_secs(30);
    // Opened over about two seconds: as fast as a crowd of editors reconnecting.
    let rate = (n as f64 / 2.0).max(1.0);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let (client, url, body, last_token, open, peak) = (
            client.clone(),
            target.url.clone(),
            body.clone(),
            last_token.clone(),
            open.clone(),
            peak.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut r = client
                .post(&url)
                .header("content-type", "application/json")
                .body(body)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| format!("send: {}", chain(&e)))?;
            if r.status() != 200 {
                return Err(format!("HTTP {}", r.status()));
            }
            let mut text = Vec::new();
            let mut counted = false;
            let result = loop {
                match r.chunk().await {
                    Ok(Some(c)) => {
                        text.extend_from_slice(&c);
                        if !counted && text.windows(4).any(|w| w == b"tok0") {
                            counted = true;
                            let now = open.fetch_add(1, Ordering::Relaxed) + 1;
                            peak.fetch_max(now, Ordering::Relaxed);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(format!("body: {}", chain(&e))),
                }
            };
            if counted {
                open.fetch_sub(1, Ordering::Relaxed);
            }
            result?;
            let complete = text
                .windows(last_token.len())
                .any(|w| w == last_token.as_bytes())
                && stream_complete(&text);
            if complete {
                Ok(())
            } else {
                Err("incomplete stream".to_string())
            }
        }));
    }
    let mut held = Held {
        opened: n,
        served: 0,
        peak_open: 0,
        first_error: None,
    };
    for t in tasks {
        match t.await.expect("stream task") {
            Ok(()) => held.served += 1,
            Err(e) => {
                held.first_error.get_or_insert(e);
            }
        }
    }
    held.peak_open = peak.load(Ordering::Relaxed);
    held
}

/// The closed loop driven by oha (`BENCH_OHA`): `concurrency` connections for `secs`, each
/// sending its next request when its answer has been read to the end. oha runs on this
/// process's CPUs (a child inherits the mask). Requests still in flight at the deadline
/// are not counted, as oha reports them apart ("aborted due to deadline").
async fn closed_loop_oha(
    oha: &std::path::Path,
    url: &str,
    body: &Bytes,
    concurrency: usize,
    secs: f64,
) -> Closed {
    let out = tokio::process::Command::new(oha)
        .args(["--no-tui", "--output-format", "json", "-m", "POST"])
        .args(["-H", "content-type: application/json"])
        .args(["-c", &concurrency.to_string()])
        .args(["-z", &format!("{}ms", (secs * 1000.0) as u64)])
        .arg("-d")
        .arg(std::str::from_utf8(body).unwrap())
        .arg(url)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run oha ({}): {e}", oha.display()));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "oha's report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let statuses = report["statusCodeDistribution"].as_object();
    let count = |ok: bool| -> u64 {
        statuses
            .into_iter()
            .flatten()
            .filter(|(code, _)| (code.as_str() == "200") == ok)
            .filter_map(|(_, n)| n.as_u64())
            .sum()
    };
    let errors: Vec<(String, u64)> = report["errorDistribution"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(what, _)| !what.contains("deadline"))
        .map(|(what, n)| (what.clone(), n.as_u64().unwrap_or(0)))
        .collect();
    let failed = count(false) + errors.iter().map(|(_, n)| n).sum::<u64>();
    let first_error = errors
        .first()
        .map(|(what, _)| what.clone())
        .or_else(|| (count(false) > 0).then(|| format!("statuses {statuses:?}")));
    let total = report["summary"]["total"].as_f64().unwrap_or(secs);
    Closed {
        concurrency,
        rate: count(true) as f64 / total,
        answered: count(true),
        cpu: None,
        target_cpus: 1.0,
        errors: failed,
        first_error,
    }
}
