//! Tokenizer matching: before a run, measure how many tokens the target's tokenizer makes of the filler, so the
//! filler can be sized for it (`shared::filler::TokenScale`) and the prompts the server sees are the sizes the
//! scenario designs. See docs/replay.md, "Tokenizer matching".
//!
//! For each filler kind (prose, code) [`PAIRS`] pairs of samples are counted, of [`SMALL_TOKENS`] and
//! [`LARGE_TOKENS`] designed tokens at the seed's tokens per word; the ratio is the DIFFERENCE of the pooled counts
//! over the difference of the designed sizes, so what a server adds to every prompt (a BOS token, a chat template) cancels out. Counts come
//! from `POST {origin}/tokenize` (llama.cpp's body `{"content": TEXT}` → `{"tokens": [...]}`, else vLLM's
//! `{"model": M, "prompt": TEXT}` → `{"count": N, ...}`), else from `usage.prompt_tokens` of probe requests with
//! `max_tokens: 1` (not recorded).

use std::time::Duration;

use serde::Serialize;
use shared::filler::{self, FillerKind, FillerRng, TokenScale};
use tokio_util::sync::CancellationToken;

use super::client::{Client, LiveCounters};

/// Designed tokens of the smaller sample of each pair.
pub const SMALL_TOKENS: u64 = 500;
/// Designed tokens of the larger sample of each pair (under a 4k context, so a small server's probes fit).
pub const LARGE_TOKENS: u64 = 3500;
/// Sample pairs per kind: one pair's ratio varies by a couple of percent with the words drawn (code words range
/// from 1 to 6 tokens), so the counts of several are pooled.
pub const PAIRS: usize = 3;

/// `--match-tokenizer`: whether a run measures the target's tokenizer and sizes its filler for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchTokenizer {
    /// Measure (`/tokenize`, else usage probes) and scale; when neither answers, note it and send unscaled text.
    #[default]
    Auto,
    /// As `auto`, but a target that answers neither refuses the run.
    On,
    /// Send the seed's word counts unscaled, measure nothing.
    Off,
}

/// `summary.json`'s `tokenizer`: what was measured and the ratios the filler was scaled by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenizerReport {
    /// `tokenize` (the server's `/tokenize`), `usage` (probe requests' `usage.prompt_tokens`), `off` (not asked),
    /// or `unmeasured` (`auto` and the target answered neither: ratios 1).
    pub source: &'static str,
    /// Server tokens per designed token of prose filler (the scale applied).
    pub prose_ratio: f64,
    /// Server tokens per designed token of code filler (the scale applied).
    pub code_ratio: f64,
    /// The URL that was asked (`/tokenize`, or the completion route of the probes); absent with `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl TokenizerReport {
    pub fn off() -> Self {
        TokenizerReport {
            source: "off",
            prose_ratio: 1.0,
            code_ratio: 1.0,
            endpoint: None,
        }
    }

    /// The scale the filler uses.
    pub fn scale(&self) -> TokenScale {
        TokenScale::new(self.prose_ratio, self.code_ratio).unwrap_or(TokenScale::ONE)
    }
}

/// The samples of `kind`: [`PAIRS`] × (words, text) for [`SMALL_TOKENS`] and [`LARGE_TOKENS`].
fn samples(kind: FillerKind, nonce: u64) -> Vec<(usize, String)> {
    let mut rng = FillerRng::new(nonce ^ 0x746f_6b65_6e69_7a65); // "tokenize"
    (0..PAIRS)
        .flat_map(|_| [SMALL_TOKENS, LARGE_TOKENS])
        .map(|t| {
            let n = kind.words_for_tokens(t);
            // Whole shuffled passes over the corpus: the count measures the corpus' mean, not the draw's luck.
            (n, filler::balanced_words(n, kind, &mut rng))
        })
        .collect()
}

/// Server tokens per designed token from two (words, count) pairs.
fn ratio(kind: FillerKind, a: (usize, u64), b: (usize, u64)) -> Option<f64> {
    let words = b.0.checked_sub(a.0).filter(|w| *w > 0)? as f64;
    let tokens = b.1.checked_sub(a.1)? as f64;
    let r = tokens / (words * kind.tokens_per_word());
    (r.is_finite() && r > 0.0).then_some(r)
}

/// One count from `/tokenize`, trying llama.cpp's body and then vLLM's.
async fn tokenize_count(
    http: &reqwest::Client,
    url: &str,
    model: &str,
    key: Option<&str>,
    text: &str,
) -> Result<u64, String> {
    let bodies = [
        serde_json::json!({ "content": text }),
        serde_json::json!({ "model": model, "prompt": text }),
    ];
    let mut last = String::new();
    for body in bodies {
        let mut req = http.post(url).json(&body).timeout(Duration::from_secs(30));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Err(format!("{e}")),
        };
        let status = resp.status();
        if !status.is_success() {
            last = format!("HTTP {status}");
            continue;
        }
        let v: serde_json::Value = match resp.json().await {
            Ok(v) => v,
            Err(e) => {
                last = format!("not JSON: {e}");
                continue;
            }
        };
        let count = v.get("count").and_then(serde_json::Value::as_u64).or_else(|| {
            v.get("tokens")
                .and_then(serde_json::Value::as_array)
                .map(|t| t.len() as u64)
        });
        match count {
            Some(c) => return Ok(c),
            None => last = "no `tokens` or `count` in the answer".into(),
        }
    }
    Err(last)
}

/// Ratios of both kinds through `count`, or the first error.
async fn measure_with<F, Fut>(nonce: u64, mut count: F) -> Result<(f64, f64), String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<u64, String>>,
{
    let mut out = [0.0; 2];
    for (i, kind) in [FillerKind::Prose, FillerKind::Code].into_iter().enumerate() {
        // Pooled: Σ large − Σ small over Σ of their word differences.
        let (mut small, mut large) = ((0, 0), (0, 0));
        for (j, (w, t)) in samples(kind, nonce).into_iter().enumerate() {
            let c = count(t).await?;
            let acc = if j % 2 == 0 { &mut small } else { &mut large };
            *acc = (acc.0 + w, acc.1 + c);
        }
        out[i] = ratio(kind, small, large)
            .ok_or_else(|| format!("{kind} counts {} and {} give no ratio", small.1, large.1))?;
    }
    Ok((out[0], out[1]))
}

/// Measures the target's tokenizer as `mode` says. `Err` only with [`MatchTokenizer::On`] when nothing answered;
/// `auto`'s failures come back as an `unmeasured` report and a note.
#[allow(clippy::too_many_arguments)]
pub async fn measure(
    mode: MatchTokenizer,
    http: &reqwest::Client,
    origin: &str,
    model: &str,
    key: Option<&str>,
    client: &Client,
    probe_url: &str,
    nonce: u64,
) -> anyhow::Result<(TokenizerReport, Option<String>)> {
    if mode == MatchTokenizer::Off {
        return Ok((TokenizerReport::off(), None));
    }
    let tokenize_url = format!("{origin}/tokenize");
    let tok_err = match measure_with(nonce, |t| {
        let u = tokenize_url.clone();
        async move { tokenize_count(http, &u, model, key, &t).await }
    })
    .await
    {
        Ok((prose, code)) => {
            return Ok((
                TokenizerReport {
                    source: "tokenize",
                    prose_ratio: prose,
                    code_ratio: code,
                    endpoint: Some(tokenize_url),
                },
                None,
            ));
        }
        Err(e) => e,
    };
    let (live, cut) = (LiveCounters::default(), CancellationToken::new());
    let probe = measure_with(nonce, |t| {
        let (live, cut) = (&live, &cut);
        async move {
            let o = client.complete(&t, 1, false, live, cut).await;
            if !o.ok {
                return Err(o.error.unwrap_or_else(|| "the probe failed".into()));
            }
            o.usage
                .prompt_tokens
                .ok_or_else(|| "the answer carried no usage.prompt_tokens".to_string())
        }
    })
    .await;
    match probe {
        Ok((prose, code)) => Ok((
            TokenizerReport {
                source: "usage",
                prose_ratio: prose,
                code_ratio: code,
                endpoint: Some(probe_url.to_string()),
            },
            Some(format!(
                "note: {tokenize_url} did not count tokens ({tok_err}); measured with usage probes"
            )),
        )),
        Err(probe_err) => {
            let why = format!(
                "could not measure the target's tokenizer: {tokenize_url}: {tok_err}; probes to {probe_url}: {probe_err}"
            );
            anyhow::ensure!(
                mode != MatchTokenizer::On,
                "{why} (--match-tokenizer on; use auto or off to run unscaled)"
            );
            Ok((
                TokenizerReport {
                    source: "unmeasured",
                    prose_ratio: 1.0,
                    code_ratio: 1.0,
                    endpoint: None,
                },
                Some(format!("note: {why}; filler sent unscaled")),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed overhead per prompt cancels; the ratio is the marginal count.
    #[test]
    fn ratio_is_marginal() {
        let k = FillerKind::Prose;
        let (a, b) = (k.words_for_tokens(SMALL_TOKENS), k.words_for_tokens(LARGE_TOKENS));
        let count = |w: usize| 7 + (w as f64 * 1.125 * 1.5).round() as u64;
        let r = ratio(k, (a, count(a)), (b, count(b))).unwrap_or(0.0);
        assert!((r - 1.5).abs() < 0.001, "{r}");
        assert_eq!(ratio(k, (a, 10), (a, 10)), None);
        assert_eq!(ratio(k, (a, 10), (b, 5)), None);
    }
}
