//! Live replay as a library: [`run()`] takes resolved [`ReplaySettings`] and [`Hooks`] and returns a
//! [`ReplayOutcome`]. `loadshape replay` (`cmd/replay.rs`) only parses flags into settings and prints the outcome;
//! `loadshape serve` (`serve/driver.rs`) builds settings from a configured target and a scenario and calls the
//! same [`run()`].
//!
//! - [`settings`]: [`ReplaySettings`] (target, request options, planned traffic, deadlines, outputs) and its
//!   defaults, resolved from flags or from a scenario.
//! - [`mod@run`]: one run from settings to outcome: deadline, drain, stop hook, interrupts, sidecar files.
//! - [`summary`]: the typed `<out>.summary.json` ([`summary::RunSummary`]), `<out>.server.json`
//!   ([`summary::ServerScrape`]) and the record [`summary::Checks`].
//! - [`render`]: the text report `replay` and `report` print.
//! - [`client`]: one forced-length streaming request ([`client::Client::complete`] → [`client::RequestOutcome`]) over
//!   `/v1/completions`, `/v1/chat/completions` or the Anthropic Messages API.
//! - [`conversation`]: a session's conversation as agents send it (system, task, replies, tool outputs), written
//!   as one prompt or as the chat or Messages message list.
//! - [`h1`]: the direct HTTP/1.1 path (hyper's connection API, one connection per stream), `http://` and `https://`.
//! - [`fleet`]: several target URLs behind the simulator's routing policies (`--url A --url B --router NAME`).
//! - [`tls`]: what `https://` trusts (the platform's roots plus `--ca-cert`).
//! - [`dialect`]: how vLLM, SGLang, TabbyAPI, llama.cpp and plain OpenAI servers are told the output length.
//! - [`runner`]: sessions (growing conversations, think time, stagger, respawn, drain, fail streak) and
//!   open/closed-loop traffic.
//! - [`records`]: the JSONL record file, one `shared::record::RequestRecord` per line, and its reader.
//! - [`rxstamp`]: kernel receive timestamps (`SO_TIMESTAMPNS`) for the hyper path's frame times.
//! - [`sse`]: the `text/event-stream` decoder (zero-copy; checked against the `sse-stream` crate in its tests).
//! - [`prom`]: `/metrics` scraping and the server-side report.
//! - [`limits`]: what the server says about its limits (llama.cpp `/props`, vLLM `cache_config_info`), kept in
//!   `<out>.server.json` for `calibrate --from`.
//! - [`progress`]: the live progress line.
//! - [`tokenizer`]: measuring the target's tokenizer before a run (`--match-tokenizer`), so filler is sized for it.

pub mod client;
pub mod conversation;
pub mod dialect;
pub mod fleet;
pub mod h1;
pub mod limits;
pub mod progress;
pub mod prom;
pub mod records;
pub mod render;
pub mod run;
pub mod runner;
pub mod rxstamp;
pub mod settings;
pub mod sse;
pub mod summary;
pub mod tls;
pub mod tokenizer;
pub mod trace_run;

pub use run::{Hooks, Interrupt, ReplayOutcome, Verdict, run};
pub use settings::{ReplaySettings, ScenarioOptions, TargetSettings, Traffic};
