//! Running traffic: agent sessions (the seed's `agent_replay.py`) and open/closed-loop requests from a scenario.
//!
//! **Sessions** ([`run_sessions`]): slot `s` starts `s × stagger` after the origin and runs instances of its session
//! one after another (with `respawn`) or once. Instance `(s, i)`'s shape comes from
//! `shared::workload::SessionWorkload::plan(s, i, seed)` (the same draw the simulator uses); its text from
//! `shared::filler` (structure seed + per-run nonce): `base + "\n\nTask: …\n"`, then after each step
//! `+ reply + "\n\n[tool output]\n" + tool filler + "\n"`, exactly the seed's growth, with `think_s[k]` after step
//! `k`. That text is what `/v1/completions` gets; chat and Messages get the same pieces as a message list
//! ([`Conversation`]: the base as the system prompt, the task as a user message, each reply as an assistant
//! message and each tool output as the tool's answer or a user message, `--tool-results`). A slot whose instance
//! completes no step counts toward its fail streak; `max_fail_streak` in a row aborts the run (exit 2), with a backoff of `min(30, 2·streak)` s between failing instances; a slot that finishes an instance
//! in under a second waits one second (the seed's guards against hammering a dead server).
//!
//! **Open loop** ([`run_open_loop`]): each request is sent at its arrival time; **closed loop**
//! ([`run_closed_loop`]): `users` workers each send the next request when their previous one ends (plus think).
//!
//! **Stopping** ([`Stops`]): three levels, each implying the ones before it: no new sessions (drain), no new
//! steps/requests, and cut (in-flight requests are cancelled, each still gets its record, marked failed with
//! `error: "cut: …"`). Every request that was started gets exactly one record line.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shared::filler::{Filler, FillerKind, TokenScale};
use shared::record::{FrameClock, RECORD_SCHEMA_VERSION, RequestRecord};
use shared::workload::{SessionWorkload, Shard};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{Client, LiveCounters, Prompt, RequestOutcome};
use super::conversation::{Conversation, ToolResults};
use super::fleet::LiveRouter;
use super::records::RecordSink;

/// The seed's task line, appended to every session's base context.
pub const TASK_LINE: &str = "\n\nTask: find why the loader refuses the shard and propose a patch.\n";

/// The three stop levels (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Stops {
    pub no_new_sessions: CancellationToken,
    pub no_new_steps: CancellationToken,
    pub cut: CancellationToken,
}

impl Stops {
    /// Stop starting sessions; running sessions go on (drain).
    pub fn stop_sessions(&self) {
        self.no_new_sessions.cancel();
    }

    /// Stop starting requests; in-flight ones finish.
    pub fn stop_steps(&self) {
        self.no_new_sessions.cancel();
        self.no_new_steps.cancel();
    }

    /// Cancel everything now; in-flight requests end with a "cut" record.
    pub fn cut(&self) {
        self.stop_steps();
        self.cut.cancel();
    }
}

/// Everything the traffic tasks share.
pub struct Ctx {
    pub client: Client,
    pub sink: Arc<RecordSink>,
    pub live: Arc<LiveCounters>,
    pub origin: Instant,
    pub stops: Stops,
    /// Set when the fail streak aborted the run.
    pub aborted: AtomicBool,
    /// Print one line above the progress display.
    pub log: Box<dyn Fn(&str) + Send + Sync>,
    /// Print a line per step (the seed's chatter), not only failures.
    pub verbose: bool,
    /// Requests started (each gets exactly one record).
    pub started: AtomicU64,
    /// Words of a block of `shared::workload::mooncake::EXPORT_BLOCK_TOKENS` designed prose tokens: each record's
    /// `prompt_block_hashes` cut the prompt there (0: none recorded).
    pub prompt_block_words: usize,
    /// Several target URLs (`--url` more than once): which one each request goes to. `None`: `client` alone.
    pub router: Option<LiveRouter>,
}

/// Where a request sits in the workload, for its record.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub session: u64,
    pub inst: u32,
    pub step: u32,
    pub steps_asked: u32,
    pub base_asked: u64,
    pub designed_cached_tokens: Option<u64>,
    /// The plan's prompt size, tokens (the record's `designed_prompt_tokens`).
    pub designed_prompt_tokens: Option<u64>,
    /// The session instance a fleet's `session_affinity` keeps on one replica: the request's own `(session, inst)`
    /// for a session step, the parent's for a sub-agent's (children go where their parent's prefix is cached, as
    /// in the simulator); `None` for open- and closed-loop requests.
    pub affinity: Option<(u64, u32)>,
    /// A sub-agent's step: the session it was forked from (the record's `parent`).
    pub parent: Option<u64>,
}

impl Ctx {
    /// Send one request (cut-aware), hand its record to the writer, and return the outcome.
    pub async fn request<'p>(
        &self,
        slot: Slot,
        prompt: impl Into<Prompt<'p>>,
        asked: u32,
        collect_text: bool,
    ) -> RequestOutcome {
        let prompt = prompt.into();
        self.started.fetch_add(1, Ordering::Relaxed);
        let text = match prompt {
            Prompt::Text(t) => t,
            Prompt::Conversation(c, _) => c.flat(),
        };
        // A fleet: the replica (counted as in flight there until the request ends).
        let routed = self.router.as_ref().map(|r| r.route(slot.affinity, text));
        let client = routed.as_ref().map_or(&self.client, |r| r.client());
        // A session step names its session (`x-session-id`), so a router in front of the server can keep it on one
        // replica.
        let session = slot.affinity.map(|(s, i)| format!("{s}-{i}"));
        let outcome = client
            .complete_in_session(
                prompt,
                asked,
                collect_text,
                &self.live,
                &self.stops.cut,
                session.as_deref(),
            )
            .await;
        let replica = routed.map(|r| r.replica as u32);
        let mut rec = to_record(&outcome, self.origin, slot, asked, prompt.chars());
        // The client's routing, else the replica a fleet behind the one URL says it routed to.
        rec.replica = replica.or(outcome.server_replica);
        if self.prompt_block_words > 0 {
            rec.prompt_block_hashes = shared::workload::mooncake::text_block_hashes(text, self.prompt_block_words);
        }
        if let Err(e) = self.sink.submit(rec) {
            (self.log)(&format!("could not write a record: {e:#}"));
        }
        outcome
    }
}

/// One record from one outcome.
pub fn to_record(o: &RequestOutcome, origin: Instant, slot: Slot, asked: u32, prompt_chars: u64) -> RequestRecord {
    RequestRecord {
        schema: RECORD_SCHEMA_VERSION,
        session: slot.session,
        inst: slot.inst,
        step: slot.step,
        steps_asked: slot.steps_asked,
        base_asked: slot.base_asked,
        ok: o.ok,
        t_submit: o.submitted.saturating_duration_since(origin).as_secs_f64(),
        ttft_s: o.ttft.map(|d| d.as_secs_f64()),
        wall_s: o.wall.as_secs_f64(),
        gen_tokens: o.gen_tokens,
        asked_tokens: u64::from(asked),
        prompt_tokens: o.usage.prompt_tokens,
        cached_tokens: o.usage.cached_tokens,
        designed_cached_tokens: slot.designed_cached_tokens,
        designed_prompt_tokens: slot.designed_prompt_tokens,
        sse_frames: o.frames,
        prompt_chars,
        queue_s: None,
        itl: o.itl,
        finish_reason: o.finish_reason.clone(),
        usage_source: o.usage_source,
        rx_clock: o.ttft.map(|_| {
            if o.first_frame_kernel {
                FrameClock::Kernel
            } else {
                FrameClock::User
            }
        }),
        retries: o.retry_statuses.len() as u32,
        retry_statuses: o.retry_statuses.clone(),
        failure: o.failure,
        error: o.error.clone(),
        prompt_block_hashes: Vec::new(),
        replica: None,
        spec: o.spec,
        kv_transfer_ms: o.kv_transfer_ms,
        reasoning_tokens: o.reasoning_tokens,
        ttft_content_s: o.ttft_content.map(|d| d.as_secs_f64()),
        parent: slot.parent,
    }
}

/// How a tokenizer-matched session sizes its tool outputs so that each prompt the server counts is the designed
/// one. The server counts more than the filler it was sized for: the chat template around every message, the
/// `[tool output]` header, the reply re-tokenized from its text. After step k the server's count `P_k` of a prompt
/// designed at `D_k` tokens gives the excess `e_k = P_k − D_k`; the tool output that ends the next prompt is made
/// `e_k + ô` tokens shorter, `ô` the per-step overhead seen last (`e_k − e_{k−1} + c_{k−1}`, `c` the correction
/// applied), so the excess does not accumulate over the steps. A step without usage (llama.cpp's Messages stream
/// sometimes leaves it out) is taken to have the excess the last one predicts (`e_{k−1} − c_{k−1} + ô`); with no
/// usage seen yet the size is as designed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ToolSizing {
    /// The previous step's excess and the correction applied after it.
    last: Option<(i64, i64)>,
    /// The per-step overhead seen last.
    overhead: i64,
}

impl ToolSizing {
    /// Tokens of the tool output to send after a step whose prompt the server counted `excess` tokens over its
    /// design (`None`: no usage), for a designed `tool_tokens`.
    pub fn next(&mut self, excess: Option<i64>, tool_tokens: u64) -> u64 {
        let predicted = self.last.map(|(e, c)| e - c + self.overhead);
        let Some(e) = excess.or(predicted) else {
            return tool_tokens;
        };
        if let Some((prev_e, prev_c)) = self.last {
            self.overhead = e - prev_e + prev_c;
        }
        let c = e + self.overhead;
        let tokens = (tool_tokens as i64 - c).max(0);
        self.last = Some((e, tool_tokens as i64 - tokens));
        tokens as u64
    }
}

/// Sleep `d`, or return early (false) when `token` is cancelled.
async fn sleep_or(token: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => true,
        () = token.cancelled() => false,
    }
}

/// Session settings beyond the workload itself.
#[derive(Debug, Clone)]
pub struct SessionRun {
    pub workload: SessionWorkload,
    /// Structure seed: shapes (`plan`) and filler word choice.
    pub seed: u64,
    /// Content nonce: makes the text unique per run.
    pub nonce: u64,
    pub max_fail_streak: u32,
    /// Sizes the filler for the target's tokenizer ([`TokenScale::ONE`]: the seed's word counts).
    pub scale: TokenScale,
    /// The target's tokenizer was measured (`--match-tokenizer`): sessions send balanced filler and size each tool
    /// output so that the next prompt the server counts is the designed one ([`ToolSizing`]).
    pub match_prompts: bool,
    /// No new instance starts after this.
    pub deadline: Instant,
    /// How tool outputs are sent on `chat` and `messages` (`--tool-results`; `/v1/completions` sends the flat text).
    pub tool_results: ToolResults,
    /// The slots this process runs (`--shard`): slot `s` with `s mod count == index`, under its global number.
    pub shard: Shard,
}

/// Run agent sessions until every slot is done (or the stops say so).
pub async fn run_sessions(ctx: Arc<Ctx>, run: Arc<SessionRun>) {
    let mut workers = JoinSet::new();
    let slots = run.workload.slot_count();
    let stagger = run.workload.stagger_s.max(0.0);
    for slot in run.shard.slots(slots) {
        // Slot `s` starts `s × stagger` after the origin (its global number: a shard's slots start when they
        // would in the single process).
        let at = ctx.origin + Duration::try_from_secs_f64(stagger * f64::from(slot)).unwrap_or(Duration::ZERO);
        if slot > 0 {
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {}
                () = ctx.stops.no_new_sessions.cancelled() => break,
            }
        }
        if ctx.stops.no_new_sessions.is_cancelled() || Instant::now() > run.deadline {
            break;
        }
        workers.spawn(slot_worker(ctx.clone(), run.clone(), slot));
    }
    while workers.join_next().await.is_some() {}
}

/// A slot's session instances, one after another; sub-agents not waited for run on past their parent's instance
/// (the slot's next instance does not wait for them, as in the simulator) and the slot ends when they have.
async fn slot_worker(ctx: Arc<Ctx>, run: Arc<SessionRun>, slot: u32) {
    let mut detached = Vec::new();
    slot_instances(&ctx, &run, slot, &mut detached).await;
    for h in detached {
        let _ = h.await;
    }
}

async fn slot_instances(
    ctx: &Arc<Ctx>,
    run: &Arc<SessionRun>,
    slot: u32,
    detached: &mut Vec<tokio::task::JoinHandle<String>>,
) {
    let mut streak = 0u32;
    // Sub-agent fan-outs so far, over the slot's instances (the children's record `inst`).
    let mut fanouts = 0u32;
    for inst in 0u32.. {
        if ctx.stops.no_new_sessions.is_cancelled() || Instant::now() > run.deadline {
            return;
        }
        let t_inst = Instant::now();
        detached.retain(|h| !h.is_finished());
        let done_steps = session_steps(ctx, run, slot, inst, &mut fanouts, detached).await;
        if !run.workload.respawn {
            return;
        }
        let progressed = done_steps > 0;
        streak = if progressed { 0 } else { streak + 1 };
        if streak >= run.max_fail_streak.max(1) {
            (ctx.log)(&format!(
                "[s{slot}] {streak} consecutive sessions made no progress -- stopping the run"
            ));
            ctx.aborted.store(true, Ordering::Relaxed);
            ctx.stops.cut();
            return;
        }
        let pause = if !progressed {
            Some(Duration::from_secs_f64((2.0 * f64::from(streak)).min(30.0)))
        } else if t_inst.elapsed() < Duration::from_secs(1) {
            Some(Duration::from_secs(1))
        } else {
            None
        };
        if let Some(p) = pause
            && !sleep_or(&ctx.stops.no_new_sessions, p).await
        {
            return;
        }
    }
}

/// The steps of one session instance; returns the number that completed. Sub-agents not waited for go to
/// `detached`.
async fn session_steps(
    ctx: &Arc<Ctx>,
    run: &Arc<SessionRun>,
    slot: u32,
    inst: u32,
    fanouts: &mut u32,
    detached: &mut Vec<tokio::task::JoinHandle<String>>,
) -> u32 {
    let plan = run.workload.plan(slot, inst, run.seed);
    let mut filler = Filler::new(run.seed, run.nonce)
        .with_scale(run.scale)
        .stream(slot, inst);
    let base_kind = FillerKind::for_slot(slot);
    let base = if run.match_prompts {
        filler.balanced_text(plan.base_tokens, base_kind)
    } else {
        filler.text(plan.base_tokens, base_kind)
    };
    let mut convo = Conversation::new(base, TASK_LINE);
    let mut sizing = ToolSizing::default();
    if ctx.verbose {
        (ctx.log)(&format!(
            "[s{slot}#{inst}] base ~{} tokens, {} steps",
            plan.base_tokens, plan.steps
        ));
    }
    let mut done = 0;
    let mut prev_prompt_tokens: Option<u64> = None;
    for step in 0..plan.steps {
        if ctx.stops.no_new_steps.is_cancelled() {
            return done;
        }
        // The reply and, with hidden reasoning, its reasoning tokens: a forced length counts both.
        let asked = if (step as usize) < plan.gen_tokens.len() {
            plan.output_tokens(step)
        } else {
            run.workload.gen_tokens
        };
        // Designed cacheable part: the previous prompt (server-counted when the server said) plus its reply as the
        // prompt carries it; nothing after a compaction.
        let designed = if step == 0 {
            Some(0)
        } else {
            let prev = prev_prompt_tokens.unwrap_or_else(|| plan.prompt_tokens(step - 1));
            Some(plan.designed_cached_after(prev, step - 1, plan.compacted(step)))
        };
        let s = Slot {
            session: u64::from(slot),
            inst,
            step,
            steps_asked: plan.steps,
            base_asked: plan.base_tokens,
            designed_cached_tokens: designed,
            designed_prompt_tokens: Some(plan.prompt_tokens(step)),
            affinity: Some((u64::from(slot), inst)),
            parent: None,
        };
        let o = ctx
            .request(s, Prompt::Conversation(&convo, run.tool_results), asked, true)
            .await;
        if !o.ok {
            (ctx.log)(&format!(
                "[s{slot}#{inst} step{step}] {}",
                o.error
                    .as_deref()
                    .unwrap_or("failed")
                    .chars()
                    .take(160)
                    .collect::<String>()
            ));
            return done;
        }
        done += 1;
        prev_prompt_tokens = o.usage.prompt_tokens;
        if ctx.verbose {
            (ctx.log)(&format!(
                "[s{slot}#{inst} step{step}/{}] prompt~{} gen {} ttft {} wall {:.1}s",
                plan.steps,
                o.usage.prompt_tokens.map_or("?".into(), |p| p.to_string()),
                o.gen_tokens,
                o.ttft.map_or("None".into(), |t| format!("{:.2}", t.as_secs_f64())),
                o.wall.as_secs_f64()
            ));
        }
        // The reply and a synthetic tool result both become part of the next prompt (one more assistant message and
        // tool output on chat and messages; the seed's appended text on completions).
        let tool = if run.match_prompts {
            let excess = o
                .usage
                .prompt_tokens
                .map(|p| p as i64 - plan.prompt_tokens(step) as i64);
            let tokens = sizing.next(excess, u64::from(plan.tool_tokens));
            filler.balanced_text(tokens, FillerKind::Code)
        } else {
            filler.text(u64::from(plan.tool_tokens), FillerKind::Code)
        };
        let t_end = Instant::now();
        // Sub-agents: each child's conversation is this one exactly, then this reply and the child's task as the
        // answer to its call; they run in parallel, as tasks of their own.
        let mut waited = Vec::new();
        if let Some(sub) = plan.subagents.filter(|_| plan.spawns_after(step)) {
            let server_prompt = o.usage.prompt_tokens.unwrap_or_else(|| plan.prompt_tokens(step));
            let fork = plan.fork_tokens(plan.prompt_tokens(step), step);
            let nslots = run.workload.slot_count();
            for j in 0..sub.count {
                let mut c = convo.clone();
                push_reply(&mut c, &o, run.workload.reasoning, &subagent_task(j));
                let session = sub.child_session(nslots, slot, j);
                let kid = KidRun {
                    convo: c,
                    session,
                    parent: u64::from(slot),
                    parent_inst: inst,
                    inst: *fanouts,
                    designed0: plan.designed_cached_after(server_prompt, step, false),
                    fork,
                    task_tokens: plan.task_tokens,
                    filler: Filler::new(run.seed, run.nonce)
                        .with_scale(run.scale)
                        .stream(u32::try_from(session).unwrap_or(u32::MAX), *fanouts),
                };
                let h = tokio::spawn(run_kid(ctx.clone(), run.clone(), kid));
                if sub.wait {
                    waited.push(h);
                } else {
                    detached.push(h);
                }
            }
            *fanouts += 1;
        }
        // Waited for, the children's last replies come back with the tool output.
        let mut tool = tool;
        if !waited.is_empty() {
            tool.push_str(SUBAGENT_RESULTS_HEADER);
            for h in waited {
                if let Ok(reply) = h.await {
                    tool.push_str(&reply);
                    tool.push('\n');
                }
            }
        }
        if step + 1 < plan.steps && plan.compacted(step + 1) {
            // Compaction: a new conversation that starts with a summary of this one (the tool output included).
            convo = Conversation::new(summary_text(&mut filler, &plan, run.match_prompts), TASK_LINE);
            sizing = ToolSizing::default();
        } else {
            push_reply(&mut convo, &o, run.workload.reasoning, &tool);
        }
        // The think time runs from the step's end (beside any sub-agents waited for).
        let think = plan.think_s.get(step as usize).copied().unwrap_or(0.0).max(0.0);
        let left = Duration::from_secs_f64(think).saturating_sub(t_end.elapsed());
        if !left.is_zero() && !sleep_or(&ctx.stops.no_new_steps, left).await {
            return done;
        }
    }
    done
}

/// A step's reply and what answers it, onto a conversation: with the workload's reasoning echoed apart from the
/// reply, or stripped; a server that reasons unasked has its reasoning go back before the reply, as it streamed.
fn push_reply(
    convo: &mut Conversation,
    o: &RequestOutcome,
    reasoning: Option<shared::workload::Reasoning>,
    answer: &str,
) {
    if o.reasoning_text.is_empty() {
        convo.push_turn(&o.text, answer);
        return;
    }
    match reasoning {
        Some(r) if r.echo => convo.push_turn_with_reasoning(&o.reasoning_text, &o.text, answer),
        Some(_) => convo.push_turn(&o.text, answer),
        None => convo.push_turn(&format!("{}{}", o.reasoning_text, o.text), answer),
    }
}

/// Put before the sub-agents' results in the parent's next tool output.
pub const SUBAGENT_RESULTS_HEADER: &str = "\n\n[sub-agent results]\n";

/// Sub-agent `j`'s task: the answer to the parent's call that started it.
pub fn subagent_task(j: u32) -> String {
    format!("Sub-agent {j}: investigate this part of the task and report back.")
}

/// One sub-agent to run (see [`run_kid`]).
struct KidRun {
    convo: Conversation,
    session: u64,
    /// The parent's session and instance.
    parent: u64,
    parent_inst: u32,
    inst: u32,
    /// Step 0's designed cacheable part: the parent's prompt (as the server counted it) and its reply.
    designed0: u64,
    /// The parent's prompt and reply as designed (the plan's prefix the child forks).
    fork: u64,
    task_tokens: u32,
    filler: shared::filler::FillerStream,
}

/// A sub-agent's steps, back to back: each its reply, then a tool output; returns its last reply.
async fn run_kid(ctx: Arc<Ctx>, run: Arc<SessionRun>, mut k: KidRun) -> String {
    let Some(sub) = run.workload.subagents else {
        return String::new();
    };
    let mut last = String::new();
    let mut prev_prompt: Option<u64> = None;
    for i in 0..sub.steps {
        if ctx.stops.no_new_steps.is_cancelled() {
            break;
        }
        let designed = match i {
            0 => k.designed0,
            _ => {
                prev_prompt.unwrap_or_else(|| sub.child_prompt(k.fork, k.task_tokens, i - 1))
                    + u64::from(sub.gen_tokens)
            }
        };
        let s = Slot {
            session: k.session,
            inst: k.inst,
            step: i,
            steps_asked: sub.steps,
            base_asked: sub.child_prompt(k.fork, k.task_tokens, 0),
            designed_cached_tokens: Some(designed),
            designed_prompt_tokens: Some(sub.child_prompt(k.fork, k.task_tokens, i)),
            affinity: Some((k.parent, k.parent_inst)),
            parent: Some(k.parent),
        };
        let o = ctx
            .request(
                s,
                Prompt::Conversation(&k.convo, run.tool_results),
                sub.gen_tokens,
                true,
            )
            .await;
        if !o.ok {
            break;
        }
        prev_prompt = o.usage.prompt_tokens;
        if i + 1 < sub.steps {
            let tool = k.filler.text(u64::from(sub.tool_tokens), FillerKind::Code);
            k.convo.push_turn(&o.text, &tool);
        }
        last = o.text;
    }
    last
}

/// The header of a compacted conversation's summary (its first words, so the prefix is new to the server).
pub const SUMMARY_HEADER: &str = "[Summary of the conversation so far]\n";

/// The summary a compacted session goes on from: [`SUMMARY_HEADER`] and filler of the plan's `summary_tokens`.
fn summary_text(
    filler: &mut shared::filler::FillerStream,
    plan: &shared::workload::SessionPlan,
    balanced: bool,
) -> String {
    let tokens = plan.compaction.map_or(0, |c| u64::from(c.summary_tokens));
    let body = if balanced {
        filler.balanced_text(tokens, FillerKind::Prose)
    } else {
        filler.text(tokens, FillerKind::Prose)
    };
    format!("{SUMMARY_HEADER}{body}")
}

/// One open-loop or closed-loop request, ready to send: the workload's own plan ([`Workload::requests`]).
///
/// [`Workload::requests`]: shared::workload::Workload::requests
pub use shared::workload::PlannedRequest;

/// Prompt text for open/closed-loop requests: a shared prefix (one per run, so requests share it as the workload
/// designs) plus a unique part per request.
#[derive(Debug, Clone)]
pub struct PromptMaker {
    filler: Filler,
    shared_words: Vec<String>,
}

impl PromptMaker {
    /// `max_shared` = the longest shared prefix any request asks for; `scale` sizes the text for the target's
    /// tokenizer.
    pub fn new(seed: u64, nonce: u64, max_shared: u32, scale: TokenScale) -> Self {
        let filler = Filler::new(seed, nonce).with_scale(scale);
        let text = filler
            .stream(u32::MAX, 0)
            .text(u64::from(max_shared), FillerKind::Prose);
        PromptMaker {
            filler,
            shared_words: text.split_whitespace().map(str::to_owned).collect(),
        }
    }

    pub fn prompt(&self, index: u64, r: &PlannedRequest) -> String {
        let words = self
            .filler
            .scale
            .words(u64::from(r.shared_prefix_tokens), FillerKind::Prose)
            .min(self.shared_words.len());
        let mut p = String::new();
        for w in &self.shared_words[..words] {
            p.push_str(w);
            p.push(' ');
        }
        let (slot, inst) = ((index & 0xffff_ffff) as u32, (index >> 32) as u32);
        p.push_str(
            &self
                .filler
                .stream(slot, inst.wrapping_add(1))
                .text(u64::from(r.unique_prompt_tokens), FillerKind::Prose),
        );
        p
    }
}

/// Fail-streak guard for request-level traffic: `limit` consecutive failures abort the run.
pub(crate) struct FailStreak {
    current: AtomicU64,
    limit: u64,
}

impl FailStreak {
    pub(crate) fn new(limit: u64) -> FailStreak {
        FailStreak {
            current: AtomicU64::new(0),
            limit: limit.max(1),
        }
    }

    pub(crate) fn note(&self, ctx: &Ctx, ok: bool) {
        if ok {
            self.current.store(0, Ordering::Relaxed);
            return;
        }
        let n = self.current.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.limit && !ctx.aborted.swap(true, Ordering::Relaxed) {
            (ctx.log)(&format!("{n} consecutive requests failed -- stopping the run"));
            ctx.stops.cut();
        }
    }
}

fn slot_for(index: u64, r: &PlannedRequest) -> Slot {
    Slot {
        session: index,
        inst: 0,
        step: 0,
        steps_asked: 1,
        base_asked: u64::from(r.shared_prefix_tokens) + u64::from(r.unique_prompt_tokens),
        designed_cached_tokens: Some(u64::from(r.shared_prefix_tokens)),
        designed_prompt_tokens: Some(u64::from(r.shared_prefix_tokens) + u64::from(r.unique_prompt_tokens)),
        affinity: None,
        parent: None,
    }
}

/// Send each request at its arrival time. `fail_limit` consecutive failures abort the run.
///
/// `max_in_flight` (`--max-concurrency`, vLLM's bench flag) bounds the requests in flight: a request due while that
/// many are running waits for one to end and is sent then, so its `t_submit` is when it was sent, as in `vllm bench
/// serve` (the wait is not part of its TTFT). Without it an open loop's concurrency is whatever the server's speed
/// makes of the arrival rate.
pub async fn run_open_loop(
    ctx: Arc<Ctx>,
    requests: Vec<PlannedRequest>,
    prompts: Arc<PromptMaker>,
    fail_limit: u64,
    max_in_flight: Option<u32>,
    shard: Shard,
) {
    let streak = Arc::new(FailStreak {
        current: AtomicU64::new(0),
        limit: fail_limit.max(1),
    });
    let permits = max_in_flight.map(|n| Arc::new(tokio::sync::Semaphore::new(n.max(1) as usize)));
    let mut tasks = JoinSet::new();
    for (i, r) in requests.into_iter().enumerate() {
        if !shard.owns(i as u64) {
            continue;
        }
        let at = ctx.origin + Duration::from_secs_f64((r.arrival_ms / 1000.0).max(0.0));
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => {}
            () = ctx.stops.no_new_steps.cancelled() => break,
        }
        if ctx.stops.no_new_steps.is_cancelled() {
            break;
        }
        let permit = match &permits {
            Some(p) => tokio::select! {
                permit = p.clone().acquire_owned() => permit.ok(),
                () = ctx.stops.no_new_steps.cancelled() => break,
            },
            None => None,
        };
        while tasks.try_join_next().is_some() {}
        let (ctx, prompts, streak) = (ctx.clone(), prompts.clone(), streak.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let prompt = prompts.prompt(i as u64, &r);
            let o = ctx
                .request(slot_for(i as u64, &r), &prompt, r.output_tokens, false)
                .await;
            streak.note(&ctx, o.ok);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// `users` workers, each sending its next request when the previous one ends, after `think_s`.
pub async fn run_closed_loop(
    ctx: Arc<Ctx>,
    requests: Vec<PlannedRequest>,
    prompts: Arc<PromptMaker>,
    users: u32,
    think_s: f64,
    fail_limit: u64,
    shard: Shard,
) {
    let streak = Arc::new(FailStreak {
        current: AtomicU64::new(0),
        limit: fail_limit.max(1),
    });
    // A shard runs its users (`shared::workload::Shard`): request `i` goes with user `i mod U`, `U` the users that
    // have a request.
    let all_users = Shard::closed_loop_users(users, requests.len() as u64);
    let mine: Vec<(usize, PlannedRequest)> = requests
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard.owns_closed_request(*i as u64, all_users))
        .collect();
    let queue = Arc::new(std::sync::Mutex::new(mine.into_iter()));
    let mut tasks = JoinSet::new();
    let workers = if shard.is_whole() {
        users.max(1)
    } else {
        shard.users(all_users)
    };
    for _ in 0..workers {
        let (ctx, prompts, streak, queue) = (ctx.clone(), prompts.clone(), streak.clone(), queue.clone());
        tasks.spawn(async move {
            loop {
                if ctx.stops.no_new_steps.is_cancelled() {
                    return;
                }
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some((i, r)) = next else { return };
                let prompt = prompts.prompt(i as u64, &r);
                let o = ctx
                    .request(slot_for(i as u64, &r), &prompt, r.output_tokens, false)
                    .await;
                streak.note(&ctx, o.ok);
                if think_s > 0.0 && !sleep_or(&ctx.stops.no_new_steps, Duration::from_secs_f64(think_s)).await {
                    return;
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::ToolSizing;

    /// A server that adds `o` tokens per step (template, header) and counted the base `e0` over its design: the
    /// first tool output absorbs the base's excess, the later ones the per-step overhead too, so from the third
    /// prompt on the excess is 0.
    #[test]
    fn tool_outputs_absorb_the_excess() {
        let (tool, o, e0) = (200u64, 12i64, 30i64);
        let mut s = ToolSizing::default();
        let mut e = e0;
        let mut excesses = vec![e];
        for _ in 0..5 {
            let sent = s.next(Some(e), tool);
            // Next prompt: this one + reply (as designed) + overhead + the tool output sent (designed: `tool`).
            e += o + sent as i64 - tool as i64;
            excesses.push(e);
        }
        assert_eq!(excesses, vec![30, 12, 0, 0, 0, 0]);
        // A step without usage: sized by the excess the last step predicts, so the next prompts stay on design.
        for usage in [false, true, false] {
            let sent = s.next(usage.then_some(e), tool);
            e += o + sent as i64 - tool as i64;
            assert_eq!(e, 0);
        }
        // No usage ever: as designed; a huge excess never makes a negative size.
        assert_eq!(ToolSizing::default().next(None, tool), tool);
        assert_eq!(ToolSizing::default().next(Some(10_000), tool), 0);
        assert_eq!(ToolSizing::default().next(Some(-50), tool), 250);
    }
}
