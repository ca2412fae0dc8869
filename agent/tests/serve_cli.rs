//! `loadshape serve` as the operator starts it (the built binary, bound on 127.0.0.1): what it refuses at
//! start-up (weak tokens, from the flag and the environment; bad `--allowed-host` values), and that a damaged
//! run store does not stop it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

/// A `serve` child, killed (its exact PID) when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How a `serve` start ended: it printed its URL (and is running), or it exited with this code and stderr.
#[derive(Debug)]
enum Start {
    /// The URL it printed; the child runs until this is dropped.
    Serving {
        url: String,
        _child: Serve,
    },
    Exited(i32, String),
}

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("cli-{name}"))
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "serve pid {}", self.0.id())
    }
}

/// Starts `loadshape serve --port 0 --data-dir DIR ARGS` with `env` and waits (60 s at most) for its URL or exit.
fn start(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Start {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loadshape"));
    cmd.args(["serve", "--port", "0", "--dist"])
        .arg(dir.join("no-dist"))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env_remove("LOADSHAPE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run loadshape serve");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.split_whitespace().find(|w| w.contains("#token=")) {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let serve = Serve(child);
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => Start::Serving { url, _child: serve },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("serve neither printed its URL nor exited in 60 s"),
        // Its stdout closed without a URL: it is exiting.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let mut serve = serve;
            let code = serve.0.wait().map_or(-1, |s| s.code().unwrap_or(-1));
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err);
            Start::Exited(code, err)
        }
    }
}

fn refused(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> String {
    match start(dir, args, env) {
        Start::Exited(code, err) => {
            assert_ne!(code, 0, "{err}");
            err
        }
        Start::Serving { url, .. } => panic!("serve {args:?} {env:?} started: {url}"),
    }
}

#[test]
fn empty_and_weak_tokens_are_refused_from_the_flag_and_the_environment() {
    let dir = tempdir("token");
    let err = refused(&dir, &["--token", ""], &[]);
    assert!(err.contains("--token") && err.contains("empty"), "{err}");
    let err = refused(&dir, &[], &[("LOADSHAPE_TOKEN", "")]);
    assert!(err.contains("LOADSHAPE_TOKEN") && err.contains("empty"), "{err}");
    for weak in [
        "a",
        "secret-token",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ] {
        let err = refused(&dir, &["--token", weak], &[]);
        assert!(err.contains("too weak"), "{weak}: {err}");
        let err = refused(&dir, &[], &[("LOADSHAPE_TOKEN", weak)]);
        assert!(err.contains("too weak"), "{weak}: {err}");
    }
    let err = refused(&dir, &["--token", "ab+cd"], &[]);
    assert!(err.contains("'+'"), "{err}");
    // A good token is taken as given; without one the agent makes a 256-bit one.
    let good = "3f9a1c0e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f";
    match start(&dir, &[], &[("LOADSHAPE_TOKEN", good)]) {
        Start::Serving { url, .. } => assert!(url.ends_with(&format!("#token={good}")), "{url}"),
        other => panic!("{other:?}"),
    }
    match start(&dir, &[], &[]) {
        Start::Serving { url, .. } => {
            let token = url.rsplit("#token=").next().unwrap();
            assert_eq!(token.len(), 64, "{url}");
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{url}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn allowed_host_values_are_checked_at_start_up() {
    let dir = tempdir("hosts");
    let err = refused(&dir, &["--allowed-host", "http://lab-box:8080/"], &[]);
    assert!(
        err.contains("--allowed-host") && err.contains("http://lab-box:8080/"),
        "{err}"
    );
    match start(
        &dir,
        &["--allowed-host", "lab-box.local", "--allowed-host", "192.168.7.20"],
        &[],
    ) {
        Start::Serving { .. } => {}
        other => panic!("{other:?}"),
    }
}

/// A run.json naming an escaping id or a missing folder, left `running` by a crash, used to stop `serve` with
/// exit 1 (it tried to write the interrupted state to `runs/../../evil`).
#[test]
fn a_bad_run_json_never_stops_serve_from_starting() {
    let dir = tempdir("store");
    for (folder, id) in [("evil", "../../evil"), ("gone", "no-such-folder")] {
        let run = dir.join("runs").join(folder);
        std::fs::create_dir_all(&run).unwrap();
        let json = format!(
            r#"{{"run_id":"{id}","target":"sim","state":"running","started_ms":1,"ended_ms":null,"records":0}}"#
        );
        std::fs::write(run.join("run.json"), json).unwrap();
    }
    std::fs::create_dir_all(dir.join("runs/broken")).unwrap();
    std::fs::write(dir.join("runs/broken/run.json"), "{").unwrap();
    match start(&dir, &[], &[]) {
        Start::Serving { .. } => {}
        Start::Exited(code, err) => panic!("serve exited {code}: {err}"),
    }
    let evil = std::fs::read_to_string(dir.join("runs/evil/run.json")).unwrap();
    assert!(
        evil.contains("\"interrupted\"") && evil.contains("\"run_id\": \"evil\""),
        "{evil}"
    );
    assert!(!dir.join("evil").exists() && !dir.join("runs/no-such-folder").exists());
}
