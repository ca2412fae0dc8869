//! Live replay: the streaming client, dialects, the session/open-loop runner, records, Prometheus scraping and
//! the progress display behind `loadshape replay`.
//!
//! - [`client`]: one forced-length streaming request ([`client::Client::complete`] → [`client::Outcome`]).
//! - [`h1`]: the direct HTTP/1.1 path (hyper's connection API, one connection per stream), `http://` and `https://`.
//! - [`tls`]: what `https://` trusts (the platform's roots plus `--ca-cert`).
//! - [`dialect`]: how vLLM, SGLang, TabbyAPI, llama.cpp and plain OpenAI servers are told the output length.
//! - [`runner`]: sessions (growing conversations, think time, stagger, respawn, drain, fail streak) and
//!   open/closed-loop traffic from a `shared::scenario::Scenario`.
//! - [`records`]: the JSONL record file, one `shared::record::RequestRecord` per line.
//! - [`rxstamp`]: kernel receive timestamps (`SO_TIMESTAMPNS`) for the hyper path's frame times.
//! - [`sse`]: the `text/event-stream` decoder (zero-copy; checked against the `sse-stream` crate in its tests).
//! - [`prom`]: `/metrics` scraping and the server-side report.
//! - [`progress`]: the live progress line.

pub mod client;
pub mod dialect;
pub mod h1;
pub mod progress;
pub mod prom;
pub mod records;
pub mod runner;
pub mod rxstamp;
pub mod sse;
pub mod tls;
