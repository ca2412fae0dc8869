//! `loadshape ladder`: session ladders — exact statistics, the solver, and fitting from a production log.
//!
//! - `loadshape ladder stats LADDER --growth G --reply R [--task T] [--weighting respawn|single] [--json]`
//!   prints the weighted nearest-rank median and p90 of the prompt lengths, their margins, and the cached share by
//!   tokens and by requests (definitions: `shared::ladder::stats`). `LADDER` is `base:steps,...` or `prod` (the
//!   seed's `LADDER_PROD`).
//! - `loadshape ladder solve --median M --p90 P --cached C --growth G --reply R --slots N [--base-step B]
//!   [--min-base X] [--min-steps a] [--max-steps b] [--max-prompt X] [--weighting ...] [--prefer-margins] [--json]`
//!   finds a ladder for the targets and prints it with the same statistics and plain reachability notes.
//! - `loadshape ladder fit FILE [--skip-bad] [--json]` reads a JSONL or CSV request log, derives the targets
//!   (median, p90, cached share, mean concurrency, growth and reply when the log shows them) and solves.
//!
//! `--json` keys: `median`, `p90`, `cached_share_tokens`, `cached_share_requests`, `requests`, `median_margins`,
//! `p90_margins` (each `{value, share_below, share_at_or_below, prev_value, next_value}`), plus `ladder` for solve
//! (and `notes`, `median_error`, `p90_error`, `cached_reached`, `targets`), and `targets` + `solution` for fit.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};
use shared::ladder::fit::{FitTargets, fit_targets, parse_log_bytes};
use shared::ladder::{
    CachedDefinition, LADDER_PROD, Ladder, LadderStats, Priority, Shape, Solution, SolveOptions, Weighting, solve,
    stats,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: LadderCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum LadderCommand {
    /// Exact statistics of a ladder's prompt-length distribution.
    Stats(StatsArgs),
    /// Find a ladder for a target median, p90 and cached share.
    Solve(SolveArgs),
    /// Derive targets from a production request log (JSONL or CSV) and solve for them.
    Fit(FitArgs),
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The ladder, `base:steps,base:steps,...`, or `prod` for the seed's production ladder.
    pub ladder: String,
    /// Tokens a step adds to the next prompt (reply + tool output).
    #[arg(long, value_name = "G")]
    pub growth: u64,
    /// Reply tokens per step (part of the growth; cached with the previous prompt).
    #[arg(long, value_name = "R")]
    pub reply: u64,
    /// Constant task suffix after the base context, tokens.
    #[arg(long, value_name = "T", default_value_t = 0)]
    pub task: u64,
    /// `respawn`: slots restart when they finish (each request of slot i weighs 1/n_i); `single`: one pass.
    #[arg(long, default_value = "respawn")]
    pub weighting: Weighting,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// Constraints and preferences shared by `solve` and `fit`.
#[derive(Debug, Clone, clap::Args)]
pub struct Constraints {
    /// Number of rungs (session slots), 1..=512 (the solver's time grows faster than the slot count).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub slots: usize,
    /// Bases are min-base + j × base-step.
    #[arg(long, value_name = "B", default_value_t = 500)]
    pub base_step: u64,
    /// Smallest base context, tokens.
    #[arg(long, value_name = "X", default_value_t = 3500)]
    pub min_base: u64,
    /// Fewest steps a rung may have.
    #[arg(long, value_name = "A", default_value_t = 2)]
    pub min_steps: u32,
    /// Most steps a rung may have.
    #[arg(long, value_name = "B", default_value_t = 40)]
    pub max_steps: u32,
    /// No prompt may exceed this (the model's context). Default: max(131072, 2 × p90 target).
    #[arg(long, value_name = "TOKENS")]
    pub max_prompt: Option<u64>,
    /// How the ladder will be replayed: `respawn` (slots restart; each request of slot i weighs 1/n_i) or
    /// `single` (one pass).
    #[arg(long, default_value = "respawn")]
    pub weighting: Weighting,
    /// Which cached share the target means: `tokens` (cached prompt tokens) or `requests` (non-first steps).
    #[arg(long, default_value = "tokens")]
    pub cached_definition: CachedDefinition,
    /// Prefer wide margins (percentiles robust to small shifts) over the closest median and p90.
    #[arg(long)]
    pub prefer_margins: bool,
    /// With --prefer-margins: largest relative error of median and p90 to trade for margins.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.01)]
    pub margin_tolerance: f64,
    /// Constant task suffix after the base context, tokens.
    #[arg(long, value_name = "T", default_value_t = 0)]
    pub task: u64,
}

#[derive(Debug, clap::Args)]
pub struct SolveArgs {
    /// Target median prompt length, tokens.
    #[arg(long, value_name = "M")]
    pub median: u64,
    /// Target p90 prompt length, tokens.
    #[arg(long, value_name = "P")]
    pub p90: u64,
    /// Target cached share: a fraction (0.97) or a percentage (97%).
    #[arg(long, value_name = "C", value_parser = parse_share)]
    pub cached: f64,
    /// Tokens a step adds to the next prompt (reply + tool output).
    #[arg(long, value_name = "G")]
    pub growth: u64,
    /// Reply tokens per step.
    #[arg(long, value_name = "R")]
    pub reply: u64,
    #[command(flatten)]
    pub constraints: Constraints,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct FitArgs {
    /// Request log: JSONL (one object per line) or CSV with a header; `prompt_tokens` is required.
    pub file: PathBuf,
    /// Fit without malformed rows (they are still counted and listed) instead of refusing the log.
    #[arg(long)]
    pub skip_bad: bool,
    /// Growth per step, tokens, when the log has no session ids to estimate it (default 2703, the seed's).
    #[arg(long, value_name = "G")]
    pub growth: Option<u64>,
    /// Reply tokens per step when the log has no completion tokens (default 700, the seed's).
    #[arg(long, value_name = "R")]
    pub reply: Option<u64>,
    /// Cached-share target when the log has no cached tokens (default 1.0: as much as reachable).
    #[arg(long, value_name = "C", value_parser = parse_share)]
    pub cached: Option<f64>,
    #[command(flatten)]
    pub constraints: Constraints,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(p) => (p.trim(), 100.0),
        None => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("expected a fraction like 0.97 or a percentage like 97% (got `{t}`)"))?;
    let v = v / scale;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("cached share must be within 0..=1 or 0%..=100% (got `{t}`)"))
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        LadderCommand::Stats(a) => run_stats(a),
        LadderCommand::Solve(a) => run_solve(a),
        LadderCommand::Fit(a) => run_fit(a),
    }
}

fn parse_ladder(text: &str) -> anyhow::Result<Ladder> {
    let text = if text.trim() == "prod" { LADDER_PROD } else { text };
    text.parse().with_context(|| format!("invalid ladder `{text}`"))
}

fn run_stats(a: StatsArgs) -> anyhow::Result<ExitCode> {
    let ladder = parse_ladder(&a.ladder)?;
    let shape = Shape::new(a.growth, a.reply, a.task);
    let s = stats(&ladder, &shape, a.weighting).context("cannot compute ladder statistics")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&stats_json(&ladder, &shape, &s)?)?);
    } else {
        print!("{}", stats_text(&ladder, &shape, &s));
    }
    Ok(ExitCode::SUCCESS)
}

fn options(c: &Constraints, median: u64, p90: u64, cached: f64, shape: Shape) -> SolveOptions {
    SolveOptions {
        median_tokens: median,
        p90_tokens: p90,
        cached_share: cached,
        cached_definition: c.cached_definition,
        shape,
        weighting: c.weighting,
        slots: c.slots,
        base_step_tokens: c.base_step,
        min_base_tokens: c.min_base,
        min_steps: c.min_steps,
        max_steps: c.max_steps,
        max_prompt_tokens: c.max_prompt,
        priority: if c.prefer_margins {
            Priority::Margins
        } else {
            Priority::Exact
        },
        margin_tolerance: c.margin_tolerance,
    }
}

fn run_solve(a: SolveArgs) -> anyhow::Result<ExitCode> {
    let shape = Shape::new(a.growth, a.reply, a.constraints.task);
    let o = options(&a.constraints, a.median, a.p90, a.cached, shape);
    let sol = solve(&o).context("cannot solve for a ladder")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&solution_json(&o, &sol)?)?);
    } else {
        print!("{}", solution_text(&o, &sol));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_fit(a: FitArgs) -> anyhow::Result<ExitCode> {
    // Bytes, not a String: a line that is not UTF-8 is then reported with its number instead of failing the read.
    let bytes = std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let parsed = parse_log_bytes(&bytes);
    let targets =
        fit_targets(&parsed, a.skip_bad).with_context(|| format!("cannot fit targets from {}", a.file.display()))?;
    let mut notes: Vec<String> = Vec::new();
    if !parsed.bad.is_empty() {
        let lines: Vec<String> = parsed
            .bad
            .iter()
            .take(20)
            .map(|b| format!("line {}: {}", b.line, b.reason))
            .collect();
        notes.push(format!(
            "skipped {} malformed row(s): {}",
            parsed.bad.len(),
            lines.join("; ")
        ));
    }
    if !parsed.failed.is_empty() {
        notes.push(format!(
            "excluded {} failed request(s) (ok: false)",
            parsed.failed.len()
        ));
    }
    // The log's estimates win over the defaults; explicit flags win over both.
    let growth = a.growth.or(targets.growth_tokens).unwrap_or(Shape::PROD.growth_tokens);
    let reply = a
        .reply
        .or(targets.reply_tokens)
        .unwrap_or(Shape::PROD.reply_tokens)
        .min(growth);
    if a.growth.is_none() && targets.growth_tokens.is_none() {
        notes.push(format!(
            "no session ids in the log: growth per step assumed {growth} (set --growth)"
        ));
    }
    if a.reply.is_none() && targets.reply_tokens.is_none() {
        notes.push(format!(
            "no completion tokens in the log: reply assumed {reply} (set --reply)"
        ));
    }
    let logged_cached = match a.constraints.cached_definition {
        CachedDefinition::Tokens => targets.cached_share_tokens,
        CachedDefinition::Requests => targets.cached_share_requests,
    };
    let cached = a.cached.or(logged_cached).unwrap_or(1.0);
    if a.cached.is_none() && logged_cached.is_none() {
        notes.push("no cached tokens in the log: solving for the highest reachable cached share".into());
    }
    let shape = Shape::new(growth, reply, a.constraints.task);
    let o = options(&a.constraints, targets.median_tokens, targets.p90_tokens, cached, shape);
    let sol = solve(&o).context("cannot solve for the fitted targets")?;
    if a.json {
        let out = json!({
            "file": a.file.display().to_string(),
            "targets": targets,
            "notes": notes,
            "ladder": sol.ladder.to_string(),
            "solution": solution_json(&o, &sol)?,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", fit_text(&targets, &notes));
        print!("{}", solution_text(&o, &sol));
    }
    Ok(ExitCode::SUCCESS)
}

fn stats_json(ladder: &Ladder, shape: &Shape, s: &LadderStats) -> anyhow::Result<Value> {
    let mut v = serde_json::to_value(s)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("ladder".into(), json!(ladder.to_string()));
        obj.insert("growth_tokens".into(), json!(shape.growth_tokens));
        obj.insert("reply_tokens".into(), json!(shape.reply_tokens));
        obj.insert("task_tokens".into(), json!(shape.task_tokens));
    }
    Ok(v)
}

fn solution_json(o: &SolveOptions, sol: &Solution) -> anyhow::Result<Value> {
    let mut v = stats_json(&sol.ladder, &o.shape, &sol.stats)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert(
            "targets".into(),
            json!({
                "median": o.median_tokens,
                "p90": o.p90_tokens,
                "cached_share": o.cached_share,
                "cached_definition": o.cached_definition,
            }),
        );
        obj.insert(
            "constraints".into(),
            json!({
                "slots": o.slots,
                "base_step_tokens": o.base_step_tokens,
                "min_base_tokens": o.min_base_tokens,
                "min_steps": o.min_steps,
                "max_steps": o.max_steps,
                "max_prompt_tokens": o.max_prompt(),
                "priority": o.priority,
            }),
        );
        obj.insert("median_error".into(), json!(sol.median_error));
        obj.insert("p90_error".into(), json!(sol.p90_error));
        obj.insert("cached_share".into(), json!(sol.cached_share));
        obj.insert("cached_reached".into(), json!(sol.cached_reached));
        obj.insert("min_margin".into(), json!(sol.min_margin));
        obj.insert("notes".into(), json!(sol.notes));
    }
    Ok(v)
}

/// 12345 → "12,345".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.2} %", x * 100.0)
}

fn margin_line(name: &str, q: f64, m: &shared::ladder::Margins) -> String {
    let opt = |v: Option<u64>| v.map_or_else(|| "none".to_string(), thousands);
    format!(
        "{name:<7} {:>9} tokens   share below {:.4}, at or below {:.4} (q = {q}, slack {:.4}); neighbours {} / {}\n",
        thousands(m.value),
        m.share_below,
        m.share_at_or_below,
        m.slack(q),
        opt(m.prev_value),
        opt(m.next_value),
    )
}

fn stats_text(ladder: &Ladder, shape: &Shape, s: &LadderStats) -> String {
    let mut out = format!(
        "ladder  {ladder}\n        {} slots, {} requests per pass; growth {} (reply {}), task {}, weighting {}\n",
        s.slots, s.requests, shape.growth_tokens, shape.reply_tokens, shape.task_tokens, s.weighting
    );
    out += &margin_line("median", 0.5, &s.median_margins);
    out += &margin_line("p90", 0.9, &s.p90_margins);
    out += &format!(
        "cached  {} of prompt tokens, {} of requests\nprompts mean {:.0}, min {}, max {}\n",
        pct(s.cached_share_tokens),
        pct(s.cached_share_requests),
        s.mean_prompt_tokens,
        thousands(s.min_prompt_tokens),
        thousands(s.max_prompt_tokens)
    );
    out
}

fn solution_text(o: &SolveOptions, sol: &Solution) -> String {
    let mut out = format!(
        "targets median {}, p90 {}, cached {} ({}); {} slots, bases {} + k×{}, steps {}..={}, prompts ≤ {}, {}\n",
        thousands(o.median_tokens),
        thousands(o.p90_tokens),
        pct(o.cached_share),
        o.cached_definition,
        o.slots,
        o.min_base_tokens,
        o.base_step_tokens,
        o.min_steps,
        o.max_steps,
        thousands(o.max_prompt()),
        o.priority
    );
    out += &stats_text(&sol.ladder, &o.shape, &sol.stats);
    out += &format!(
        "fit     median {:+.3} %, p90 {:+.3} %, cached {} vs target {}\n",
        sol.median_error * 100.0,
        sol.p90_error * 100.0,
        pct(sol.cached_share),
        pct(o.cached_share)
    );
    for n in &sol.notes {
        out += &format!("note    {n}\n");
    }
    out
}

fn fit_text(t: &FitTargets, notes: &[String]) -> String {
    let opt_pct = |v: Option<f64>| v.map_or_else(|| "unknown".to_string(), pct);
    let mut out = format!(
        "log     {} requests used ({} malformed skipped, {} failed excluded)\n\
         derived median {}, p90 {}, mean prompt {:.0}; cached {} of tokens, {} of requests ({} rows report it)\n",
        t.requests,
        t.skipped_rows,
        t.failed_rows,
        thousands(t.median_tokens),
        thousands(t.p90_tokens),
        t.mean_prompt_tokens,
        opt_pct(t.cached_share_tokens),
        opt_pct(t.cached_share_requests),
        t.rows_with_cached,
    );
    if let Some(c) = t.mean_concurrency {
        out += &format!(
            "        mean concurrency {c:.2} over {:.0} s\n",
            t.window_s.unwrap_or(0.0)
        );
    }
    if let Some(g) = t.growth_tokens {
        out += &format!(
            "        growth per step {g} (median of {} consecutive pairs in {} sessions)\n",
            t.growth_pairs,
            t.sessions.unwrap_or(0)
        );
    }
    if let Some(r) = t.reply_tokens {
        out += &format!("        reply {r} (median completion tokens)\n");
    }
    for n in notes {
        out += &format!("note    {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse_as_fraction_or_percent() {
        assert_eq!(parse_share("0.97"), Ok(0.97));
        assert_eq!(parse_share("97%"), Ok(0.97));
        assert!(parse_share("97").is_err());
        assert!(parse_share("x").is_err());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(26_015), "26,015");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
