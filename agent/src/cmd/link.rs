//! `loadshape link`: a scenario file as a share link, or a link back to the scenario (same code as the page:
//! `shared::link`).
//!
//! ```text
//! loadshape link examples/seed.json                 # http://127.0.0.1:8080/#s=1.eNq...
//! loadshape link - --base http://gpu-host:8080/     # scenario on stdin
//! loadshape link --decode 'http://127.0.0.1:8080/#s=1.eNq...'
//! loadshape link 'http://127.0.0.1:8080/#s=1.eNq...'   # the same: a link that names no file is decoded
//! pbpaste | loadshape link                          # a link on stdin is decoded too (no argument, or `-`)
//! ```
//!
//! Without an argument (or with `-`) the scenario, or with `--decode` the link, is read from standard input: a
//! large scenario's link can pass the shell's argument limit (128 KiB for one argument on Linux).

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use shared::scenario::Scenario;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file to encode, or with `--decode` the link (URL, `#s=...` fragment or payload). A link (an
    /// `http(s)://` address or `#s=...`) that names no file, or on standard input, is decoded without `--decode`.
    /// `-` or nothing: read it from standard input.
    #[arg(value_name = "FILE|URL")]
    pub input: Option<String>,
    /// Decode a link and print its scenario as JSON instead of encoding a file.
    #[arg(long)]
    pub decode: bool,
    /// The page's address the link points at.
    #[arg(long, default_value = shared::link::DEFAULT_BASE)]
    pub base: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let from_stdin = args.input.as_deref().is_none_or(|i| i == "-");
    let stdin = || -> anyhow::Result<String> {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        Ok(s)
    };
    // A link, not a scenario: an address or a `#s=` fragment (a scenario's JSON starts with `{`).
    let link_like = |s: &str| {
        let s = s.trim();
        !s.starts_with('{') && (s.starts_with("http://") || s.starts_with("https://") || s.contains("#s="))
    };
    let (text, source, decode) = match args.input {
        Some(input) if !from_stdin => {
            if args.decode || (link_like(&input) && !std::path::Path::new(&input).exists()) {
                (input, String::new(), true)
            } else {
                let text =
                    std::fs::read_to_string(&input).with_context(|| format!("cannot read scenario file {input}"))?;
                (text, input, false)
            }
        }
        _ => {
            let text = stdin()?;
            let decode = args.decode || link_like(&text);
            (text, "standard input".to_string(), decode)
        }
    };
    if decode {
        let scenario = shared::link::decode(&text).context("cannot decode the link")?;
        println!("{}", scenario.to_json_pretty());
        return Ok(ExitCode::SUCCESS);
    }
    let scenario = Scenario::from_json(&text).with_context(|| format!("{source} is not a valid scenario"))?;
    println!("{}", shared::link::link_url(&args.base, &scenario));
    Ok(ExitCode::SUCCESS)
}
