//! What the server says about its limits, asked once before a run and kept in `<out>.server.json`'s `limits`
//! ([`ServerLimits`]), so that `loadshape calibrate --from RUN.jsonl` reads the same limits `calibrate --url` asks
//! the live server for: llama.cpp's `/props` (`total_slots`, the per-slot `n_ctx`, `n_batch` when given) and vLLM's
//! (and the sim-server's) `vllm:cache_config_info` line of `/metrics` (`block_size`, `num_gpu_blocks`). What they
//! mean is `cmd::calibrate`'s to say (`parse_props`, `parse_cache_config`); here they are only kept, in the
//! server's own words.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `<out>.server.json`'s `limits`: the server's own words about its limits; each part absent when it did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerLimits {
    /// llama.cpp's `/props`, the fields limits are read from: `total_slots`, `n_ctx` and `n_batch`, at the top level
    /// and under `default_generation_settings` (the rest of `/props`, the chat template among it, is not kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub props: Option<Value>,
    /// The `vllm:cache_config_info{...} 1` line of `/metrics`, verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_config_info: Option<String>,
    /// vLLM's `/v1/models`: the first served model's `max_model_len` (prompt + output tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}

/// The `/props` fields kept ([`ServerLimits::props`]).
const PROPS_KEYS: [&str; 3] = ["total_slots", "n_ctx", "n_batch"];

impl ServerLimits {
    /// Nothing said.
    pub fn is_empty(&self) -> bool {
        self.props.is_none() && self.cache_config_info.is_none() && self.max_model_len.is_none()
    }

    /// The limit fields of a `/props` body; `None` when it has none of them (not llama.cpp).
    pub fn props_of(v: &Value) -> Option<Value> {
        let pick = |o: &Map<String, Value>| -> Map<String, Value> {
            PROPS_KEYS
                .iter()
                .filter_map(|&k| o.get(k).filter(|x| x.is_number()).map(|x| (k.to_string(), x.clone())))
                .collect()
        };
        let top = v.as_object()?;
        let mut out = pick(top);
        if let Some(gs) = top.get("default_generation_settings").and_then(Value::as_object) {
            let inner = pick(gs);
            if !inner.is_empty() {
                out.insert("default_generation_settings".into(), Value::Object(inner));
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// The first served model's `max_model_len` of a `/v1/models` body (vLLM's field); `None` when none says.
    pub fn max_model_len_of(v: &Value) -> Option<u64> {
        v.get("data")?
            .as_array()?
            .iter()
            .find_map(|m| m.get("max_model_len")?.as_u64())
            .filter(|&l| l > 0)
    }

    /// The `vllm:cache_config_info` line of a `/metrics` exposition.
    pub fn cache_config_of(metrics: &str) -> Option<String> {
        metrics
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("vllm:cache_config_info{"))
            .map(str::to_owned)
    }
}

/// Asks `{origin}/props` and `metrics_url` (5 s each); what does not answer is left out.
pub async fn fetch(http: &reqwest::Client, origin: &str, metrics_url: &str, api_key: Option<&str>) -> ServerLimits {
    let get = |url: String| async move {
        let mut req = http.get(&url).timeout(Duration::from_secs(5));
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        match req.send().await {
            Ok(resp) if resp.status().is_success() => resp.text().await.ok(),
            _ => None,
        }
    };
    let props = get(format!("{origin}/props"))
        .await
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| ServerLimits::props_of(&v));
    let cache_config_info = get(metrics_url.to_string())
        .await
        .and_then(|t| ServerLimits::cache_config_of(&t));
    let max_model_len = get(format!("{origin}/v1/models"))
        .await
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| ServerLimits::max_model_len_of(&v));
    ServerLimits {
        props,
        cache_config_info,
        max_model_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_vllms_max_model_len_from_the_models_list() {
        let models = json!({"object": "list", "data": [{"id": "m", "max_model_len": 32768}]});
        assert_eq!(ServerLimits::max_model_len_of(&models), Some(32768));
        // llama.cpp's list has no such field; a zero is not a limit.
        assert_eq!(
            ServerLimits::max_model_len_of(&json!({"data": [{"id": "m", "meta": {"n_ctx_train": 4096}}]})),
            None
        );
        assert_eq!(
            ServerLimits::max_model_len_of(&json!({"data": [{"max_model_len": 0}]})),
            None
        );
    }

    #[test]
    fn keeps_only_the_limit_fields() {
        let props = json!({"default_generation_settings": {"n_ctx": 8192, "params": {"n_predict": -1}},
            "total_slots": 4, "chat_template": "{{ x }}", "model_path": "/m.gguf"});
        assert_eq!(
            ServerLimits::props_of(&props),
            Some(json!({"total_slots": 4, "default_generation_settings": {"n_ctx": 8192}}))
        );
        assert_eq!(ServerLimits::props_of(&json!({"object": "list"})), None);
        assert_eq!(ServerLimits::props_of(&json!([1, 2])), None);
        let text =
            "# HELP x\nvllm:num_requests_running 0\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"9\"} 1\n";
        assert_eq!(
            ServerLimits::cache_config_of(text).as_deref(),
            Some("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"9\"} 1")
        );
        assert_eq!(ServerLimits::cache_config_of("llamacpp:requests_processing 0\n"), None);
    }
}
