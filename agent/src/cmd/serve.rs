//! `loadshape serve`: the page, the websocket API at `/ws`, the run store, and the built-in emulated engine as
//! the live target `sim`. See `crate::serve` for the security model.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use shared::protocol::Limits;

use super::signals::Signals;
use crate::serve::driver::ReplayDriver;
use crate::serve::page::Page;
use crate::serve::runs::TargetFleet;
use crate::serve::store::RunStore;
use crate::serve::{AppState, Runs, Target, allowed_host, allowed_hosts, app, check_token, random_token};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port to listen on (0 picks a free one; the printed URL says which).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to bind. Anything but loopback exposes the agent to the network; a token is then mandatory.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub listen: IpAddr,
    /// Access token required on `/ws` and the API: letters, digits, `-._~`, at least 128 bits by the agent's
    /// estimate (e.g. `openssl rand -hex 32`). Random (256 bits from the OS) when not given.
    #[arg(long, env = "LOADSHAPE_TOKEN")]
    pub token: Option<String>,
    /// A host name or address the page may be reached by besides the agent's own addresses (its `Host` and
    /// `Origin` are otherwise refused: DNS rebinding guard), at the agent's port, or at PORT when given (an
    /// `ssh -L 9000:127.0.0.1:8080` tunnel: `localhost:9000`). Repeatable.
    #[arg(long = "allowed-host", value_name = "HOST[:PORT]")]
    pub allowed_hosts: Vec<String>,
    /// Serve the page from this folder (Trunk's build: `index.html` and its assets) instead of the copy embedded in
    /// the binary. For developing the page; a binary built without the page (a debug build) needs it.
    #[arg(long, env = "LOADSHAPE_DIST", value_name = "DIR")]
    pub dist: Option<PathBuf>,
    /// Where runs are stored (one folder per run under `runs/`).
    #[arg(long, env = "LOADSHAPE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A live target: `NAME=URL[,model=M][,dialect=D][,api_key_env=VAR][,ca_cert=FILE]`, URL ending in `/v1`.
    /// A fleet (several replicas without a router): more URLs with `url=URL2,url=URL3`, and optionally
    /// `router=NAME` and `load_cap=X` (docs/serve.md, "Fleet targets"). Repeatable.
    /// The built-in emulated engine is always offered as `sim`.
    #[arg(long = "target", value_name = "NAME=URL[,...]")]
    pub targets: Vec<String>,
    /// A TOML file of targets: `[[target]]` tables with `name`, `url` (or `urls`, a fleet), and optional `model`,
    /// `dialect`, `api_key_env`, `ca_cert`, `router`, `load_cap` (see docs/serve.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Most runs active at once.
    #[arg(long, default_value_t = 2)]
    pub max_concurrent_runs: u32,
    /// Most concurrent sessions (or users) a run may ask for.
    #[arg(long, default_value_t = 256)]
    pub max_sessions_per_run: u32,
    /// Most requests a run may have in flight at once, by the workload's plan (open loop: if each request met
    /// the scenario's SLO; sessions and closed loop: one per session or user).
    #[arg(long, default_value_t = 1024)]
    pub max_concurrent_requests_per_run: u32,
    /// Highest arrival rate an open-loop workload may ask for, requests per second.
    #[arg(long, default_value_t = 100.0)]
    pub max_rate_per_run: f64,
    /// Longest a run may last, seconds.
    #[arg(long, default_value_t = 3600.0)]
    pub max_run_seconds: f64,
    /// Seconds one websocket write may wait for a page that does not read; then the connection is dropped.
    #[arg(long, default_value_t = crate::serve::WS_WRITE_TIMEOUT.as_secs_f64())]
    pub ws_write_timeout: f64,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.listen.is_loopback() && args.token.is_none() {
        anyhow::bail!(
            "--listen {} is not loopback: give --token (or LOADSHAPE_TOKEN) explicitly",
            args.listen
        );
    }
    let token = match &args.token {
        Some(t) => {
            check_token(t).map_err(|e| anyhow::anyhow!("--token (or LOADSHAPE_TOKEN): {e}"))?;
            t.clone()
        }
        None => random_token().context("refusing to start without a random access token")?,
    };
    let extra_hosts = args
        .allowed_hosts
        .iter()
        .map(|h| allowed_host(h).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (name, v) in [
        ("--max-rate-per-run", args.max_rate_per_run),
        ("--max-run-seconds", args.max_run_seconds),
        ("--ws-write-timeout", args.ws_write_timeout),
    ] {
        if !(v.is_finite() && v > 0.0) {
            anyhow::bail!("{name} must be a number > 0 (got {v})");
        }
    }
    let page = page_source(args.dist.clone());
    match &page {
        Some(Page::Dir(dir)) if !dir.join("index.html").exists() => eprintln!(
            "warning: no page at {} (run `trunk build --release`); serving the API only",
            dir.display()
        ),
        None => eprintln!(
            "warning: this binary was built without the page; serving the API only (build the page with \
             `trunk build --release` and pass --dist dist, or use a release build, which embeds it)"
        ),
        _ => {}
    }
    let page = page.unwrap_or_else(|| Page::Dir(PathBuf::new()));
    // The built-in emulated engine, in-process on its own loopback port, is always target `sim`.
    let sim_listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("binding the sim target")?;
    let sim_url = format!("http://{}/v1", sim_listener.local_addr()?);
    tokio::spawn(async move {
        let config = crate::sim_server::Config::default();
        if let Err(e) = crate::sim_server::serve(sim_listener, config, std::future::pending()).await {
            tracing::error!("built-in sim target stopped: {e}");
        }
    });
    let mut targets = vec![Target::sim(sim_url)];
    let mut configured = Vec::new();
    if let Some(path) = &args.config {
        configured.extend(read_config(path)?);
    }
    for spec in &args.targets {
        configured.push(parse_target(spec)?);
    }
    for t in configured {
        if targets.iter().any(|o| o.name == t.name) {
            anyhow::bail!("target `{}` is configured twice", t.name);
        }
        targets.push(t);
    }
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    let store = RunStore::open(&data_dir)?;
    let limits = Limits {
        max_message_bytes: 1 << 20,
        max_concurrent_runs: args.max_concurrent_runs,
        max_sessions_per_run: args.max_sessions_per_run,
        max_concurrent_requests_per_run: args.max_concurrent_requests_per_run,
        max_rate_per_run: args.max_rate_per_run,
        max_run_seconds: args.max_run_seconds,
    };
    let runs = Arc::new(Runs::new(
        store,
        targets,
        limits,
        Arc::new(ReplayDriver {
            max_run_seconds: Some(args.max_run_seconds),
            max_in_flight: Some(args.max_concurrent_requests_per_run),
        }),
    ));
    // What each target says of its limits, for the page's check of a plan before launch.
    runs.discover_limits();

    let addr = SocketAddr::new(args.listen, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let state = Arc::new(AppState {
        token: token.clone(),
        allowed_hosts: allowed_hosts(local, &extra_hosts),
        runs: runs.clone(),
        ws_write_timeout: std::time::Duration::from_secs_f64(args.ws_write_timeout),
    });
    let shown = if local.ip().is_unspecified() {
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), local.port())
    } else {
        local
    };
    // Installed before the agent says where it listens: from then on a signal is a request to shut down.
    let mut signals = Signals::new()?;
    println!(
        "loadshape {} serving the page and API",
        shared::version::LOADSHAPE_VERSION
    );
    println!("  open http://{shown}/#token={token}");
    println!("  {}", page.describe());
    // The last start-up line (tests read up to it).
    println!("  runs stored in {}", runs.store.dir().display());
    let mut server = std::pin::pin!(axum::serve(listener, app(state, &page)).into_future());
    let signal = tokio::select! {
        r = &mut server => return r.map(|()| ExitCode::SUCCESS).context("serving"),
        s = signals.recv() => s.name,
    };
    // Stop the live runs and let them finish (records flushed, summary and run.json written) before exiting,
    // still serving so viewers see the runs end; a second signal or the grace period ends the wait.
    let grace = SHUTDOWN_GRACE.as_secs();
    eprintln!(
        "{signal}: stopping {} live run(s) (up to {grace} s; again to exit now)",
        runs.active_count()
    );
    let finished = async {
        // Stop again on each turn: a page may start a run while the others finish.
        while {
            runs.stop_all();
            runs.active_count() > 0
        } {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = finished => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            let left = runs.active_count();
            eprintln!("{left} live run(s) still running after {grace} s; exiting (they will read `interrupted`)");
        }
        s = signals.recv() => eprintln!("second {}: exiting now", s.name),
        r = &mut server => r.context("serving")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `serve` waits, after SIGTERM or SIGINT, for live runs to stop and write their summaries.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// Parses `NAME=URL[,model=M][,dialect=D][,api_key_env=VAR][,ca_cert=FILE][,url=URL2...][,router=R][,load_cap=X]`.
pub fn parse_target(spec: &str) -> anyhow::Result<Target> {
    let (name, rest) = spec
        .split_once('=')
        .with_context(|| format!("--target `{spec}`: expected NAME=URL[,...]"))?;
    let mut parts = rest.split(',');
    let url = parts.next().unwrap_or("").trim().trim_end_matches('/').to_string();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        anyhow::bail!("--target `{spec}`: the name must be letters, digits, - or _");
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("--target `{spec}`: the URL must start with http:// or https:// (got `{url}`)");
    }
    let mut t = Target {
        name: name.into(),
        url: url.clone(),
        model: String::new(),
        dialect: "auto".into(),
        api_key_env: None,
        ca_cert: None,
        builtin: false,
        fleet: None,
    };
    // A fleet: more replicas (`url=`), its router and load cap.
    let mut urls = vec![url];
    let (mut router, mut load_cap) = (None, None);
    for kv in parts {
        match kv.split_once('=') {
            Some(("url", v)) => {
                let v = v.trim().trim_end_matches('/').to_string();
                if !(v.starts_with("http://") || v.starts_with("https://")) {
                    anyhow::bail!("--target `{spec}`: url= must start with http:// or https:// (got `{v}`)");
                }
                crate::replay::client::origin_of(&v).with_context(|| format!("--target `{spec}`: url="))?;
                if urls.contains(&v) {
                    anyhow::bail!("--target `{spec}`: the URL `{v}` is given twice (each replica is one URL)");
                }
                urls.push(v);
            }
            Some(("router", v)) => {
                let r = shared::engine::Router::ALL.into_iter().find(|r| r.name() == v);
                router = Some(r.with_context(|| {
                    let names: Vec<&str> = shared::engine::Router::ALL.iter().map(|r| r.name()).collect();
                    format!(
                        "--target `{spec}`: router= must be one of {} (got `{v}`)",
                        names.join(", ")
                    )
                })?);
            }
            Some(("load_cap", v)) => {
                load_cap = Some(
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .with_context(|| format!("--target `{spec}`: load_cap= must be a number (got `{v}`)"))?,
                );
            }
            Some(("model", v)) => t.model = v.into(),
            Some(("dialect", v)) => t.dialect = v.into(),
            Some(("api_key_env", v)) => t.api_key_env = Some(v.into()),
            Some(("ca_cert", v)) => {
                // Read now, so a wrong path is an error at start-up rather than at the first run.
                crate::replay::tls::load_ca_certs(std::path::Path::new(v))
                    .with_context(|| format!("--target `{spec}`"))?;
                t.ca_cert = Some(v.into());
            }
            _ => anyhow::bail!(
                "--target `{spec}`: unknown option `{kv}` (model=, dialect=, api_key_env=, ca_cert=, url=, router=, \
                 load_cap=)"
            ),
        }
    }
    if urls.len() < 2 {
        if router.is_some() || load_cap.is_some() {
            anyhow::bail!(
                "--target `{spec}`: router= and load_cap= spread a run over several URLs: add the other replicas with url="
            );
        }
    } else {
        // Checked as a scenario's fleet is (the router's own rules, e.g. the load cap's range).
        let spec_check = shared::engine::FleetSpec {
            replicas: urls.len() as u32,
            router: router.unwrap_or(shared::engine::Router::RoundRobin),
            load_cap: load_cap.unwrap_or(1.5),
            profiles: Vec::new(),
        };
        spec_check
            .validate()
            .map_err(|e| anyhow::anyhow!("--target `{spec}`: {}", e.to_string().replace("load_cap", "load_cap=")))?;
        t.fleet = Some(TargetFleet { urls, router, load_cap });
    }
    if t.name == "sim" {
        anyhow::bail!("--target `{spec}`: the name `sim` is reserved for the built-in emulated engine");
    }
    Ok(t)
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    target: Vec<TargetEntry>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetEntry {
    name: String,
    /// One URL; or `urls`, a fleet's replicas.
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    router: Option<String>,
    #[serde(default)]
    load_cap: Option<f64>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    dialect: Option<String>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    ca_cert: Option<String>,
}

/// Reads `[[target]]` tables from a TOML file; each is checked as a `--target` would be.
pub fn read_config(path: &std::path::Path) -> anyhow::Result<Vec<Target>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: ConfigFile = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    file.target
        .into_iter()
        .map(|e| {
            let first = match (&e.url, e.urls.as_slice()) {
                (Some(u), []) => u.clone(),
                (None, [first, ..]) => first.clone(),
                (None, []) => anyhow::bail!("{}: target `{}`: give url, or urls for a fleet", path.display(), e.name),
                (Some(_), [_, ..]) => {
                    anyhow::bail!("{}: target `{}`: give url or urls, not both", path.display(), e.name)
                }
            };
            let mut spec = format!("{}={first}", e.name);
            for u in e.urls.iter().skip(1) {
                spec.push_str(&format!(",url={u}"));
            }
            if let Some(r) = &e.router {
                spec.push_str(&format!(",router={r}"));
            }
            if let Some(c) = e.load_cap {
                spec.push_str(&format!(",load_cap={c}"));
            }
            for (k, v) in [
                ("model", e.model),
                ("dialect", e.dialect),
                ("api_key_env", e.api_key_env),
                ("ca_cert", e.ca_cert),
            ] {
                if let Some(v) = v {
                    spec.push_str(&format!(",{k}={v}"));
                }
            }
            parse_target(&spec).with_context(|| format!("{}: target `{}`", path.display(), e.name))
        })
        .collect()
}

fn default_data_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("loadshape")
}

/// Where the page comes from: `--dist` when given; else the copy embedded in the binary; else, in a debug build, the
/// workspace's `dist/` (where `trunk build` puts it while developing).
fn page_source(dist: Option<PathBuf>) -> Option<Page> {
    if let Some(dir) = dist {
        return Some(Page::Dir(dir));
    }
    if let Some(page) = Page::embedded() {
        return Some(page);
    }
    #[cfg(debug_assertions)]
    {
        let dev = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../dist"));
        if dev.join("index.html").exists() {
            return Some(Page::Dir(dev));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets_and_rejects_bad_ones() {
        let t = parse_target("vllm=http://127.0.0.1:8000/v1/,model=llama,dialect=vllm,api_key_env=KEY").unwrap();
        assert_eq!(
            (t.name.as_str(), t.url.as_str(), t.model.as_str()),
            ("vllm", "http://127.0.0.1:8000/v1", "llama")
        );
        assert_eq!(t.api_key_env.as_deref(), Some("KEY"));
        for bad in [
            "novalue",
            "x=ftp://a",
            "=http://a",
            "sim=http://a",
            "x=http://a,colour=red",
        ] {
            assert!(parse_target(bad).is_err(), "{bad} accepted");
        }
        // ca_cert= is read at start-up: a readable PEM file is kept, anything else is refused naming the file.
        let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/ca.pem");
        let t = parse_target(&format!("gpu=https://10.0.0.7/v1,ca_cert={ca}")).unwrap();
        assert_eq!(t.ca_cert.as_deref(), Some(ca));
        let e = format!(
            "{:#}",
            parse_target("gpu=https://10.0.0.7/v1,ca_cert=/nonexistent/ca.pem").unwrap_err()
        );
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn a_target_can_be_a_fleet_of_urls_with_a_router() {
        use shared::engine::Router;
        let t = parse_target("f=http://127.0.0.1:8000/v1,url=http://127.0.0.1:8001/v1/,router=prefix_aware,load_cap=2")
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(t.url, "http://127.0.0.1:8000/v1");
        assert_eq!(
            t.fleet,
            Some(TargetFleet {
                urls: vec!["http://127.0.0.1:8000/v1".into(), "http://127.0.0.1:8001/v1".into()],
                router: Some(Router::PrefixAware),
                load_cap: Some(2.0),
            })
        );
        let info = t.info().fleet.unwrap_or_else(|| panic!("list_targets shows the fleet"));
        assert_eq!((info.urls.len(), info.router), (2, Some(Router::PrefixAware)));
        // Router and load cap are optional (the scenario's, else round robin and 1.5); one URL is no fleet.
        let t = parse_target("f=http://a:1/v1,url=http://b:1/v1").unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(t.fleet.map(|f| (f.router, f.load_cap)), Some((None, None)));
        assert!(
            parse_target("f=http://a:1/v1")
                .unwrap_or_else(|e| panic!("{e:#}"))
                .fleet
                .is_none()
        );
        for (bad, why) in [
            ("f=http://a:1/v1,url=http://a:1/v1", "is given twice"),
            ("f=http://a:1/v1,url=ftp://b/v1", "url= must start with http"),
            (
                "f=http://a:1/v1,url=http://b:1/v1,router=nearest",
                "router= must be one of round_robin",
            ),
            (
                "f=http://a:1/v1,url=http://b:1/v1,load_cap=x",
                "load_cap= must be a number",
            ),
            (
                "f=http://a:1/v1,url=http://b:1/v1,load_cap=0.5",
                "load_cap= must be in 1..=100",
            ),
            ("f=http://a:1/v1,router=round_robin", "add the other replicas with url="),
        ] {
            let e = format!("{:#}", parse_target(bad).unwrap_err());
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_config_file_target_can_list_urls() {
        let dir = crate::scratch::Scratch::new("serve-config");
        let path = dir.join("targets.toml");
        std::fs::write(
            &path,
            "[[target]]\nname = \"one\"\nurl = \"http://a:1/v1\"\n\n[[target]]\nname = \"fleet\"\n\
             urls = [\"http://a:1/v1\", \"http://b:1/v1\", \"http://c:1/v1\"]\nrouter = \"session_affinity\"\nload_cap = 3.0\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = read_config(&path).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(t[0].fleet.is_none());
        let f = t[1].fleet.as_ref().unwrap_or_else(|| panic!("a fleet"));
        assert_eq!(
            (t[1].url.as_str(), f.urls.len(), f.load_cap),
            ("http://a:1/v1", 3, Some(3.0))
        );
        assert_eq!(f.router, Some(shared::engine::Router::SessionAffinity));
        for (body, why) in [
            ("[[target]]\nname = \"x\"\n", "give url, or urls"),
            (
                "[[target]]\nname = \"x\"\nurl = \"http://a:1/v1\"\nurls = [\"http://b:1/v1\"]\n",
                "not both",
            ),
        ] {
            std::fs::write(&path, body).unwrap_or_else(|e| panic!("{e}"));
            let e = format!("{:#}", read_config(&path).unwrap_err());
            assert!(e.contains(why), "{e}");
        }
    }
}
