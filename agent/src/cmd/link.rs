//! `loadshape link`: a scenario file as a share link, or a link back to the scenario (same code as the page:
//! `shared::link`).
//!
//! ```text
//! loadshape link examples/seed.json                 # http://127.0.0.1:8080/#s=1.eNq...
//! loadshape link - --base http://gpu-host:8080/     # scenario on stdin
//! loadshape link --decode 'http://127.0.0.1:8080/#s=1.eNq...'
//! loadshape link 'http://127.0.0.1:8080/#s=1.eNq...'   # the same: a link that names no file is decoded
//! pbpaste | loadshape link --decode                 # the link on stdin (no argument, or `-`)
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
    /// `http(s)://` address or `#s=...`) that names no file is decoded without `--decode`. `-` or nothing: read it
    /// from standard input.
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
    let names_a_link = |input: &str| {
        (input.starts_with("http://") || input.starts_with("https://") || input.contains("#s="))
            && !std::path::Path::new(input).exists()
    };
    if args.decode || args.input.as_deref().is_some_and(names_a_link) {
        let link = if from_stdin {
            stdin()?
        } else {
            args.input.unwrap_or_default()
        };
        let scenario = shared::link::decode(&link).context("cannot decode the link")?;
        println!("{}", scenario.to_json_pretty());
        return Ok(ExitCode::SUCCESS);
    }
    let (text, source) = match args.input {
        Some(path) if !from_stdin => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read scenario file {path}"))?;
            (text, path)
        }
        _ => (stdin()?, "standard input".to_string()),
    };
    let scenario = Scenario::from_json(&text).with_context(|| format!("{source} is not a valid scenario"))?;
    println!("{}", shared::link::link_url(&args.base, &scenario));
    Ok(ExitCode::SUCCESS)
}
