//! A session's conversation as agents send it (issue #18, item 3): a system prompt, the task as a user message,
//! then per step the model's reply and the tool output.
//!
//! [`Conversation`] holds one session's text once, as the byte string `/v1/completions` sends ([`Conversation::flat`]:
//! the seed's growth, `system + "\n\nTask: …\n"` then per step `reply + "\n\n[tool output]\n" + tool + "\n"`), and
//! knows where each piece lies in it, so the message lists of `/v1/chat/completions` and of the Anthropic Messages
//! API are written from the same pieces without a copy of the text. Every earlier message is written byte for byte
//! as before at each step: the request bodies only ever grow at the end, so whatever the server's chat template
//! makes of them, a template that renders earlier turns the same way keeps the prefix cache warm.
//!
//! [`ToolResults`] (`--tool-results`) says how a tool output goes back: as a `tool` message answering an assistant
//! tool call (OpenAI: `tool_calls` with an `id`, then `{"role":"tool","tool_call_id":…}`; Anthropic: a `tool_use`
//! block, then a user message with a `tool_result` block), or as a plain user message. The exact bodies are in
//! docs/replay.md, "Conversations as agents send them".

use std::ops::Range;

/// How a session's tool outputs are sent (`--tool-results`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolResults {
    /// After an assistant message with a tool call: a `tool` message (OpenAI) or a `tool_result` block (Anthropic).
    #[default]
    Tool,
    /// As a user message `"[tool output]\n" + output` after a plain assistant message.
    User,
}

/// The one tool every assistant turn calls (its name in `tool_calls`/`tool_use`, and the Anthropic `tools` entry).
pub const TOOL_NAME: &str = "run";

/// The `tools` array sent with Anthropic requests whose history holds `tool_use` blocks (the Messages API refuses
/// `tool_use`/`tool_result` blocks without a tool definition).
pub const ANTHROPIC_TOOLS: &str = r#"[{"name":"run","description":"Run a command in the repository and return its output.","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]"#;

/// The header put before a tool output sent as a user message (and into the flat text).
const TOOL_HEADER: &str = "\n\n[tool output]\n";

/// One session's conversation (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    /// The whole text as `/v1/completions` sends it.
    flat: String,
    /// `flat[..system_end]` is the system prompt.
    system_end: usize,
    /// The task (the first user message), without the line breaks around it in the flat text.
    task: Range<usize>,
    /// Per step: the reply and the tool output, as ranges of `flat`.
    turns: Vec<(Range<usize>, Range<usize>)>,
    /// Per step: the reply's reasoning echoed into the conversation (just before the reply in `flat`), or an empty
    /// range (issue #44: `reasoning.echo`).
    reasoning: Vec<Range<usize>>,
}

impl Conversation {
    /// `system` (the session's base context) and the task line (`"\n\nTask: …\n"`), as the seed sends them.
    pub fn new(system: String, task_line: &str) -> Self {
        let mut flat = system;
        let system_end = flat.len();
        flat.push_str(task_line);
        let trimmed = task_line.trim();
        let start = system_end + task_line.find(trimmed).unwrap_or(0);
        Conversation {
            task: start..start + trimmed.len(),
            flat,
            system_end,
            turns: Vec::new(),
            reasoning: Vec::new(),
        }
    }

    /// After a step: the model's reply and the tool's output.
    pub fn push_turn(&mut self, reply: &str, tool_output: &str) {
        self.push_turn_with_reasoning("", reply, tool_output);
    }

    /// After a step: the model's reasoning (echoed: before the reply in the flat text, as `reasoning_content` on
    /// chat, a `thinking` block on Messages; empty: none), its reply and the tool's output.
    pub fn push_turn_with_reasoning(&mut self, reasoning: &str, reply: &str, tool_output: &str) {
        let z0 = self.flat.len();
        self.flat.push_str(reasoning);
        self.reasoning.push(z0..self.flat.len());
        let r0 = self.flat.len();
        self.flat.push_str(reply);
        let r = r0..self.flat.len();
        self.flat.push_str(TOOL_HEADER);
        let t0 = self.flat.len();
        self.flat.push_str(tool_output);
        let t = t0..self.flat.len();
        self.flat.push('\n');
        self.turns.push((r, t));
    }

    /// The text as one prompt (`/v1/completions`): system, task line, then each reply and tool output.
    pub fn flat(&self) -> &str {
        &self.flat
    }

    pub fn system(&self) -> &str {
        &self.flat[..self.system_end]
    }

    pub fn task(&self) -> &str {
        &self.flat[self.task.clone()]
    }

    /// The steps so far: (reply, tool output).
    pub fn turns(&self) -> impl Iterator<Item = (&str, &str)> {
        self.turns
            .iter()
            .map(|(r, t)| (&self.flat[r.clone()], &self.flat[t.clone()]))
    }

    /// Step `k`'s echoed reasoning ("" when none).
    fn reasoning_of(&self, k: usize) -> &str {
        self.reasoning.get(k).map_or("", |z| &self.flat[z.clone()])
    }

    /// Characters of text in the conversation (the record's `prompt_chars`).
    pub fn chars(&self) -> u64 {
        self.flat.len() as u64
    }

    /// The id of step `k`'s tool call: 9 letters and digits (`call00003`), the form the strictest templates
    /// (Mistral's) accept, and valid as an Anthropic `tool_use` id.
    pub fn call_id(k: usize) -> String {
        format!("call{k:05}")
    }

    /// The OpenAI chat `messages` array (written as JSON into `out`): system, the task as a user message, then per
    /// step an assistant message with the reply and either a tool call answered by a `tool` message, or a user
    /// message with the tool output.
    pub fn write_chat_messages(&self, out: &mut Vec<u8>, tool_results: ToolResults) {
        out.extend_from_slice(b"[{\"role\":\"system\",\"content\":");
        json_str(out, self.system());
        out.extend_from_slice(b"},{\"role\":\"user\",\"content\":");
        json_str(out, self.task());
        out.push(b'}');
        for (k, (reply, tool)) in self.turns().enumerate() {
            out.extend_from_slice(b",{\"role\":\"assistant\",");
            let reasoning = self.reasoning_of(k);
            if !reasoning.is_empty() {
                out.extend_from_slice(b"\"reasoning_content\":");
                json_str(out, reasoning);
                out.push(b',');
            }
            out.extend_from_slice(b"\"content\":");
            json_str(out, reply);
            match tool_results {
                ToolResults::Tool => {
                    let id = Self::call_id(k);
                    out.extend_from_slice(b",\"tool_calls\":[{\"id\":");
                    json_str(out, &id);
                    out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
                    json_str(out, TOOL_NAME);
                    out.extend_from_slice(b",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":");
                    json_str(out, &id);
                    out.extend_from_slice(b",\"content\":");
                    json_str(out, tool);
                    out.push(b'}');
                }
                ToolResults::User => {
                    out.extend_from_slice(b"},{\"role\":\"user\",\"content\":");
                    json_str(out, &user_tool_text(tool));
                    out.push(b'}');
                }
            }
        }
        out.push(b']');
    }

    /// The Anthropic Messages fields (written as JSON object members into `out`, each with its leading comma):
    /// top-level `system`, `messages` alternating user and assistant (the task first; per step the reply, with a
    /// `tool_use` block and then a user message with the `tool_result` block, or a plain reply and a user message
    /// with the tool output), and `tools` when the history holds `tool_use` blocks.
    pub fn write_anthropic(&self, out: &mut Vec<u8>, tool_results: ToolResults) {
        out.extend_from_slice(b",\"system\":");
        json_str(out, self.system());
        out.extend_from_slice(b",\"messages\":[{\"role\":\"user\",\"content\":");
        json_str(out, self.task());
        out.push(b'}');
        for (k, (reply, tool)) in self.turns().enumerate() {
            out.extend_from_slice(b",{\"role\":\"assistant\",\"content\":");
            let reasoning = self.reasoning_of(k);
            // Echoed reasoning goes first, as a `thinking` block (a content list even for a plain reply).
            let thinking = |out: &mut Vec<u8>| {
                out.extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":");
                json_str(out, reasoning);
                out.extend_from_slice(b"},");
            };
            match tool_results {
                ToolResults::Tool => {
                    let id = Self::call_id(k);
                    out.push(b'[');
                    if !reasoning.is_empty() {
                        thinking(out);
                    }
                    // The Messages API refuses empty text blocks: a step that produced no text sends the call alone.
                    if !reply.is_empty() {
                        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                        json_str(out, reply);
                        out.extend_from_slice(b"},");
                    }
                    out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
                    json_str(out, &id);
                    out.extend_from_slice(b",\"name\":");
                    json_str(out, TOOL_NAME);
                    out.extend_from_slice(
                        b",\"input\":{}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":",
                    );
                    json_str(out, &id);
                    out.extend_from_slice(b",\"content\":");
                    json_str(out, tool);
                    out.extend_from_slice(b"}]}");
                }
                ToolResults::User => {
                    if reasoning.is_empty() {
                        json_str(out, reply);
                    } else {
                        out.push(b'[');
                        thinking(out);
                        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                        json_str(out, reply);
                        out.extend_from_slice(b"}]");
                    }
                    out.extend_from_slice(b"},{\"role\":\"user\",\"content\":");
                    json_str(out, &user_tool_text(tool));
                    out.push(b'}');
                }
            }
        }
        out.push(b']');
        if tool_results == ToolResults::Tool && !self.turns.is_empty() {
            out.extend_from_slice(b",\"tools\":");
            out.extend_from_slice(ANTHROPIC_TOOLS.as_bytes());
        }
    }
}

impl Conversation {
    /// The Responses API's `input` (written as a JSON object member into `out`, with its leading comma): the system
    /// prompt and the task as messages, then per step the reply as an assistant message (`"type": "message"`, which
    /// the API leaves optional and llama.cpp requires of an assistant's) and either a
    /// `function_call` answered by a `function_call_output` item, or a user message with the tool output; `tools`
    /// (the one function) when the history holds calls. Echoed reasoning goes before its reply as a `reasoning`
    /// item (`{"type": "reasoning", "id": "rs_K", "summary": [], "content": [{"type": "reasoning_text", "text"}]}`,
    /// the shape vLLM streams and reads back; the id is the step's, not the server's).
    pub fn write_responses_input(&self, out: &mut Vec<u8>, tool_results: ToolResults) {
        out.extend_from_slice(b",\"input\":[{\"role\":\"system\",\"content\":");
        json_str(out, self.system());
        out.extend_from_slice(b"},{\"role\":\"user\",\"content\":");
        json_str(out, self.task());
        out.push(b'}');
        for (k, (reply, tool)) in self.turns().enumerate() {
            let reasoning = self.reasoning_of(k);
            if !reasoning.is_empty() {
                out.extend_from_slice(b",{\"type\":\"reasoning\",\"id\":");
                json_str(out, &format!("rs_{k}"));
                out.extend_from_slice(b",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":");
                json_str(out, reasoning);
                out.extend_from_slice(b"}]}");
            }
            out.extend_from_slice(b",{\"type\":\"message\",\"role\":\"assistant\",\"content\":");
            json_str(out, reply);
            out.push(b'}');
            match tool_results {
                ToolResults::Tool => {
                    let id = Self::call_id(k);
                    out.extend_from_slice(b",{\"type\":\"function_call\",\"call_id\":");
                    json_str(out, &id);
                    out.extend_from_slice(b",\"name\":");
                    json_str(out, TOOL_NAME);
                    out.extend_from_slice(b",\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":");
                    json_str(out, &id);
                    out.extend_from_slice(b",\"output\":");
                    json_str(out, tool);
                    out.push(b'}');
                }
                ToolResults::User => {
                    out.extend_from_slice(b",{\"role\":\"user\",\"content\":");
                    json_str(out, &user_tool_text(tool));
                    out.push(b'}');
                }
            }
        }
        out.push(b']');
        if tool_results == ToolResults::Tool && !self.turns.is_empty() {
            out.extend_from_slice(b",\"tools\":");
            out.extend_from_slice(RESPONSES_TOOLS.as_bytes());
        }
    }
}

/// The `tools` array sent with Responses requests whose input holds `function_call` items.
pub const RESPONSES_TOOLS: &str = r#"[{"type":"function","name":"run","description":"Run a command in the repository and return its output.","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}]"#;

/// A tool output sent as a user message: `"[tool output]\n" + output`.
fn user_tool_text(tool: &str) -> String {
    let mut s = String::with_capacity(tool.len() + 16);
    s.push_str(TOOL_HEADER.trim_start());
    s.push_str(tool);
    s
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a `&str` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const TASK: &str = "\n\nTask: fix it.\n";

    fn convo() -> Conversation {
        let mut c = Conversation::new("base \"ctx\"".into(), TASK);
        c.push_turn(" the shard", "out\n1");
        c.push_turn(" patch", "out 2");
        c
    }

    #[test]
    fn flat_text_is_the_seeds_growth() {
        let c = convo();
        assert_eq!(
            c.flat(),
            "base \"ctx\"\n\nTask: fix it.\n the shard\n\n[tool output]\nout\n1\n patch\n\n[tool output]\nout 2\n"
        );
        assert_eq!((c.system(), c.task()), ("base \"ctx\"", "Task: fix it."));
        assert_eq!(c.chars(), c.flat().len() as u64);
    }

    #[test]
    fn chat_messages_with_tool_calls_and_as_user_messages() {
        let c = convo();
        let mut out = Vec::new();
        c.write_chat_messages(&mut out, ToolResults::Tool);
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        let call = |id: &str| json!([{"id": id, "type": "function", "function": {"name": "run", "arguments": "{}"}}]);
        assert_eq!(
            v,
            json!([
                {"role": "system", "content": "base \"ctx\""},
                {"role": "user", "content": "Task: fix it."},
                {"role": "assistant", "content": " the shard", "tool_calls": call("call00000")},
                {"role": "tool", "tool_call_id": "call00000", "content": "out\n1"},
                {"role": "assistant", "content": " patch", "tool_calls": call("call00001")},
                {"role": "tool", "tool_call_id": "call00001", "content": "out 2"},
            ])
        );
        let mut out = Vec::new();
        c.write_chat_messages(&mut out, ToolResults::User);
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v,
            json!([
                {"role": "system", "content": "base \"ctx\""},
                {"role": "user", "content": "Task: fix it."},
                {"role": "assistant", "content": " the shard"},
                {"role": "user", "content": "[tool output]\nout\n1"},
                {"role": "assistant", "content": " patch"},
                {"role": "user", "content": "[tool output]\nout 2"},
            ])
        );
    }

    #[test]
    fn anthropic_fields_with_tool_use_and_as_user_messages() {
        let c = convo();
        let parse = |tr| {
            let mut out = b"{\"model\":\"m\"".to_vec();
            c.write_anthropic(&mut out, tr);
            out.push(b'}');
            serde_json::from_slice::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
        };
        let v = parse(ToolResults::Tool);
        assert_eq!(v["system"], "base \"ctx\"");
        assert_eq!(v["tools"][0]["name"], "run");
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": "Task: fix it."},
                {"role": "assistant", "content": [
                    {"type": "text", "text": " the shard"},
                    {"type": "tool_use", "id": "call00000", "name": "run", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call00000", "content": "out\n1"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": " patch"},
                    {"type": "tool_use", "id": "call00001", "name": "run", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call00001", "content": "out 2"}]},
            ])
        );
        let v = parse(ToolResults::User);
        assert!(v.get("tools").is_none());
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": "Task: fix it."},
                {"role": "assistant", "content": " the shard"},
                {"role": "user", "content": "[tool output]\nout\n1"},
                {"role": "assistant", "content": " patch"},
                {"role": "user", "content": "[tool output]\nout 2"},
            ])
        );
        // No step yet: no tools; an empty reply sends the tool call alone.
        let mut first = Conversation::new("s".into(), TASK);
        let mut out = b"{\"x\":1".to_vec();
        first.write_anthropic(&mut out, ToolResults::Tool);
        out.push(b'}');
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        assert!(v.get("tools").is_none());
        first.push_turn("", "o");
        let mut out = b"{\"x\":1".to_vec();
        first.write_anthropic(&mut out, ToolResults::Tool);
        out.push(b'}');
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["messages"][1]["content"][0]["type"], "tool_use");
    }

    /// Echoed reasoning: before the reply in the flat text, `reasoning_content` on chat, a `thinking` block on
    /// Messages, a `reasoning` item on Responses; a turn without it is written as before.
    #[test]
    fn echoed_reasoning_in_each_form() {
        let mut c = Conversation::new("sys".into(), TASK);
        c.push_turn_with_reasoning("think hard", " fix", "out");
        c.push_turn(" again", "out 2");
        assert_eq!(
            c.flat(),
            "sys\n\nTask: fix it.\nthink hard fix\n\n[tool output]\nout\n again\n\n[tool output]\nout 2\n"
        );
        assert_eq!(c.turns().next(), Some((" fix", "out")));
        let mut out = Vec::new();
        c.write_chat_messages(&mut out, ToolResults::User);
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v[2],
            json!({"role": "assistant", "reasoning_content": "think hard", "content": " fix"})
        );
        assert_eq!(v[4], json!({"role": "assistant", "content": " again"}));
        for tr in [ToolResults::Tool, ToolResults::User] {
            let mut out = b"{\"x\":1".to_vec();
            c.write_anthropic(&mut out, tr);
            out.push(b'}');
            let v: Value =
                serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
            assert_eq!(
                v["messages"][1]["content"][0],
                json!({"type": "thinking", "thinking": "think hard"}),
                "{tr:?}"
            );
            assert_eq!(v["messages"][1]["content"][1]["type"], "text", "{tr:?}");
        }
        let mut out = b"{\"x\":1".to_vec();
        c.write_responses_input(&mut out, ToolResults::User);
        out.push(b'}');
        let v: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v["input"][2],
            json!({"type": "reasoning", "id": "rs_0", "summary": [],
                   "content": [{"type": "reasoning_text", "text": "think hard"}]})
        );
        assert_eq!(
            v["input"][3],
            json!({"type": "message", "role": "assistant", "content": " fix"})
        );
        assert_eq!(
            v["input"][5],
            json!({"type": "message", "role": "assistant", "content": " again"}),
            "no reasoning item"
        );
    }

    #[test]
    fn responses_input_with_function_calls_and_as_user_messages() {
        let c = convo();
        let parse = |tr| {
            let mut out = b"{\"model\":\"m\"".to_vec();
            c.write_responses_input(&mut out, tr);
            out.push(b'}');
            serde_json::from_slice::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
        };
        let v = parse(ToolResults::Tool);
        assert_eq!(v["tools"][0]["name"], "run");
        assert_eq!(
            v["input"],
            json!([
                {"role": "system", "content": "base \"ctx\""},
                {"role": "user", "content": "Task: fix it."},
                {"type": "message", "role": "assistant", "content": " the shard"},
                {"type": "function_call", "call_id": "call00000", "name": "run", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call00000", "output": "out\n1"},
                {"type": "message", "role": "assistant", "content": " patch"},
                {"type": "function_call", "call_id": "call00001", "name": "run", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call00001", "output": "out 2"},
            ])
        );
        let v = parse(ToolResults::User);
        assert!(v.get("tools").is_none());
        assert_eq!(
            v["input"][3],
            json!({"role": "user", "content": "[tool output]\nout\n1"})
        );
    }

    /// Each step's body is the previous one's with messages added at the end: earlier messages are byte-stable.
    #[test]
    fn earlier_messages_are_byte_stable() {
        for tr in [ToolResults::Tool, ToolResults::User] {
            let mut c = Conversation::new("sys".into(), TASK);
            let mut prev = Vec::new();
            for k in 0..4 {
                let mut now = Vec::new();
                c.write_chat_messages(&mut now, tr);
                if k > 0 {
                    // All but the closing bracket of the previous list is a prefix of this one.
                    assert!(now.starts_with(&prev[..prev.len() - 1]), "{tr:?} step {k}");
                }
                prev = now;
                c.push_turn(&format!(" reply {k}"), &format!("tool {k}"));
            }
        }
    }
}
