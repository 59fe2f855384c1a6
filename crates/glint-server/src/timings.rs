//! llama-server's `timings` and `prompt_progress` objects, from a request's
//! engine events as they arrive (`timings_per_token`, `return_progress`).

use std::time::Instant;

use glint::engine::Event;
use serde_json::{json, Value};

/// A request's clock: submitted at `t0`, prompt counts from its progress
/// events, token times from its deltas.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    t0: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Tokens generated so far (all choices).
    predicted_n: usize,
    total: usize,
    cache_n: usize,
    processed: usize,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            t0: Instant::now(),
            first: None,
            last: None,
            predicted_n: 0,
            total: 0,
            cache_n: 0,
            processed: 0,
        }
    }

    /// Take in one engine event.
    pub(crate) fn on_event(&mut self, ev: &Event) {
        match ev {
            Event::Progress {
                total,
                cached,
                processed,
            } => {
                (self.total, self.cache_n, self.processed) = (*total, *cached, *processed);
            }
            Event::Delta { token: Some(_), .. } => {
                let now = Instant::now();
                self.first.get_or_insert(now);
                self.last = Some(now);
                self.predicted_n += 1;
            }
            _ => {}
        }
    }

    /// `timings` now.
    pub(crate) fn json(&self) -> Value {
        let now = Instant::now();
        let prompt_end = self.first.unwrap_or(now);
        let prompt_ms = ms(prompt_end - self.t0);
        let predicted_ms = match self.first {
            Some(f) => ms(self.last.unwrap_or(f) - f),
            None => 0.0,
        };
        let prompt_n = self.processed.saturating_sub(self.cache_n);
        timings(
            prompt_n,
            self.cache_n,
            if prompt_n > 0 { prompt_ms } else { 0.0 },
            self.predicted_n,
            predicted_ms,
        )
    }

    /// `prompt_progress` now.
    pub(crate) fn progress(&self) -> Value {
        json!({
            "total": self.total,
            "cache": self.cache_n,
            "processed": self.processed,
            "time_ms": ms(Instant::now() - self.t0),
        })
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `timings` of `prompt_n` prompt tokens decoded in `prompt_ms` (`cache_n`
/// found in the cache) and `predicted_n` tokens generated over
/// `predicted_ms` (from the first to the last: the first comes from the
/// prompt's logits, so the rates are over the `predicted_n - 1` decode
/// steps after it). Never NaN or infinite.
pub(crate) fn timings(
    prompt_n: usize,
    cache_n: usize,
    prompt_ms: f64,
    predicted_n: usize,
    predicted_ms: f64,
) -> Value {
    let steps = predicted_n.saturating_sub(1);
    let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let per_token = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
    json!({
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per_token(prompt_n, prompt_ms),
        "prompt_per_second": per_s(prompt_n, prompt_ms),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per_token(steps, predicted_ms),
        "predicted_per_second": per_s(steps, predicted_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_over_the_steps_after_the_first_token_and_never_nan() {
        let t = timings(10, 2, 50.0, 16, 150.0);
        assert_eq!(t["prompt_per_second"], 200.0);
        assert_eq!(t["predicted_per_second"], 100.0);
        assert_eq!(t["predicted_per_token_ms"], 10.0);
        let t = timings(0, 5, 0.0, 1, 0.0);
        for (k, v) in t.as_object().unwrap() {
            assert!(
                v.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0),
                "{k}: {v}"
            );
        }
    }
}
