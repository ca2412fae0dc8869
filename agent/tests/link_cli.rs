//! Black-box tests of `loadshape link`: encode a scenario file, decode the link back, and refuse bad links
//! with a message and a non-zero exit.

use std::process::Output;

mod common;
use common::loadshape;
#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

const SEED_FORM: &str = include_str!("../../examples/seed-baseline.json");

fn scenario_file(dir: &std::path::Path, body: &str) -> String {
    let path = dir.join("scenario.json");
    std::fs::write(&path, body).expect("write scenario");
    path.to_string_lossy().into_owned()
}

fn tempdir(name: &str) -> Scratch {
    Scratch::new(&format!("link-cli-{name}"))
}

/// The share link of the seed's scenario, made by `loadshape link FILE`.
fn seed_link(name: &str) -> String {
    let dir = tempdir(name);
    let file = scenario_file(&dir, SEED_FORM);
    stdout(&loadshape(&["link", &file], None))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn encodes_a_file_and_decodes_it_back() {
    let dir = tempdir("roundtrip");
    let file = scenario_file(&dir, SEED_FORM);
    let out = loadshape(&["link", &file], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let link = stdout(&out);
    assert!(link.starts_with("http://127.0.0.1:8080/#s=1."), "{link}");

    let out = loadshape(&["link", "--decode", &link], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decoded: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("decode prints JSON");
    let mut original: serde_json::Value = serde_json::from_str(SEED_FORM).unwrap();
    original["version"] = serde_json::json!(1);
    assert_eq!(decoded, original);
}

#[test]
fn a_link_without_decode_is_decoded() {
    let link = seed_link("auto");
    let decoded = loadshape(&["link", "--decode", &link], None);
    let auto = loadshape(&["link", &link], None);
    assert!(auto.status.success(), "{}", String::from_utf8_lossy(&auto.stderr));
    assert_eq!(stdout(&auto), stdout(&decoded));
    // A broken link says what is wrong with it, not that no file has that name.
    let out = loadshape(&["link", &link[..link.len() - 6]], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("truncated") && !err.contains("scenario file"), "{err}");
}

#[test]
fn base_option_and_stdin() {
    let out = loadshape(&["link", "-", "--base", "http://gpu-host:9000/page"], Some(SEED_FORM));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let link = stdout(&out);
    assert!(link.starts_with("http://gpu-host:9000/page#s=1."), "{link}");
    // A decoded link encodes to the same link again.
    let out = loadshape(&["link", "--decode", &link], None);
    let again = loadshape(
        &["link", "-", "--base", "http://gpu-host:9000/page"],
        Some(&stdout(&out)),
    );
    assert_eq!(stdout(&again), link);
}

#[test]
fn bad_links_fail_with_a_message() {
    let link = seed_link("bad");
    let cases = [
        (link[..link.len() - 6].to_string(), "truncated"),
        (link.replace("#s=1.", "#s=7."), "newer"),
        ("http://127.0.0.1:8080/#s=nonsense".to_string(), "malformed"),
        ("http://127.0.0.1:8080/".to_string(), "no scenario"),
    ];
    for (bad, expect) in cases {
        let out = loadshape(&["link", "--decode", &bad], None);
        assert!(!out.status.success(), "{bad} decoded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{bad}: expected `{expect}` in: {err}");
    }
}

#[test]
fn invalid_scenario_file_names_the_field() {
    let dir = tempdir("invalid");
    let file = scenario_file(
        &dir,
        &SEED_FORM.replace("\"max_batch_slots\": 16", "\"max_batch_slots\": 0"),
    );
    let out = loadshape(&["link", &file], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_batch_slots"), "{err}");
}

#[test]
fn decode_reads_the_link_from_stdin() {
    let link = seed_link("stdin");
    let from_arg = loadshape(&["link", "--decode", &link], None);
    assert!(from_arg.status.success());
    // A link on stdin is decoded without --decode too.
    for args in [
        &["link", "--decode", "-"][..],
        &["link", "--decode"][..],
        &["link", "-"][..],
        &["link"][..],
    ] {
        let out = loadshape(args, Some(&format!("{link}\n")));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout(&out), stdout(&from_arg), "{args:?}");
    }
    // Encoding with no argument reads the scenario from stdin too.
    let out = loadshape(&["link"], Some(SEED_FORM));
    assert_eq!(stdout(&out), link);
}

#[test]
fn an_invalid_scenario_in_a_link_is_reported_once() {
    let payload = shared::link::pack(&SEED_FORM.replace("\"mean_rps\": 8.5", "\"mean_rps\": 0"));
    let out = loadshape(&["link", "--decode", &payload], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("mean_rps").count(), 1, "printed twice: {err}");
}
