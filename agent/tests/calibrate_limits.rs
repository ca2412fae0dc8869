//! What `loadshape calibrate --url` reads from a server about its limits: llama.cpp's `/props` and vLLM's
//! `vllm:cache_config_info` (bodies as those servers send them).

use loadshape::cmd::calibrate::{
    Discovered, check_runs, parse_cache_config, parse_models, parse_props, parse_sglang_metrics, read_runs,
};
use serde_json::json;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::Scratch;

#[test]
fn llamacpp_props_give_slots_and_context() {
    // llama.cpp `--parallel 4 -c 32768`: each slot gets 8,192 tokens.
    let props = json!({
        "default_generation_settings": {"n_ctx": 8192, "params": {"n_predict": -1}},
        "total_slots": 4,
        "model_path": "tiny.gguf",
        "chat_template": "..."
    });
    let mut d = Discovered::default();
    parse_props(&props, &mut d);
    assert_eq!(d.max_num_seqs, Some(4));
    assert_eq!(d.max_model_len, Some(8192));
    // The whole KV: 4 slots × 8,192 tokens in blocks of 16.
    assert_eq!((d.block_size, d.num_kv_blocks), (Some(16), Some(2048)));
    // /props does not give n_batch: llama-server's default --batch-size, named as such.
    assert_eq!(d.max_num_batched_tokens, Some(2048));
    assert_eq!(d.sources.len(), 2, "{:?}", d.sources);
    assert_eq!(d.sources[0], "llama.cpp /props");
    assert!(d.sources[1].contains("default n_batch 2048"), "{:?}", d.sources);
    // A server that answers /props schedules as llama-server does: slots, decodes first, prompts in slot order.
    assert_eq!(d.scheduler, Some(shared::engine::profile::Scheduler::LlamaCpp));
    // One that gives n_batch is taken at its word.
    let mut given = Discovered::default();
    parse_props(
        &json!({"default_generation_settings": {"n_ctx": 4096, "n_batch": 512}, "total_slots": 2}),
        &mut given,
    );
    assert_eq!(given.max_num_batched_tokens, Some(512));
    assert_eq!(given.sources, vec!["llama.cpp /props".to_string()]);
    // A server without /props fields says nothing.
    let mut none = Discovered::default();
    parse_props(&json!({"object": "list"}), &mut none);
    assert_eq!(none, Discovered::default());
}

/// vLLM's `/v1/models` gives the context limit (a real vLLM 0.11 answer, trimmed); llama.cpp's per-slot context,
/// found first, is kept; a list without the field says nothing.
#[test]
fn vllm_models_give_the_context_limit() {
    let models = json!({"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "created": 1765000000,
        "owned_by": "vllm", "root": "Qwen/Qwen3-8B", "parent": null, "max_model_len": 16384, "permission": []}]});
    let mut d = Discovered::default();
    parse_models(&models, &mut d);
    assert_eq!(d.max_model_len, Some(16384));
    assert_eq!(d.sources, ["vLLM /v1/models max_model_len"]);
    let mut llama = Discovered {
        max_model_len: Some(8192),
        ..Discovered::default()
    };
    parse_models(&models, &mut llama);
    assert_eq!((llama.max_model_len, llama.sources.len()), (Some(8192), 0));
    let mut none = Discovered::default();
    parse_models(&json!({"object": "list", "data": [{"id": "sim"}]}), &mut none);
    assert_eq!(none, Discovered::default());
}

#[test]
fn vllm_cache_config_info_gives_the_kv_geometry() {
    let text = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
                # TYPE vllm:cache_config_info gauge\n\
                vllm:cache_config_info{block_size=\"32\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",\
                gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"27153\"} 1.0\n\
                vllm:num_requests_running{model_name=\"m\"} 0.0\n";
    let mut d = Discovered::default();
    parse_cache_config(text, &mut d);
    assert_eq!((d.block_size, d.num_kv_blocks), (Some(32), Some(27153)));
    let mut none = Discovered::default();
    parse_cache_config("llamacpp:prompt_tokens_total 10\n", &mut none);
    assert_eq!(none, Discovered::default());
}

#[test]
fn servers_report_their_tiers_below_the_gpu_or_say_they_do_not() {
    // llama.cpp: its host prompt cache (--cache-ram) is not in /props; that is said, and no tier is reported.
    let mut d = Discovered::default();
    parse_props(
        &json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 4, "build_info": "b1-0c1e570"}),
        &mut d,
    );
    assert_eq!(d.tier, None);
    assert!(
        d.tier_notes.len() == 1 && d.tier_notes[0].contains("b1-0c1e570") && d.tier_notes[0].contains("--cache-ram"),
        "{:?}",
        d.tier_notes
    );
    // vLLM with native KV offloading: its size in GiB (tokens would need the KV bytes per token).
    let text = "vllm:cache_config_info{block_size=\"16\",kv_offloading_backend=\"native\",kv_offloading_size=\"64.0\",\
                num_gpu_blocks=\"1000\"} 1.0\n";
    let mut v = Discovered::default();
    parse_cache_config(text, &mut v);
    let t = v.tier.clone().unwrap_or_else(|| panic!("no tier: {v:?}"));
    assert_eq!((t.capacity_tokens, t.capacity_gib), (None, Some(64.0)));
    assert!(t.said.contains("native"), "{}", t.said);
    // ... and without: none reported, and said so.
    let mut off = Discovered::default();
    parse_cache_config(
        "vllm:cache_config_info{block_size=\"16\",kv_offloading_size=\"None\",num_gpu_blocks=\"1000\"} 1.0\n",
        &mut off,
    );
    assert_eq!(off.tier, None);
    assert_eq!(off.tier_notes.len(), 1, "{:?}", off.tier_notes);
    // SGLang HiCache: the host pool in tokens, tensor-parallel ranks repeating it.
    let text = "sglang:max_total_num_tokens{tp_rank=\"0\"} 500000.0\n\
                sglang:hicache_host_used_tokens{tp_rank=\"0\"} 1000.0\n\
                sglang:hicache_host_total_tokens{tp_rank=\"0\"} 1000000.0\n\
                sglang:hicache_host_total_tokens{tp_rank=\"1\"} 1000000.0\n";
    let mut g = Discovered::default();
    parse_sglang_metrics(text, &mut g);
    assert_eq!(g.tier.as_ref().and_then(|t| t.capacity_tokens), Some(1_000_000));
    let mut plain = Discovered::default();
    parse_sglang_metrics("sglang:max_total_num_tokens{tp_rank=\"0\"} 500000.0\n", &mut plain);
    assert_eq!((plain.tier, plain.tier_notes.len()), (None, 1));
    // Not SGLang: nothing.
    let mut none = Discovered::default();
    parse_sglang_metrics("llamacpp:prompt_tokens_total 10\n", &mut none);
    assert_eq!(none, Discovered::default());
}

fn tmp(name: &str) -> Scratch {
    Scratch::new(&format!("calimits-{name}"))
}

/// `n` records of requests `gap_s` apart, each 1 s long with its first token at 0.1 s and 20 tokens out.
fn write_run(path: &std::path::Path, n: u64, gap_s: f64) {
    let lines: Vec<String> = (0..n)
        .map(|i| {
            json!({"schema": 1, "session": i, "inst": 0, "step": 0, "steps_asked": 1, "base_asked": 100,
                "ok": true, "t_submit": i as f64 * gap_s, "ttft_s": 0.1, "wall_s": 1.0, "gen_tokens": 20,
                "asked_tokens": 20, "prompt_tokens": 100, "cached_tokens": 50, "sse_frames": 20,
                "prompt_chars": 400, "usage_source": "final_frame"})
            .to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
}

/// `calibrate --from` reads the limits the run's scrape sidecar kept (`RUN.jsonl.server.json`'s `limits`) as
/// `--url` reads them from the server; a missing sidecar is a note naming it, a bad one an error naming it.
#[test]
fn from_reads_the_limits_of_the_scrape_sidecar() {
    let dir = tmp("sidecar");
    let run = dir.join("run.jsonl");
    write_run(&run, 10, 2.0);
    let sidecar = dir.join("run.jsonl.server.json");
    let side = json!({"metrics_url": "http://127.0.0.1:1/metrics", "interval_s": 1.0, "snapshots": [],
        "report": {"scrapes": 3, "failed_scrapes": 0, "window_s": 20.0, "generation_tokens": 200.0,
                   "running_max": 1.0, "prefix_cache_hit_rate": null},
        "limits": {"props": {"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}}}});
    std::fs::write(&sidecar, side.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let runs = read_runs(std::slice::from_ref(&run)).unwrap_or_else(|e| panic!("{e:#}"));
    let d = &runs.discovered;
    // What parse_props makes of the live /props above (llama.cpp --parallel 4 -c 32768).
    assert_eq!(
        (
            d.max_num_seqs,
            d.max_model_len,
            d.block_size,
            d.num_kv_blocks,
            d.max_num_batched_tokens
        ),
        (Some(4), Some(8192), Some(16), Some(2048), Some(2048))
    );
    assert!(
        d.sources[0] == "llama.cpp /props (from run.jsonl.server.json)",
        "{:?}",
        d.sources
    );
    assert!(runs.notes.is_empty(), "{:?}", runs.notes);
    assert_eq!(runs.facts.len(), 1);
    assert_eq!((runs.facts[0].peak_decoding, runs.facts[0].gen_tokens), (1, 200));
    // The facts agree with 4 slots and with the server's counter: nothing to note.
    let profile = |slots: u32| shared::engine::EngineProfile {
        max_num_seqs: slots,
        ..shared::engine::presets::by_name("llama-3-8b-1xh100").unwrap_or_else(|| panic!("preset"))
    };
    assert!(check_runs(&runs.facts, &profile(4)).is_empty());

    // A sidecar of vLLM's kind: the cache_config_info line.
    let vllm = json!({"report": {}, "limits": {"cache_config_info":
        "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"27153\"} 1.0"}});
    std::fs::write(&sidecar, vllm.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let runs = read_runs(std::slice::from_ref(&run)).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        (
            runs.discovered.block_size,
            runs.discovered.num_kv_blocks,
            runs.discovered.max_num_seqs
        ),
        (Some(32), Some(27153), None)
    );

    // A sidecar without limits (an older run): a note, no limits.
    std::fs::write(&sidecar, json!({"report": {}}).to_string()).unwrap_or_else(|e| panic!("{e}"));
    let runs = read_runs(std::slice::from_ref(&run)).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(runs.discovered, Discovered::default());
    assert!(
        runs.notes.len() == 1 && runs.notes[0].contains("run.jsonl.server.json") && runs.notes[0].contains("no limits"),
        "{:?}",
        runs.notes
    );

    // Not JSON: an error naming the file; a `limits` of the wrong shape: the file and the field.
    std::fs::write(&sidecar, "{\"report\": ").unwrap_or_else(|e| panic!("{e}"));
    let e = format!("{:#}", read_runs(std::slice::from_ref(&run)).expect_err("bad JSON"));
    assert!(e.contains("run.jsonl.server.json") && e.contains("not JSON"), "{e}");
    std::fs::write(
        &sidecar,
        json!({"limits": {"props": 1, "cache_config_info": 7}}).to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e = format!("{:#}", read_runs(std::slice::from_ref(&run)).expect_err("bad limits"));
    assert!(e.contains("run.jsonl.server.json") && e.contains("`limits`"), "{e}");

    // No sidecar: a note naming the path it looked for; the records are still read.
    std::fs::remove_file(&sidecar).unwrap_or_else(|e| panic!("{e}"));
    let runs = read_runs(std::slice::from_ref(&run)).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(runs.records.len(), 10);
    assert!(
        runs.notes.len() == 1
            && runs.notes[0].contains("no scrape sidecar")
            && runs.notes[0].contains(&sidecar.display().to_string()),
        "{:?}",
        runs.notes
    );
}

/// What the records and the sidecar's server report say against the profile's limits comes back as notes.
#[test]
fn the_runs_are_checked_against_the_limits() {
    let dir = tmp("check");
    let run = dir.join("busy.jsonl");
    // 10 requests 0.2 s apart, each decoding for 0.9 s: 5 decode at once.
    write_run(&run, 10, 0.2);
    let side = json!({"report": {"generation_tokens": 400.0, "running_max": 6.0, "prefix_cache_hit_rate": 0.9}});
    std::fs::write(dir.join("busy.jsonl.server.json"), side.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let runs = read_runs(std::slice::from_ref(&run)).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(runs.facts[0].peak_decoding, 5);
    let p = shared::engine::EngineProfile {
        max_num_seqs: 4,
        ..shared::engine::presets::by_name("llama-3-8b-1xh100").unwrap_or_else(|| panic!("preset"))
    };
    let notes = check_runs(&runs.facts, &p);
    let has = |s: &str| notes.iter().any(|n| n.contains(s) && n.contains("busy.jsonl"));
    assert!(has("5 requests decoded at once, more than max_num_seqs 4"), "{notes:?}");
    assert!(has("the server reported 6 requests running"), "{notes:?}");
    assert!(has("2.00x the records' tokens") && has("other traffic"), "{notes:?}");
    assert!(
        has("hit rate 0.900 differs from the records' cached share 0.500"),
        "{notes:?}"
    );
    assert_eq!(notes.len(), 4, "{notes:?}");
}
