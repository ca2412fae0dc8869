//! What `loadshape calibrate --url` reads from a server about its limits: llama.cpp's `/props` and vLLM's
//! `vllm:cache_config_info` (bodies as those servers send them).

use loadshape::cmd::calibrate::{Discovered, parse_cache_config, parse_props};
use serde_json::json;

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
