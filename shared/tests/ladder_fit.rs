//! Fitting targets from a request log: the example logs, malformed rows, and the solve that follows.

use shared::ladder::fit::{FitError, LogFormat, fit_targets, parse_log};
use shared::ladder::{SolveOptions, solve};

const JSONL: &str = include_str!("../../examples/prod-log.jsonl");
const CSV: &str = include_str!("../../examples/prod-log.csv");

/// Nearest-rank percentiles of the example's prompt tokens, computed independently of the fit module.
fn expected_percentiles() -> (u64, u64, f64) {
    let mut p: Vec<u64> = Vec::new();
    let (mut prompt, mut cached) = (0u64, 0u64);
    for l in JSONL.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("example line is JSON");
        let pt = v["prompt_tokens"].as_u64().expect("prompt_tokens");
        p.push(pt);
        prompt += pt;
        cached += v["cached_tokens"].as_u64().expect("cached_tokens");
    }
    p.sort_unstable();
    let n = p.len();
    (
        p[n.div_ceil(2) - 1],
        p[(9 * n).div_ceil(10) - 1],
        cached as f64 / prompt as f64,
    )
}

#[test]
fn example_logs_give_the_same_targets_in_both_formats() {
    let j = parse_log(JSONL);
    let c = parse_log(CSV);
    assert_eq!(j.format, LogFormat::Jsonl);
    assert_eq!(c.format, LogFormat::Csv);
    assert!(j.bad.is_empty() && c.bad.is_empty(), "{:?} {:?}", j.bad, c.bad);
    let tj = fit_targets(&j, false).expect("fits");
    let tc = fit_targets(&c, false).expect("fits");
    let (median, p90, share) = expected_percentiles();
    assert_eq!(tj.requests, 192);
    assert_eq!((tj.median_tokens, tj.p90_tokens), (median, p90));
    assert_eq!((tc.median_tokens, tc.p90_tokens), (median, p90));
    assert!((tj.cached_share_tokens.expect("cached") - share).abs() < 1e-12);
    assert_eq!(tj.cached_share_tokens, tc.cached_share_tokens);
    // The log was generated with reply 700 and tool output 2003 ± 300 per step.
    assert_eq!(tj.reply_tokens, Some(700));
    let g = tj.growth_tokens.expect("growth");
    assert!((2_500..=2_900).contains(&g), "growth {g}");
    assert_eq!(tj.growth_tokens, tc.growth_tokens);
    assert_eq!(tj.sessions, Some(10));
    let (cj, cc) = (
        tj.mean_concurrency.expect("concurrency"),
        tc.mean_concurrency.expect("concurrency"),
    );
    assert!(cj > 0.5 && cj < 10.0 && (cj - cc).abs() < 1e-6, "{cj} {cc}");
}

#[test]
fn fitted_targets_solve() {
    let t = fit_targets(&parse_log(JSONL), false).expect("fits");
    let o = t.solve_options(&SolveOptions::prod());
    assert_eq!(o.median_tokens, t.median_tokens);
    assert_eq!(o.shape.growth_tokens, t.growth_tokens.expect("growth"));
    let sol = solve(&o).expect("solves");
    assert!(
        sol.median_error.abs() < 0.01 && sol.p90_error.abs() < 0.01,
        "{} {:?}",
        sol.ladder,
        sol.stats
    );
}

#[test]
fn malformed_rows_are_listed_with_line_numbers() {
    let log = "{\"prompt_tokens\": 1000}\n\
               {\"prompt_tokens\": \"many\"}\n\
               not json\n\
               \n\
               {\"prompt_tokens\": 2000, \"cached_tokens\": 3000}\n\
               {\"cached_tokens\": 5}\n\
               {\"prompt_tokens\": 3000, \"ok\": false}\n\
               {\"prompt_tokens\": 4000, \"timestamp\": \"2026-11-30T10:00:00Z\"}\n";
    let parsed = parse_log(log);
    let lines: Vec<usize> = parsed.bad.iter().map(|b| b.line).collect();
    assert_eq!(lines, vec![2, 3, 5, 6]);
    assert_eq!(parsed.failed, vec![7]);
    let err = fit_targets(&parsed, false).expect_err("bad rows refuse");
    let msg = err.to_string();
    assert!(matches!(err, FitError::BadRows { .. }));
    assert!(msg.contains("4 malformed row(s)"), "{msg}");
    assert!(
        msg.contains("line 2: prompt_tokens must be a whole number ≥ 0 (got `many`)"),
        "{msg}"
    );
    assert!(msg.contains("line 3: invalid JSON"), "{msg}");
    assert!(
        msg.contains("line 5: cached_tokens 3000 exceeds prompt_tokens 2000"),
        "{msg}"
    );
    assert!(msg.contains("line 6: prompt_tokens is missing"), "{msg}");
    // --skip-bad fits without them but still counts them.
    let t = fit_targets(&parsed, true).expect("fits");
    assert_eq!((t.requests, t.skipped_rows, t.failed_rows), (2, 4, 1));
    assert_eq!(t.median_tokens, 1000);
    assert_eq!(t.p90_tokens, 4000);
    assert_eq!(t.cached_share_tokens, None);
}

#[test]
fn csv_errors_and_variants() {
    let csv = "prompt_tokens,cached_tokens,latency_ms,timestamp\n\
               1000,0,500,10\n\
               2000,1500,\"1,5\",11\n\
               3000,2500\n\
               4000,3500,1000,12.5\n";
    let parsed = parse_log(csv);
    assert_eq!(parsed.bad.len(), 2, "{:?}", parsed.bad);
    assert_eq!(parsed.bad[0].line, 3);
    assert!(parsed.bad[0].reason.contains("latency_ms must be a number of seconds"));
    assert_eq!(parsed.bad[1].line, 4);
    assert!(parsed.bad[1].reason.contains("expected 4 fields"));
    let t = fit_targets(&parsed, true).expect("fits");
    // Busy 0.5 s + 1 s over the window 10 → 13.5 s.
    assert!((t.mean_concurrency.expect("concurrency") - 1.5 / 3.5).abs() < 1e-12);
    let no_col = parse_log("tokens,cached\n1,2\n");
    assert!(no_col.bad[0].reason.contains("no `prompt_tokens` column"));
    assert!(matches!(
        fit_targets(&parse_log(""), false),
        Err(FitError::NoRows { .. })
    ));
}

#[test]
fn replay_records_are_a_valid_log() {
    // The agent's own JSONL records (RequestRecord) use t_submit / wall_s / session / gen_tokens.
    let log = "{\"session\":0,\"step\":0,\"t_submit\":0.0,\"wall_s\":2.0,\"prompt_tokens\":1000,\"cached_tokens\":0,\"gen_tokens\":100,\"ok\":true}\n\
               {\"session\":0,\"step\":1,\"t_submit\":3.0,\"wall_s\":2.0,\"prompt_tokens\":1600,\"cached_tokens\":1100,\"gen_tokens\":100,\"ok\":true}\n";
    let t = fit_targets(&parse_log(log), false).expect("fits");
    assert_eq!(t.growth_tokens, Some(600));
    assert_eq!(t.reply_tokens, Some(100));
    assert!((t.mean_concurrency.expect("c") - 4.0 / 5.0).abs() < 1e-12);
    assert!((t.cached_share_tokens.expect("c") - 1100.0 / 2600.0).abs() < 1e-12);
    assert_eq!(t.cached_share_requests, Some(0.5));
}

#[test]
fn a_byte_order_mark_is_skipped_in_both_formats() {
    // With a BOM a CSV lost its first column (`\u{feff}prompt_tokens` named no known column) and JSONL was
    // detected as CSV.
    for (text, format) in [(CSV, LogFormat::Csv), (JSONL, LogFormat::Jsonl)] {
        let plain = parse_log(text);
        let with_bom = parse_log(&format!("\u{feff}{text}"));
        assert_eq!(with_bom.format, format);
        assert_eq!(with_bom, plain);
        assert!(with_bom.bad.is_empty(), "{:?}", with_bom.bad);
        let bytes = [b"\xef\xbb\xbf".as_slice(), text.as_bytes()].concat();
        assert_eq!(shared::ladder::parse_log_bytes(&bytes), plain);
    }
}

#[test]
fn a_line_that_is_not_utf8_is_a_bad_row_with_its_number() {
    let text = b"prompt_tokens,session\n20000,a\n30000,\xff\xfeb\n40000,c\n".to_vec();
    let log = shared::ladder::parse_log_bytes(&text);
    assert_eq!(log.format, LogFormat::Csv);
    assert_eq!(log.rows.len(), 2);
    assert_eq!(log.bad.len(), 1);
    assert_eq!(log.bad[0].line, 3);
    assert!(log.bad[0].reason.contains("UTF-8"), "{}", log.bad[0].reason);
    assert!(log.bad[0].reason.contains("byte 7"), "{}", log.bad[0].reason);
    let err = fit_targets(&log, false).unwrap_err().to_string();
    assert!(err.contains("line 3"), "{err}");
    // The rows after a broken line keep their numbers.
    assert_eq!(log.rows[1].line, 4);

    let jsonl = b"{\"prompt_tokens\": 1}\n{\"prompt_tokens\": 2, \"session\": \"\xc3\"}\n".to_vec();
    let log = shared::ladder::parse_log_bytes(&jsonl);
    assert_eq!(log.format, LogFormat::Jsonl);
    assert_eq!((log.rows.len(), log.bad[0].line), (1, 2));

    let header = b"prompt\xff_tokens\n1\n2\n".to_vec();
    let log = shared::ladder::parse_log_bytes(&header);
    assert!(log.rows.is_empty());
    assert_eq!(log.bad.len(), 1);
    assert_eq!(log.bad[0].line, 1);
    assert!(log.bad[0].reason.starts_with("header:"), "{}", log.bad[0].reason);
}
