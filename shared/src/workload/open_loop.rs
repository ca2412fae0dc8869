//! Open-loop arrivals (Poisson, gamma) and closed-loop users, with prompt/output length distributions.
//!
//! - [`PoissonWorkload`]: exponential inter-arrival gaps at `rate_rps` (vLLM `--request-rate` with burstiness 1).
//! - [`GammaWorkload`]: gamma-distributed gaps with mean `1 / rate_rps` and coefficient of variation `cv`
//!   (vLLM's `--burstiness` is `1 / cv²`, the gamma shape): `cv > 1` is burstier than Poisson, `cv < 1` smoother.
//! - [`ClosedLoopWorkload`]: `users` clients, each sending its next request when the previous one finishes plus
//!   an optional think time (GuideLLM's "concurrent" profile).
//!
//! Every request may start with `shared_prefix_tokens` of one common system prompt (so the prefix cache can hit
//! across requests); the rest of its prompt is unique. Draws use Python's `random.Random` stream for the seed.

use serde::{Deserialize, Serialize};

use super::request::PlannedRequest;
use crate::error::ScenarioError;
use crate::pyrand::{PyRandom, PySeed};

/// Largest accepted request count.
pub const MAX_REQUESTS: u64 = 100_000_000;
/// Largest accepted token length.
pub const MAX_LEN: u32 = 10_000_000;

/// A token-length distribution, tagged on `"dist"`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthDist {
    /// Always `tokens`.
    Fixed { tokens: u32 },
    /// Uniform integer in `min..=max`.
    Uniform { min: u32, max: u32 },
    /// `median · exp(N(0, sigma))`, rounded, at least 1, at most `max` (default 10·median).
    Lognormal {
        median: u32,
        sigma: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
}

impl LengthDist {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let f = ScenarioError::field;
        match *self {
            LengthDist::Fixed { tokens } => {
                if tokens == 0 || tokens > MAX_LEN {
                    return Err(f("tokens", format!("must be in 1..={MAX_LEN} (got {tokens})")));
                }
            }
            LengthDist::Uniform { min, max } => {
                if min == 0 || min > MAX_LEN {
                    return Err(f("min", format!("must be in 1..={MAX_LEN} (got {min})")));
                }
                if max < min || max > MAX_LEN {
                    return Err(f("max", format!("must be in min..={MAX_LEN} (got {max}, min {min})")));
                }
            }
            LengthDist::Lognormal { median, sigma, max } => {
                if median == 0 || median > MAX_LEN {
                    return Err(f("median", format!("must be in 1..={MAX_LEN} (got {median})")));
                }
                if !(sigma.is_finite() && (0.0..=5.0).contains(&sigma)) {
                    return Err(f("sigma", format!("must be in 0..=5 (got {sigma})")));
                }
                if let Some(m) = max
                    && (m < median || m > MAX_LEN)
                {
                    return Err(f("max", format!("must be in median..={MAX_LEN} (got {m})")));
                }
            }
        }
        Ok(())
    }

    /// Largest value the distribution can produce.
    pub fn max_value(&self) -> u32 {
        match *self {
            LengthDist::Fixed { tokens } => tokens,
            LengthDist::Uniform { max, .. } => max,
            LengthDist::Lognormal { median, max, .. } => max.unwrap_or(median.saturating_mul(10).min(MAX_LEN)),
        }
    }

    /// Mean of the distribution (approximate for the clamped lognormal).
    pub fn mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed { tokens } => f64::from(tokens),
            LengthDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            LengthDist::Lognormal { median, sigma, .. } => f64::from(median) * (sigma * sigma / 2.0).exp(),
        }
    }

    pub(crate) fn sample(&self, rng: &mut PyRandom) -> u32 {
        match *self {
            LengthDist::Fixed { tokens } => tokens,
            LengthDist::Uniform { min, max } => {
                let span = f64::from(max - min) + 1.0;
                (min + (rng.random() * span) as u32).min(max)
            }
            LengthDist::Lognormal { median, sigma, .. } => {
                let v = (f64::from(median) * rng.gauss(0.0, sigma).exp()).round();
                (v.max(1.0).min(f64::from(self.max_value()))) as u32
            }
        }
    }
}

fn default_prompt() -> LengthDist {
    LengthDist::Fixed { tokens: 256 }
}
fn default_output() -> LengthDist {
    LengthDist::Fixed { tokens: 256 }
}

fn check_count(name: &str, n: u64) -> Result<(), ScenarioError> {
    if n == 0 || n > MAX_REQUESTS {
        return Err(ScenarioError::field(
            name,
            format!("must be in 1..={MAX_REQUESTS} (got {n})"),
        ));
    }
    Ok(())
}

fn check_rate(rate: f64) -> Result<(), ScenarioError> {
    if !(rate.is_finite() && rate > 0.0 && rate <= 1e7) {
        return Err(ScenarioError::field(
            "rate_rps",
            format!("must be > 0 and at most 1e7 (got {rate})"),
        ));
    }
    Ok(())
}

fn check_lengths(prompt: &LengthDist, output: &LengthDist, shared: u32) -> Result<(), ScenarioError> {
    prompt.validate().map_err(|e| e.within("prompt"))?;
    output.validate().map_err(|e| e.within("output"))?;
    if shared > MAX_LEN {
        return Err(ScenarioError::field(
            "shared_prefix_tokens",
            format!("must be <= {MAX_LEN} (got {shared})"),
        ));
    }
    Ok(())
}

/// Poisson arrivals at `rate_rps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoissonWorkload {
    pub num_requests: u64,
    pub rate_rps: f64,
    /// Unique prompt tokens per request (after the shared prefix).
    #[serde(default = "default_prompt")]
    pub prompt: LengthDist,
    #[serde(default = "default_output")]
    pub output: LengthDist,
    /// Tokens of one common system prompt every request starts with.
    #[serde(default)]
    pub shared_prefix_tokens: u32,
}

impl PoissonWorkload {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        check_count("num_requests", self.num_requests)?;
        check_rate(self.rate_rps)?;
        check_lengths(&self.prompt, &self.output, self.shared_prefix_tokens)
    }
}

/// Gamma arrivals: mean rate `rate_rps`, coefficient of variation `cv` of the gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GammaWorkload {
    pub num_requests: u64,
    pub rate_rps: f64,
    /// Coefficient of variation of inter-arrival gaps (1 = Poisson; vLLM burstiness = 1 / cv²).
    pub cv: f64,
    #[serde(default = "default_prompt")]
    pub prompt: LengthDist,
    #[serde(default = "default_output")]
    pub output: LengthDist,
    #[serde(default)]
    pub shared_prefix_tokens: u32,
}

impl GammaWorkload {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        check_count("num_requests", self.num_requests)?;
        check_rate(self.rate_rps)?;
        if !(self.cv.is_finite() && (0.01..=100.0).contains(&self.cv)) {
            return Err(ScenarioError::field(
                "cv",
                format!("must be in 0.01..=100 (got {})", self.cv),
            ));
        }
        check_lengths(&self.prompt, &self.output, self.shared_prefix_tokens)
    }
}

/// `users` closed-loop clients sending `num_requests` in all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosedLoopWorkload {
    pub users: u32,
    pub num_requests: u64,
    /// Seconds a user waits after a response before sending the next request.
    #[serde(default)]
    pub think_s: f64,
    #[serde(default = "default_prompt")]
    pub prompt: LengthDist,
    #[serde(default = "default_output")]
    pub output: LengthDist,
    #[serde(default)]
    pub shared_prefix_tokens: u32,
}

impl ClosedLoopWorkload {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.users == 0 || self.users > 1_000_000 {
            return Err(ScenarioError::field(
                "users",
                format!("must be in 1..=1000000 (got {})", self.users),
            ));
        }
        check_count("num_requests", self.num_requests)?;
        if !(self.think_s.is_finite() && (0.0..=1e8).contains(&self.think_s)) {
            return Err(ScenarioError::field(
                "think_s",
                format!("must be in 0..=1e8 (got {})", self.think_s),
            ));
        }
        check_lengths(&self.prompt, &self.output, self.shared_prefix_tokens)
    }
}

/// Draws arrivals and lengths deterministically from a seed ([`super::Workload::requests`] is the way in).
#[derive(Debug, Clone)]
pub struct RequestStream {
    rng: PyRandom,
    gaps: Gaps,
    prompt: LengthDist,
    output: LengthDist,
    shared: u32,
    left: u64,
    t_ms: f64,
}

#[derive(Debug, Clone, Copy)]
enum Gaps {
    None,
    Exp { mean_ms: f64 },
    Gamma { shape: f64, scale_ms: f64 },
}

impl RequestStream {
    pub fn poisson(w: &PoissonWorkload, seed: u64) -> Self {
        Self::new(
            seed,
            Gaps::Exp {
                mean_ms: 1000.0 / w.rate_rps,
            },
            w.prompt,
            w.output,
            w.shared_prefix_tokens,
            w.num_requests,
        )
    }

    pub fn gamma(w: &GammaWorkload, seed: u64) -> Self {
        let shape = 1.0 / (w.cv * w.cv);
        let mean_ms = 1000.0 / w.rate_rps;
        Self::new(
            seed,
            Gaps::Gamma {
                shape,
                scale_ms: mean_ms / shape,
            },
            w.prompt,
            w.output,
            w.shared_prefix_tokens,
            w.num_requests,
        )
    }

    pub fn closed(w: &ClosedLoopWorkload, seed: u64) -> Self {
        Self::new(
            seed,
            Gaps::None,
            w.prompt,
            w.output,
            w.shared_prefix_tokens,
            w.num_requests,
        )
    }

    fn new(seed: u64, gaps: Gaps, prompt: LengthDist, output: LengthDist, shared: u32, n: u64) -> Self {
        RequestStream {
            rng: PyRandom::new(PySeed::new(seed)),
            gaps,
            prompt,
            output,
            shared,
            left: n,
            t_ms: 0.0,
        }
    }

    fn gamma_sample(&mut self, shape: f64) -> f64 {
        // Marsaglia–Tsang; shape < 1 boosted by U^(1/shape).
        if shape < 1.0 {
            let u = 1.0 - self.rng.random();
            return self.gamma_sample(shape + 1.0) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.rng.gauss(0.0, 1.0);
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = 1.0 - self.rng.random();
            if u < 1.0 - 0.0331 * x * x * x * x || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v;
            }
        }
    }
}

impl Iterator for RequestStream {
    type Item = PlannedRequest;

    fn next(&mut self) -> Option<PlannedRequest> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match self.gaps {
            Gaps::None => {}
            Gaps::Exp { mean_ms } => self.t_ms += self.rng.expovariate(1.0 / mean_ms),
            Gaps::Gamma { shape, scale_ms } => self.t_ms += self.gamma_sample(shape) * scale_ms,
        }
        let unique = self.prompt.sample(&mut self.rng);
        let output = self.output.sample(&mut self.rng);
        Some(PlannedRequest {
            arrival_ms: self.t_ms,
            shared_prefix_tokens: self.shared,
            unique_prompt_tokens: unique,
            output_tokens: output,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_and_gamma_have_the_asked_mean_rate_and_cv() {
        let p = PoissonWorkload {
            num_requests: 50_000,
            rate_rps: 10.0,
            prompt: default_prompt(),
            output: default_output(),
            shared_prefix_tokens: 0,
        };
        let last = RequestStream::poisson(&p, 1)
            .last()
            .map(|r| r.arrival_ms)
            .unwrap_or(0.0);
        assert!((last / 50_000.0 - 100.0).abs() < 2.0, "{last}");
        let g = GammaWorkload {
            num_requests: 50_000,
            rate_rps: 10.0,
            cv: 3.0,
            prompt: default_prompt(),
            output: default_output(),
            shared_prefix_tokens: 0,
        };
        let times: Vec<f64> = RequestStream::gamma(&g, 1).map(|r| r.arrival_ms).collect();
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / gaps.len() as f64;
        assert!((mean - 100.0).abs() < 5.0, "{mean}");
        assert!((var.sqrt() / mean - 3.0).abs() < 0.3, "cv {}", var.sqrt() / mean);
    }

    #[test]
    fn lengths_stay_in_range() {
        let mut rng = PyRandom::new(PySeed::new(3));
        let u = LengthDist::Uniform { min: 10, max: 20 };
        let l = LengthDist::Lognormal {
            median: 100,
            sigma: 1.0,
            max: Some(300),
        };
        for _ in 0..10_000 {
            assert!((10..=20).contains(&u.sample(&mut rng)));
            assert!((1..=300).contains(&l.sample(&mut rng)));
        }
        assert!(LengthDist::Uniform { min: 5, max: 4 }.validate().is_err());
        assert!(
            LengthDist::Lognormal {
                median: 5,
                sigma: f64::NAN,
                max: None
            }
            .validate()
            .is_err()
        );
    }
}
