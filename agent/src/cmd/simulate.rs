//! `loadshape simulate`: run a scenario file through the simulator, or print the seed's report.
//!
//! - `loadshape simulate --seed-report` prints the seed simulator's whole report (`scenario_sim.py`'s output).
//! - `loadshape simulate FILE` (`-` for stdin) prints a readable summary; `--json` prints machine output: for
//!   `"model": "seed"` exactly the seed's summary fields (`engine`, `workload`, `total_requests`, `duration_s`, …);
//!   for `"model": "engine"` `{"summary": …, "diagnostics": …}` (plus `"timeline"` with `--timeline`, and
//!   `"deployment"`, its derived numbers, for a scenario that gives a deployment: they are printed above the table).
//! - `--records PATH` writes the engine model's per-request records as JSONL (what `loadshape report` reads), in
//!   submission order, each as soon as it and every earlier request have completed.
//!
//! - Fleets (`"fleet"` in an engine scenario, or `--replicas N --router NAME` here): the table gains a row per
//!   replica and the misses routed to another replica; `--compare-routers` runs the fleet under every router and
//!   prints cached share and TTFT per router.
//!
//! Bad input exits non-zero with a message naming the field (`workload.mean_rps must be > 0 (got 0)`). A scenario
//! larger than `--max-requests` (requests or session steps, default 2,000,000) or whose estimated memory passes
//! `--max-memory-gib` (default 4) is refused before it starts, with the estimate (`shared::budget`, the rule the page
//! applies too); raise the flags when the machine has the memory.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use shared::budget::Budget;
use shared::engine::{self, EngineReport, EngineScenario, FleetSpec, Router, SimOptions};
use shared::record::RequestRecord;
use shared::scenario::Scenario;
use shared::seed_model::{self, SeedSummary};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON); `-` reads standard input. With `--like`: the engine scenario whose profile, SLO and
    /// seed the live run's requests are simulated with (its workload is replaced).
    #[arg(required_unless_present_any = ["seed_report", "like"], conflicts_with = "seed_report")]
    pub file: Option<PathBuf>,
    /// Simulate a live run's own requests (a `loadshape replay` record file): its arrivals (`t_submit`), realized
    /// prompt tokens, cache hits and outputs, as an open-loop `trace` workload (docs/simulator.md).
    #[arg(long, value_name = "RUN.jsonl", conflicts_with = "seed_report")]
    pub like: Option<PathBuf>,
    /// With `--like` and no scenario FILE: the engine preset to simulate with (`loadshape sim-server --profile
    /// list` names them), with the default engine scenario's SLO (TTFT 2 s, TPOT 50 ms) and seed.
    #[arg(long, value_name = "NAME", requires = "like", conflicts_with = "file")]
    pub profile: Option<String>,
    /// Print the seed simulator's whole report (equal to the seed's `scenario_sim_output.json`).
    #[arg(long)]
    pub seed_report: bool,
    /// Machine-readable JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Engine model: also print the time series (running, queued, KV use, cache hits) in the JSON output.
    #[arg(long, requires = "json")]
    pub timeline: bool,
    /// Engine model: write the per-request records to this JSONL file (in submission order, as they complete).
    #[arg(long, value_name = "PATH")]
    pub records: Option<PathBuf>,
    /// Engine model: the fleet in this JSON file (as a scenario's `"fleet"`, e.g. `sim-server --fleet`'s file;
    /// with `"disaggregation"` a prefill/decode-disaggregated fleet) replaces the scenario's; `--replicas` and
    /// `--router` still apply to it.
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// Engine model: run this many replicas of the profile behind a router (overrides the scenario's
    /// `fleet.replicas`; with no fleet in the file the router defaults to `round_robin`).
    #[arg(long, value_name = "N")]
    pub replicas: Option<u32>,
    /// Engine model: the fleet's router (`round_robin`, `least_outstanding`, `session_affinity`, `prefix_aware`);
    /// overrides the scenario's `fleet.router`.
    #[arg(long, value_name = "NAME")]
    pub router: Option<String>,
    /// Engine model: run the fleet under every router and print cached share and TTFT per router.
    #[arg(long)]
    pub compare_routers: bool,
    /// Refuse scenarios of more requests (or session steps) than this.
    #[arg(long, value_name = "N", default_value_t = Budget::DEFAULT.max_requests as u64)]
    pub max_requests: u64,
    /// Refuse scenarios whose estimated memory passes this many GiB.
    #[arg(long, value_name = "GIB", default_value_t = Budget::DEFAULT.max_bytes / GIB)]
    pub max_memory_gib: f64,
}

const GIB: f64 = (1u64 << 30) as f64;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.seed_report {
        println!("{}", seed_model::seed_report_json());
        return Ok(ExitCode::SUCCESS);
    }
    let (scenario, source) = match &args.like {
        Some(run) => like_scenario(run, args.file.as_ref(), args.profile.as_deref())?,
        None => {
            let Some(path) = &args.file else {
                anyhow::bail!("give a scenario FILE (or `-` for stdin), --like RUN.jsonl, or --seed-report");
            };
            let (text, source) = read_input(path)?;
            let mut scenario = Scenario::from_json(&text).with_context(|| source.clone())?;
            let file = (path.as_os_str() != "-").then_some(path.as_path());
            crate::tracefile::load_traces(&mut scenario, file).with_context(|| source.clone())?;
            (scenario, source)
        }
    };
    let scenario = apply_fleet_file(scenario, args.fleet.as_deref())?;
    let budget = Budget {
        max_requests: args.max_requests as f64,
        max_bytes: args.max_memory_gib * GIB,
    };
    // The CLI streams records (they are scored and dropped), so it estimates with `keep_records: false`.
    // The table opens with one line on stderr: what is simulated against what (stdout stays the table alone, and
    // `--json` carries all of it already).
    if !args.json {
        eprintln!("{}", header(&scenario, &args));
    }
    scenario.check_size(false, &budget).map_err(|e| {
        anyhow::anyhow!("{e}; raise --max-requests / --max-memory-gib if this machine has the memory")
            .context(format!("cannot simulate {source}"))
    })?;
    match scenario {
        Scenario::Seed(s) => {
            if args.records.is_some() {
                anyhow::bail!("--records needs \"model\": \"engine\"; the seed model keeps no per-request records");
            }
            let summary = seed_model::evaluate(&s).with_context(|| format!("cannot simulate {source}"))?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", seed_table(&summary, s.closed_loop));
            }
        }
        Scenario::Engine(mut s) => {
            apply_fleet_flags(&mut s, &args)?;
            if args.compare_routers {
                return compare_routers(&s, &source, args.json);
            }
            // Records are never kept: each is scored as it completes, and with `--records` written as it is
            // scored (in submission order), so a million-request run never holds them all; the report is the
            // same either way. Each record's own ITL p50/p99/max (they read its decode stretches) are computed
            // only for written records: the summary and diagnostics weigh each request's mean ITL.
            let opts = SimOptions {
                record_itl_quantiles: args.records.is_some(),
                keep_records: false,
            };
            let report = match &args.records {
                None => engine::simulate_with(&s, opts).with_context(|| format!("cannot simulate {source}"))?,
                Some(path) => {
                    let mut out = RecordWriter::create(path)?;
                    let report = engine::simulate_streaming(&s, opts, Some(&mut |r| out.write(r)))
                        .with_context(|| format!("cannot simulate {source}"))?;
                    out.finish()?;
                    report
                }
            };
            // A deployment's derived numbers (memory, KV capacity, step costs and their bound) go with the result.
            let derived = s.deployment.as_ref().and_then(|d| d.resolve().ok()).map(|r| r.derived);
            if args.json {
                let mut out = serde_json::json!({"summary": report.summary, "diagnostics": report.diagnostics});
                if let Some(d) = &derived {
                    out["deployment"] = serde_json::to_value(d)?;
                }
                if let Some(f) = &report.fleet {
                    out["fleet"] = serde_json::to_value(f)?;
                }
                if args.timeline {
                    out["timeline"] = serde_json::to_value(&report.timeline)?;
                }
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                if let Some(d) = &derived {
                    println!("{}", super::catalog::derived_text(d));
                }
                print!("{}", engine_table(&report));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The one-line header `simulate` prints first: profile (with the fleet's replicas and router when there is one),
/// workload and its size, SLOs, e.g. `profile llama-3-8b-1xh100 · workload sessions: 8 sessions × ~12 steps ·
/// SLOs TTFT 2000 ms, TPOT 50 ms`.
pub fn header(scenario: &Scenario, args: &Args) -> String {
    use shared::workload::Workload;
    let (profile, workload, slo) = match scenario {
        Scenario::Seed(s) => {
            let shared::seed_model::SeedWorkload::Bursty(w) = &s.workload;
            let loop_ = if s.closed_loop { ", closed loop" } else { "" };
            (
                format!("{} (seed model)", s.profile.name),
                format!("bursty: {} requests at {} req/s{loop_}", w.num_requests, w.mean_rps),
                s.slo,
            )
        }
        Scenario::Engine(e) => {
            let replicas = args.replicas.or(e.fleet.as_ref().map(|f| f.replicas));
            let router = args
                .router
                .clone()
                .or(e.fleet.as_ref().map(|f| f.router.name().to_string()));
            let profile = match (replicas, router) {
                (Some(n), Some(r)) if n > 1 => match &e.disaggregation {
                    Some(dg) => format!(
                        "{} × {n} ({r}; {} prefill + {} decode)",
                        e.profile.name, dg.prefill_instances, dg.decode_instances
                    ),
                    None => format!("{} × {n} ({r})", e.profile.name),
                },
                (Some(n), None) if n > 1 => format!("{} × {n}", e.profile.name),
                _ => e.profile.name.clone(),
            };
            let size = match &e.workload {
                Workload::Bursty(w) => format!("{} requests at {} req/s", w.num_requests, w.mean_rps),
                Workload::Poisson(w) => format!("{} requests at {} req/s", w.num_requests, w.rate_rps),
                Workload::Gamma(w) => format!("{} requests at {} req/s, cv {}", w.num_requests, w.rate_rps, w.cv),
                Workload::Sessions(w) => match &w.ladder {
                    Some(l) => format!("{} sessions on a ladder", l.rungs.len()),
                    None => format!("{} sessions × ~{} steps", w.sessions, w.steps),
                },
                Workload::ClosedLoop(w) => format!("{} users, {} requests", w.users, w.num_requests),
                Workload::Trace(w) => format!("{} requests", w.requests.len()),
            };
            let like = if args.like.is_some() {
                " (a live run's requests)"
            } else {
                ""
            };
            (profile, format!("{}: {size}{like}", e.workload.kind()), e.slo)
        }
    };
    format!(
        "profile {profile} · workload {workload} · SLOs {}",
        super::report::slo_text(&slo)
    )
}

/// `--fleet FILE` into an engine scenario: its fleet and disaggregation replace the scenario's, checked as a
/// scenario's are (errors name the field: `fleet.disaggregation.decode_instances`).
fn apply_fleet_file(scenario: Scenario, fleet: Option<&Path>) -> anyhow::Result<Scenario> {
    let Some(path) = fleet else { return Ok(scenario) };
    let Scenario::Engine(mut s) = scenario else {
        anyhow::bail!("--fleet needs an engine scenario (\"model\": \"engine\")");
    };
    let (f, dg) = super::sim_server::load_fleet_file(path)?;
    shared::engine::validate_fleet(&s.profile, Some(&f), dg.as_ref())
        .map_err(|e| anyhow::anyhow!("--fleet {}: {e}", path.display()))?;
    s.fleet = Some(f);
    s.disaggregation = dg;
    Ok(Scenario::Engine(s))
}

/// `--replicas` / `--router` into the scenario's fleet, validated as a scenario's `fleet` is.
fn apply_fleet_flags(s: &mut EngineScenario, args: &Args) -> anyhow::Result<()> {
    if args.replicas.is_none() && args.router.is_none() && !args.compare_routers {
        return Ok(());
    }
    let mut f = s.fleet.clone().unwrap_or(FleetSpec {
        replicas: 1,
        router: Router::RoundRobin,
        load_cap: 1.5,
        profiles: Vec::new(),
    });
    if let Some(n) = args.replicas {
        f.replicas = n;
    }
    if let Some(name) = &args.router {
        f.router = Router::ALL.into_iter().find(|r| r.name() == name).with_context(|| {
            let names: Vec<&str> = Router::ALL.iter().map(|r| r.name()).collect();
            format!("--router must be one of {} (got {name:?})", names.join(", "))
        })?;
    }
    f.validate_with(&s.profile)
        .map_err(|e| anyhow::anyhow!("--replicas/--router: {}", e.within("fleet")))?;
    if args.compare_routers && f.replicas < 2 {
        anyhow::bail!("--compare-routers needs a fleet of 2 or more replicas (give --replicas N or \"fleet\")");
    }
    s.fleet = Some(f);
    Ok(())
}

/// `--compare-routers`: the same fleet under every router, one row each.
fn compare_routers(s: &EngineScenario, source: &str, json: bool) -> anyhow::Result<ExitCode> {
    let fleet = s.fleet.clone().context("--compare-routers needs a fleet")?;
    let mut rows = Vec::new();
    for router in Router::ALL {
        let sc = EngineScenario {
            fleet: Some(FleetSpec {
                router,
                ..fleet.clone()
            }),
            counterfactuals: false,
            ..s.clone()
        };
        let r = engine::simulate_with(&sc, SimOptions::SUMMARY).with_context(|| format!("cannot simulate {source}"))?;
        rows.push((router, r));
    }
    if json {
        let out: Vec<_> = rows
            .iter()
            .map(|(router, r)| {
                serde_json::json!({
                    "router": router,
                    "cached_share": r.summary.cached_share_achieved,
                    "ttft_p50_ms": r.summary.ttft_p50_ms,
                    "ttft_p99_ms": r.summary.ttft_p99_ms,
                    "routed_to_another_replica_tokens": r.diagnostics.cache_misses.routed_to_another_replica_tokens,
                    "summary": r.summary,
                    "fleet": r.fleet,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} replicas, load cap {} (prefix_aware)\n{:<19}{:>13}{:>15}{:>15}{:>22}{:>17}",
        fleet.replicas,
        fleet.load_cap,
        "router",
        "cached share",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "routed-away tokens",
        "requests min/max"
    );
    for (router, r) in &rows {
        let f = r.fleet.as_ref();
        let reqs = |pick: fn(u64, u64) -> u64| {
            f.and_then(|f| f.replicas.iter().map(|x| x.requests).reduce(pick))
                .unwrap_or(0)
        };
        println!(
            "{:<19}{:>13}{:>15}{:>15}{:>22}{:>17}",
            router.name(),
            pct(r.summary.cached_share_achieved),
            ms(r.summary.ttft_p50_ms),
            ms(r.summary.ttft_p99_ms),
            r.diagnostics.cache_misses.routed_to_another_replica_tokens,
            format!("{}/{}", reqs(u64::min), reqs(u64::max))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--like RUN`: the run's records as a `trace` workload, simulated with `file`'s engine scenario (profile, SLO,
/// seed) or the preset `profile`. A malformed line refuses the file, naming the line (a record that cannot be read
/// would silently change the arrivals).
fn like_scenario(run: &Path, file: Option<&PathBuf>, profile: Option<&str>) -> anyhow::Result<(Scenario, String)> {
    let (records, bad) = crate::replay::records::read_records(run)?;
    if let Some(b) = bad.first() {
        anyhow::bail!(
            "{} line {}: {}{} ({} malformed line(s) in all)",
            run.display(),
            b.line,
            b.error,
            if b.torn { " (a torn last line)" } else { "" },
            bad.len()
        );
    }
    let trace = shared::workload::TraceWorkload::from_records(&records)
        .with_context(|| format!("{}: no records to simulate", run.display()))?;
    let mut base = match (file, profile) {
        (Some(path), _) => {
            let (text, source) = read_input(path)?;
            match Scenario::from_json(&text).with_context(|| source.clone())? {
                Scenario::Engine(e) => e,
                _ => anyhow::bail!("{source}: --like needs an engine scenario (\"model\": \"engine\")"),
            }
        }
        (None, Some(name)) => {
            let profile = shared::engine::presets::by_name(name).with_context(|| {
                format!("--profile {name:?} is not a preset (`loadshape sim-server --profile list` names them)")
            })?;
            let mut e = shared::presets::default_engine_scenario();
            e.profile = profile;
            e
        }
        (None, None) => anyhow::bail!("--like needs a scenario FILE or --profile NAME for the engine to simulate"),
    };
    base.workload = shared::workload::Workload::Trace(Box::new(trace));
    // The counterfactuals ask what the arrivals would do one at a time; a replayed trace is about its own run.
    base.counterfactuals = false;
    let source = format!("{} (like)", run.display());
    Ok((Scenario::Engine(base), source))
}

/// The scenario text and a name for messages.
fn read_input(path: &PathBuf) -> anyhow::Result<(String, String)> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the scenario from standard input")?;
        Ok((text, "standard input".to_string()))
    } else {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading scenario file {}", path.display()))?;
        Ok((text, path.display().to_string()))
    }
}

/// A readable two-column table of a seed-model summary.
fn seed_table(s: &SeedSummary, closed_loop: bool) -> String {
    let rows: [(&str, String); 11] = [
        (
            "model",
            format!("seed ({} loop)", if closed_loop { "closed" } else { "open" }),
        ),
        ("engine", s.engine.clone()),
        ("workload", s.workload.clone()),
        ("requests", s.total_requests.to_string()),
        ("duration", format!("{} s", s.duration_s)),
        ("TTFT p50 / p99", format!("{} / {} ms", s.ttft_p50_ms, s.ttft_p99_ms)),
        ("TPOT p50 / p99", format!("{} / {} ms", s.tpot_p50_ms, s.tpot_p99_ms)),
        ("output tokens/s", s.raw_output_tokens_per_s.to_string()),
        ("requests/s", s.request_throughput_rps.to_string()),
        ("SLO goodput", format!("{} req/s", s.slo_goodput_rps)),
        ("SLO attainment", format!("{:.2} %", s.slo_attainment_ratio * 100.0)),
    ];
    let mut out = String::new();
    for (k, v) in &rows {
        out.push_str(&format!("{k:<18}{v}\n"));
    }
    out
}

/// Writes records as JSON lines while the simulation runs. The simulation cannot stop for an error, so the first
/// one is kept (later records are skipped) and reported by [`RecordWriter::finish`].
struct RecordWriter {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    error: Option<anyhow::Error>,
}

impl RecordWriter {
    fn create(path: &Path) -> anyhow::Result<RecordWriter> {
        let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(RecordWriter {
            path: path.to_path_buf(),
            out: std::io::BufWriter::new(file),
            error: None,
        })
    }

    fn write(&mut self, r: &RequestRecord) {
        use std::io::Write;
        if self.error.is_some() {
            return;
        }
        let line = serde_json::to_writer(&mut self.out, r)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(self.out.write_all(b"\n")?));
        if let Err(e) = line {
            self.error = Some(e);
        }
    }

    fn finish(mut self) -> anyhow::Result<()> {
        use std::io::Write;
        let flushed = match self.error.take() {
            Some(e) => Err(e),
            None => self.out.flush().map_err(anyhow::Error::from),
        };
        flushed.with_context(|| format!("writing records to {}", self.path.display()))
    }
}

fn ms(v: f64) -> String {
    format!("{v:.1}")
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), ms)
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:.1} %", v * 100.0))
}

/// A readable summary of an engine-model run: latencies, throughput, goodput, cache and diagnostics.
fn engine_table(r: &EngineReport) -> String {
    let s = &r.summary;
    let d = &r.diagnostics;
    let mut out = String::new();
    let mut row = |k: &str, v: String| out.push_str(&format!("{k:<22}{v}\n"));
    row("model", "engine".to_string());
    row("requests", format!("{} completed, {} failed", s.completed, s.failed));
    row("duration", format!("{:.3} s", s.duration_s));
    row("", "mean / p50 / p90 / p99 ms".to_string());
    row(
        "TTFT",
        [s.ttft_mean_ms, s.ttft_p50_ms, s.ttft_p90_ms, s.ttft_p99_ms]
            .map(ms)
            .join(" / "),
    );
    if s.ttft_content_p50_ms.is_some() {
        row(
            "TTFT-content",
            [
                s.ttft_content_mean_ms,
                s.ttft_content_p50_ms,
                s.ttft_content_p90_ms,
                s.ttft_content_p99_ms,
            ]
            .map(opt_ms)
            .join(" / "),
        );
    }
    row(
        "TPOT",
        [s.tpot_mean_ms, s.tpot_p50_ms, s.tpot_p90_ms, s.tpot_p99_ms]
            .map(ms)
            .join(" / "),
    );
    if let Some(r) = s.reasoning_share {
        row("reasoning share", format!("{:.2} % of output tokens", r * 100.0));
    }
    row(
        "ITL",
        [s.itl_mean_ms, s.itl_p50_ms, s.itl_p90_ms, s.itl_p99_ms]
            .map(opt_ms)
            .join(" / "),
    );
    if let Some(a) = s.spec_acceptance {
        let per_step = s
            .spec_accepted_per_step
            .map_or_else(String::new, |v| format!(", {v:.3} accepted tokens per step"));
        row("speculative", format!("accepted share {a:.3}{per_step}"));
    }
    row(
        "E2E",
        [s.e2el_mean_ms, s.e2el_p50_ms, s.e2el_p90_ms, s.e2el_p99_ms]
            .map(ms)
            .join(" / "),
    );
    row(
        "queue",
        [s.queue_mean_ms, s.queue_p50_ms, s.queue_p90_ms, s.queue_p99_ms]
            .map(opt_ms)
            .join(" / "),
    );
    row("requests/s", format!("{:.3}", s.request_throughput_rps));
    row("output tokens/s", format!("{:.1}", s.output_throughput_tok_s));
    row("total tokens/s", format!("{:.1}", s.total_token_throughput_tok_s));
    row(
        "goodput",
        format!(
            "{:.3} req/s ({:.1} % of requests)",
            s.goodput_rps,
            s.slo_attainment_ratio * 100.0
        ),
    );
    row(
        "session goodput",
        format!(
            "{:.4} sessions/s ({:.1} % of {} sessions)",
            s.session_goodput_sps,
            s.session_attainment_ratio * 100.0,
            s.sessions
        ),
    );
    row(
        "cached share",
        format!(
            "achieved {}, designed {}, step 0 {}",
            pct(s.cached_share_achieved),
            pct(s.cached_share_designed),
            pct(s.step0_cached_share)
        ),
    );
    if !s.retention.is_empty() {
        row("by think time", shared::metrics::retention_text(&s.retention));
    }
    let m = &d.cache_misses;
    let mut routed = if r.fleet.is_some() {
        format!(", routed to another replica {}", m.routed_to_another_replica_tokens)
    } else {
        String::new()
    };
    for (i, t) in m.evicted_from_tier_tokens.iter().enumerate() {
        routed.push_str(&format!(", evicted from tier {i} {t}"));
    }
    if m.compacted_tokens > 0 {
        routed.push_str(&format!(", compacted {}", m.compacted_tokens));
    }
    if m.reasoning_not_echoed_tokens > 0 {
        routed.push_str(&format!(", reasoning not echoed {}", m.reasoning_not_echoed_tokens));
    }
    row(
        "cache misses (tokens)",
        format!(
            "{} missed: cold first step {}, new content {}, evicted while idle {}, capacity {}, other {}{routed}",
            m.missed_tokens,
            m.cold_first_step_tokens,
            m.new_content_tokens,
            m.evicted_think_tokens,
            m.capacity_tokens,
            m.other_tokens
        ),
    );
    let o = &d.overbatched;
    row(
        "overbatched",
        format!(
            "{}: TPOT SLO {} ms holds up to batch {}, max_num_seqs {} gives {:.1} ms",
            if o.overbatched { "yes" } else { "no" },
            o.tpot_slo_ms,
            o.slo_batch_limit.map_or_else(|| "any".to_string(), |b| b.to_string()),
            o.max_num_seqs,
            o.tpot_at_max_num_seqs_ms
        ),
    );
    let k = &d.kv_thrash;
    row(
        "KV",
        format!(
            "{} preemptions, {} recomputed tokens, {} evicted blocks, peak {} of {} blocks",
            k.preemptions, k.recomputed_tokens, k.evicted_blocks, k.peak_kv_blocks_used, k.kv_capacity_blocks
        ),
    );
    if let Some(c) = &d.closed_loop_illusion {
        row(
            "closed-loop illusion",
            format!(
                "TTFT p99 open {:.1} ms vs closed {:.1} ms ({:.1}x)",
                c.open_ttft_p99_ms, c.closed_ttft_p99_ms, c.ttft_p99_ratio
            ),
        );
    }
    if let Some(c) = &d.cache_off {
        row(
            "cache off",
            format!(
                "TTFT p50 {:.1} ms (on: {:.1}), output {:.1} tok/s (on: {:.1})",
                c.ttft_p50_ms, c.cache_on_ttft_p50_ms, c.output_throughput_tok_s, c.cache_on_output_throughput_tok_s
            ),
        );
    }
    if let Some(f) = &r.fleet {
        row(
            "fleet",
            format!(
                "{} replicas, router {} (load cap {})",
                f.replicas.len(),
                f.router.name(),
                f.load_cap
            ),
        );
        for x in &f.replicas {
            row(
                &match &x.profile {
                    Some(p) => format!("  replica {} ({p})", x.replica),
                    None => format!("  replica {}", x.replica),
                },
                format!(
                    "{} requests, cached share {}, mean running {:.1}, busy {:.1} %, max running {}, {} preemptions",
                    x.requests,
                    pct(Some(x.cached_share)),
                    x.mean_running,
                    x.busy_share * 100.0,
                    x.max_running,
                    x.preemptions
                ),
            );
        }
    }
    out
}
