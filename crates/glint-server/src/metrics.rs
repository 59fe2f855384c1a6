//! `GET /metrics` (with `--metrics`): Prometheus text format 0.0.4 under
//! llama-server's `llamacpp:` names, plus two histograms of glint's own
//! under `glint:` (llama-server has no histograms, and clients that parse
//! its `llamacpp:` lines expect one `# TYPE` line per sample name).
//!
//! Everything is derived on the server side from what the engine tells a
//! request, stamped on the engine thread as the events are sent (so a slow
//! reader of a stream does not stretch the figures):
//!
//! | instant | seen as |
//! |---|---|
//! | submitted | the handler queues the request |
//! | picked up | the engine first asks whether the listener is gone (it does so when it takes the request off its queue) |
//! | token *k* | the *k*-th `Event::Delta` (the first `completion_tokens` of them; a last one may only flush held text) |
//! | done | `Event::Done`, with the token counts |
//!
//! | metric | type | what |
//! |---|---|---|
//! | `prompt_tokens_total` | counter | prompt tokens prefilled (`prompt_tokens - cached_tokens`) |
//! | `prompt_tokens_cached_total` | counter | prompt tokens found in a slot's cache |
//! | `prompt_seconds_total` | counter | wall time during which some prompt was prefilling (pick-up to first token; overlapping prompts count once, as llama-server times whole batches) |
//! | `tokens_predicted_total` | counter | generated tokens |
//! | `tokens_predicted_seconds_total` | counter | per request, first to last token, summed over requests (as llama-server sums its slots) |
//! | `prompt_tokens_seconds` | gauge | prompt tokens / prompt seconds since the last scrape |
//! | `predicted_tokens_seconds` | gauge | generation steps (tokens after the first) / their seconds since the last scrape: one slot's rate |
//! | `requests_processing` | gauge | slots running a request |
//! | `requests_deferred` | gauge | requests waiting for a slot |
//! | `time_to_first_token_seconds` | histogram | submitted to first token, per request |
//! | `inter_token_latency_seconds` | histogram | between two tokens of one request |
//!
//! llama-server's `n_decode_total` counts `llama_decode` calls, which the
//! engine's events do not show; it is left out rather than guessed.
//! A request the client abandons still counts its prefill time, not its
//! tokens (only `Done` carries the counts).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use glint::engine::{DecodeStats, Event, Usage};

/// Upper bounds of the time-to-first-token buckets, seconds: a cached
/// prompt on a small model (milliseconds) to a long prompt queued behind
/// others (a minute).
const TTFT_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Upper bounds of the inter-token-latency buckets, seconds: a batched
/// decode step of a small model (about a millisecond) to a step stalled
/// behind a whole unchunked prompt (seconds).
const ITL_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// A cumulative histogram with fixed bounds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    /// Observations `<= bounds[i]` and above `bounds[i-1]`; the last one
    /// is above every bound (`+Inf`).
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    fn observe(&mut self, x: f64) {
        let i = self.bounds.partition_point(|&b| b < x);
        self.counts[i] += 1;
        self.sum += x;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP glint:{name} {help}");
        let _ = writeln!(out, "# TYPE glint:{name} histogram");
        let mut cum = 0;
        for (b, n) in self.bounds.iter().zip(&self.counts) {
            cum += n;
            let _ = writeln!(out, "glint:{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += self.counts[self.bounds.len()];
        let _ = writeln!(out, "glint:{name}_bucket{{le=\"+Inf\"}} {cum}");
        let _ = writeln!(out, "glint:{name}_sum {}", self.sum);
        let _ = writeln!(out, "glint:{name}_count {cum}");
    }
}

/// Tokens and seconds, for a rate.
#[derive(Clone, Copy, Debug, Default)]
struct Rate {
    n: u64,
    secs: f64,
}

impl Rate {
    fn per_second(self) -> f64 {
        if self.secs > 0.0 {
            self.n as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// The server's figures since it started.
#[derive(Debug)]
struct Totals {
    n_prompt: u64,
    n_cached: u64,
    prompt_secs: f64,
    n_predicted: u64,
    predicted_secs: f64,
    /// Since the last scrape, for the gauges (llama-server's buckets).
    prompt_window: Rate,
    predict_window: Rate,
    ttft: Histogram,
    itl: Histogram,
    /// Requests between pick-up and first token, and since when that
    /// number is above zero.
    n_prefilling: usize,
    prefill_since: Option<Instant>,
}

/// The figures every request adds to; one per server.
#[derive(Debug)]
pub struct Metrics {
    totals: Mutex<Totals>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            totals: Mutex::new(Totals {
                n_prompt: 0,
                n_cached: 0,
                prompt_secs: 0.0,
                n_predicted: 0,
                predicted_secs: 0.0,
                prompt_window: Rate::default(),
                predict_window: Rate::default(),
                ttft: Histogram::new(&TTFT_BUCKETS),
                itl: Histogram::new(&ITL_BUCKETS),
                n_prefilling: 0,
                prefill_since: None,
            }),
        }
    }
}

impl Metrics {
    fn lock(&self) -> MutexGuard<'_, Totals> {
        // The figures stay consistent under a panic elsewhere: each update
        // is a few additions.
        self.totals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request entered prefill.
    fn prefill_started(&self, now: Instant) {
        let mut t = self.lock();
        if t.n_prefilling == 0 {
            t.prefill_since = Some(now);
        }
        t.n_prefilling += 1;
    }

    /// A request left prefill (its first token, or it went away).
    fn prefill_ended(&self, now: Instant) {
        let mut t = self.lock();
        t.n_prefilling = t.n_prefilling.saturating_sub(1);
        if t.n_prefilling == 0 {
            if let Some(since) = t.prefill_since.take() {
                let secs = now.duration_since(since).as_secs_f64();
                t.prompt_secs += secs;
                t.prompt_window.secs += secs;
            }
        }
    }

    /// A request finished: its counts and token times.
    fn finished(&self, submitted: Instant, tokens: &[Instant], usage: &Usage) {
        let n_prefilled = usage.prompt_tokens.saturating_sub(usage.cached_tokens) as u64;
        let tokens = &tokens[..tokens.len().min(usage.completion_tokens)];
        let mut t = self.lock();
        t.n_prompt += n_prefilled;
        t.prompt_window.n += n_prefilled;
        t.n_cached += usage.cached_tokens as u64;
        t.n_predicted += usage.completion_tokens as u64;
        if let (Some(first), Some(last)) = (tokens.first(), tokens.last()) {
            t.ttft
                .observe(first.duration_since(submitted).as_secs_f64());
            let secs = last.duration_since(*first).as_secs_f64();
            t.predicted_secs += secs;
            t.predict_window.secs += secs;
            t.predict_window.n += tokens.len() as u64 - 1;
        }
        for w in tokens.windows(2) {
            t.itl.observe(w[1].duration_since(w[0]).as_secs_f64());
        }
    }

    /// The text of `GET /metrics`; starts a new window for the rate gauges.
    pub fn render(&self, n_processing: usize, n_deferred: usize, d: DecodeStats) -> String {
        let mut t = self.lock();
        let mut out = String::new();
        let mut item = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP llamacpp:{name} {help}");
            let _ = writeln!(out, "# TYPE llamacpp:{name} {kind}");
            let _ = writeln!(out, "llamacpp:{name} {v}");
        };
        for (name, help, v) in [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed, excluding cached tokens",
                t.n_prompt as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "Number of prompt tokens reused from the cache",
                t.n_cached as f64,
            ),
            (
                "prompt_seconds_total",
                "Total time spent processing prompts",
                t.prompt_secs,
            ),
            (
                "tokens_predicted_total",
                "Number of generation tokens processed",
                t.n_predicted as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "Total time spent generating tokens",
                t.predicted_secs,
            ),
            (
                "n_decode_total",
                "Total number of batches decoded",
                d.n_decode as f64,
            ),
            (
                "n_tokens_max",
                "Largest number of tokens in one batch",
                d.n_tokens_max as f64,
            ),
            // glint has no speculative decoding: llama-server's counters
            // of it, at zero.
            (
                "spec_decode_num_draft_tokens_total",
                "Draft tokens proposed (no speculative decoding)",
                0.0,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Draft tokens accepted (no speculative decoding)",
                0.0,
            ),
            (
                "spec_decode_num_drafts_total",
                "Drafts made (no speculative decoding)",
                0.0,
            ),
        ] {
            item(name, "counter", help, v);
        }
        let per_decode = if d.n_decode > 0 {
            d.busy_slots as f64 / d.n_decode as f64
        } else {
            0.0
        };
        for (name, help, v) in [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                t.prompt_window.per_second(),
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                t.predict_window.per_second(),
            ),
            (
                "requests_processing",
                "Number of requests processing",
                n_processing as f64,
            ),
            (
                "requests_deferred",
                "Number of requests deferred",
                n_deferred as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per batch decoded",
                per_decode,
            ),
        ] {
            item(name, "gauge", help, v);
        }
        t.ttft.write(
            &mut out,
            "time_to_first_token_seconds",
            "Time from a request being queued to its first generated token",
        );
        t.itl.write(
            &mut out,
            "inter_token_latency_seconds",
            "Time between two generated tokens of one request",
        );
        t.prompt_window = Rate::default();
        t.predict_window = Rate::default();
        out
    }
}

/// One request's timeline, kept by its event sink on the engine thread.
pub struct Tracker {
    metrics: Arc<Metrics>,
    submitted: Instant,
    /// Whether the request is between pick-up and first token.
    prefilling: bool,
    picked_up: bool,
    /// When each token `Delta` was sent, per choice.
    deltas: Vec<Vec<Instant>>,
}

impl Tracker {
    /// A request submitted now.
    pub fn new(metrics: Arc<Metrics>) -> Tracker {
        Tracker {
            metrics,
            submitted: Instant::now(),
            prefilling: false,
            picked_up: false,
            deltas: Vec::new(),
        }
    }

    /// The engine looked at the request: the first time, it has taken it
    /// off its queue.
    pub fn on_poll(&mut self) {
        if !self.picked_up {
            self.picked_up = true;
            self.prefilling = true;
            self.metrics.prefill_started(Instant::now());
        }
    }

    /// The engine sends `ev`.
    pub fn on_event(&mut self, ev: &Event) {
        let now = Instant::now();
        match ev {
            Event::Delta { index, token, .. } => {
                // A first token without a poll before it: prefill began at
                // submission as far as anyone can tell.
                if !self.picked_up {
                    self.picked_up = true;
                    self.metrics.prefill_started(self.submitted);
                    self.prefilling = true;
                }
                self.end_prefill(now);
                if token.is_some() {
                    if self.deltas.len() <= *index {
                        self.deltas.resize(index + 1, Vec::new());
                    }
                    self.deltas[*index].push(now);
                }
            }
            Event::Done { index, usage, .. } => {
                self.end_prefill(now);
                let mut usage = *usage;
                if *index > 0 {
                    // The prompt was decoded (or found) once, for choice 0.
                    usage.prompt_tokens = 0;
                    usage.cached_tokens = 0;
                }
                let deltas = self.deltas.get(*index).map(Vec::as_slice).unwrap_or(&[]);
                self.metrics.finished(self.submitted, deltas, &usage);
            }
            Event::Failed(_) => self.end_prefill(now),
            Event::Progress { .. } => {}
        }
    }

    fn end_prefill(&mut self, now: Instant) {
        if self.prefilling {
            self.prefilling = false;
            self.metrics.prefill_ended(now);
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        // Abandoned mid-prefill: that prefill is over too.
        self.end_prefill(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn histogram_buckets_are_cumulative_and_bounds_inclusive() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for x in [0.05, 0.1, 0.5, 2.0] {
            h.observe(x);
        }
        let mut out = String::new();
        h.write(&mut out, "x", "help");
        assert!(out.contains("glint:x_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("glint:x_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("glint:x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("glint:x_sum 2.65\n"), "{out}");
        assert!(out.contains("glint:x_count 4\n"), "{out}");
    }

    #[test]
    fn overlapping_prefills_count_their_wall_time_once() {
        let m = Metrics::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // [0, 30] and [10, 50] overlap: 50 ms in all; [100, 110]: 10 more.
        m.prefill_started(ms(0));
        m.prefill_started(ms(10));
        m.prefill_ended(ms(30));
        m.prefill_ended(ms(50));
        m.prefill_started(ms(100));
        m.prefill_ended(ms(110));
        let secs = m.lock().prompt_secs;
        assert!((secs - 0.060).abs() < 1e-9, "{secs}");
    }

    #[test]
    fn a_flush_delta_past_the_token_count_is_not_a_token() {
        let m = Arc::new(Metrics::default());
        let mut tr = Tracker::new(m.clone());
        tr.on_poll();
        for _ in 0..4 {
            tr.on_event(&Event::Delta {
                index: 0,
                token: Some(7),
                text: "x".into(),
                logprob: None,
            });
        }
        {
            tr.on_event(&Event::Delta {
                index: 0,
                token: None,
                text: "y".into(),
                logprob: None,
            });
        }
        let usage = Usage {
            prompt_tokens: 10,
            cached_tokens: 4,
            completion_tokens: 3,
            slot: 0,
        };
        tr.on_event(&Event::Done {
            index: 0,
            reason: glint::engine::FinishReason::Length,
            stop: glint::engine::StopReason::NPredict,
            usage,
        });
        let t = m.lock();
        assert_eq!((t.n_prompt, t.n_cached, t.n_predicted), (6, 4, 3));
        assert_eq!(t.ttft.counts.iter().sum::<u64>(), 1);
        assert_eq!(t.itl.counts.iter().sum::<u64>(), 2);
        assert_eq!(t.n_prefilling, 0);
    }
}
