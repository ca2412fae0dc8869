//! Checks of a fitted profile against the true one, shared by the calibration tests: the decode step and the cold
//! prefill the fitted terms add up to, at the shapes a run measured (a term the data cannot tell apart from another
//! is compared through the sum they make, which is what a prediction uses).

use shared::engine::EngineProfile;

/// The fitted decode step (the step terms `coef` gives, the rest `truth`'s) is `truth`'s within `tol` at every
/// batch size and context given.
pub fn assert_decode_steps_within(
    truth: &EngineProfile,
    coef: &dyn Fn(&str) -> f64,
    tol: f64,
    batches: &[f64],
    contexts: &[f64],
    what: &str,
) {
    let fitted = EngineProfile {
        step_fixed_ms: coef("step_fixed_ms"),
        per_seq_ms: coef("per_seq_ms"),
        per_ctx_token_ms: coef("per_ctx_token_ms"),
        batch_kv_ms_per_ktok: coef("batch_kv_ms_per_ktok"),
        ..truth.clone()
    };
    for &batch in batches {
        for &context in contexts {
            let (got, want) = (
                fitted.decode_step_ms(batch, context),
                truth.decode_step_ms(batch, context),
            );
            assert!(
                (got / want - 1.0).abs() <= tol,
                "decode step at batch {batch}, context {context}: fitted {got:.3} ms vs true {want:.3} ms ({what})"
            );
        }
    }
}

/// A cold prefill's time beyond its fixed part: `n / rate` plus the context term over its own tokens.
pub fn cold_prefill_ms(rate: f64, ctx_ms_per_ktok: f64, n: f64) -> f64 {
    n / rate + ctx_ms_per_ktok * n * (n - 1.0) / 2000.0
}

/// The fitted cold prefill (`rate`, `ctx_ms_per_ktok`) is `truth`'s within `tol` at each length given.
pub fn assert_prefills_within(
    truth: &EngineProfile,
    rate: f64,
    ctx_ms_per_ktok: f64,
    tol: f64,
    lengths: &[f64],
    what: &str,
) {
    for &n in lengths {
        let (got, want) = (
            cold_prefill_ms(rate, ctx_ms_per_ktok, n),
            cold_prefill_ms(truth.prefill_tokens_per_ms, truth.prefill_ctx_ms_per_ktok, n),
        );
        assert!(
            (got / want - 1.0).abs() <= tol,
            "cold prefill of {n} tokens: fitted {got:.3} ms vs true {want:.3} ms ({what})"
        );
    }
}
