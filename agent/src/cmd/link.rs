//! `loadshape link`: a scenario file as a share link, or a link back to the scenario (same code as the page:
//! `shared::link`).
//!
//! ```text
//! loadshape link examples/seed.json                 # http://127.0.0.1:8080/#s=1.eNq...
//! loadshape link - --base http://gpu-host:8080/     # scenario on stdin
//! loadshape link --decode 'http://127.0.0.1:8080/#s=1.eNq...'
//! ```

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use shared::scenario::Scenario;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file to encode (`-` for stdin). With `--decode`, the link (URL, `#s=...` fragment or payload).
    #[arg(value_name = "FILE|URL")]
    pub input: String,
    /// Decode a link and print its scenario as JSON instead of encoding a file.
    #[arg(long)]
    pub decode: bool,
    /// The page's address the link points at.
    #[arg(long, default_value = shared::link::DEFAULT_BASE)]
    pub base: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.decode {
        let scenario = shared::link::decode(&args.input).context("cannot decode the link")?;
        println!("{}", scenario.to_json_pretty());
        return Ok(ExitCode::SUCCESS);
    }
    let text = if args.input == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the scenario from stdin")?;
        s
    } else {
        let path = PathBuf::from(&args.input);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read scenario file {}", path.display()))?
    };
    let scenario = Scenario::from_json(&text).with_context(|| format!("{} is not a valid scenario", args.input))?;
    println!("{}", shared::link::link_url(&args.base, &scenario));
    Ok(ExitCode::SUCCESS)
}
