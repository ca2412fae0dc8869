//! Frame times on the hyper path come from the kernel's receive timestamps (`--rx-clock kernel`, Linux): a client
//! thread that is busy when the first frame arrives does not add its busy time to TTFT. A raw HTTP/1.1 server on its
//! own thread answers only once the client's (single) runtime thread is blocked, so the first frame is certainly in
//! the socket for the whole block; with `--rx-clock user` the same run reports the block in TTFT.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use loadshape::replay::client::{self, Client, ClientConfig, Endpoint, HttpClient, LiveCounters, RequestOutcome};
use loadshape::replay::dialect::Dialect;
use loadshape::replay::runner::{self, Slot};
use loadshape::replay::rxstamp::RxClock;
use shared::record::FrameClock;
use tokio_util::sync::CancellationToken;

/// How long the client's thread is kept busy after the server was told to answer.
const BLOCK: Duration = Duration::from_millis(200);
/// The gap between the server's two content frames.
const GAP: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Flags {
    /// The server has the whole request.
    received: AtomicBool,
    /// The client's thread is about to block: the server may answer.
    blocking: AtomicBool,
}

fn wait_for(flag: &AtomicBool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !flag.load(Ordering::Acquire) {
        assert!(Instant::now() < until, "the other side never got there");
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn chunk(out: &mut Vec<u8>, data: &str) {
    out.extend_from_slice(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes());
}

/// One connection, one request: the answer (head and first frame) is written only once the client blocks; the
/// second frame, usage and `[DONE]` follow `GAP` later.
fn serve_one(listener: std::net::TcpListener, flags: Arc<Flags>) {
    let Ok((mut sock, _)) = listener.accept() else { return };
    let _ = sock.set_nodelay(true);
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = sock.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        req.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&req);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let len = text[..head_end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if req.len() >= head_end + 4 + len {
                break;
            }
        }
    }
    flags.received.store(true, Ordering::Release);
    wait_for(&flags.blocking);
    let mut first =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    chunk(
        &mut first,
        "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n",
    );
    let _ = sock.write_all(&first);
    std::thread::sleep(GAP);
    let mut rest = Vec::new();
    chunk(
        &mut rest,
        "data: {\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
    );
    chunk(
        &mut rest,
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
    );
    rest.extend_from_slice(b"0\r\n\r\n");
    let _ = sock.write_all(&rest);
    // Hold the connection open until the client is done with it.
    let _ = sock.read(&mut buf);
}

/// One request through the hyper path with `clock`; the client's thread blocks for `BLOCK` just before the
/// server answers. Returns the outcome and the client's record of which clock timed it.
async fn blocked_run(clock: RxClock) -> (RequestOutcome, &'static str) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let flags = Arc::new(Flags::default());
    let server = {
        let flags = flags.clone();
        std::thread::spawn(move || serve_one(listener, flags))
    };
    let c = Client::new(
        client::http_client(&[]).unwrap_or_else(|e| panic!("{e}")),
        ClientConfig {
            base_url: format!("http://{addr}/v1"),
            model: "m".into(),
            api_key: None,
            endpoint: Endpoint::Completions,
            dialect: Dialect::Vllm,
            temperature: 0.0,
            timeout: Duration::from_secs(10),
            stall_timeout: None,
            http_client: HttpClient::Hyper,
            rx_clock: clock,
            ca_certs: Vec::new(),
            max_retries: 0,
        },
    );
    // As a run does: the pool opens its connection (the server's one) and, with kernel stamps, waits until the
    // kernel stamps received packets at all.
    c.warm(1).await;
    let (live, cut) = (LiveCounters::default(), CancellationToken::new());
    // The busy part of the client: once the request is out, it takes the thread (as other streams' frames would
    // at hundreds of streams) — the request's task cannot read its socket meanwhile.
    let busy = async {
        while !flags.received.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
        }
        flags.blocking.store(true, Ordering::Release);
        std::thread::sleep(BLOCK);
    };
    let (o, ()) = tokio::join!(c.complete("p", 2, false, &live, &cut), busy);
    // The clock the request's record names (summary.json's rx_clock counts these).
    let slot = Slot {
        session: 0,
        inst: 0,
        step: 0,
        steps_asked: 1,
        base_asked: 0,
        designed_cached_tokens: None,
        designed_prompt_tokens: None,
        affinity: None,
        parent: None,
    };
    let used = match runner::to_record(&o, Instant::now(), slot, 2, 1).rx_clock {
        Some(FrameClock::Kernel) => "kernel",
        Some(FrameClock::User) => "user",
        None => panic!("a first frame arrived, so the record names its clock"),
    };
    assert_eq!(o.first_frame_kernel, used == "kernel");
    drop(c);
    let _ = server.join();
    (o, used)
}

fn check_common(o: &RequestOutcome) -> Duration {
    assert!(o.ok, "{:?}", o.error);
    assert_eq!((o.frames, o.gen_tokens), (2, 2));
    let ttft = o.ttft.unwrap_or_else(|| panic!("a first frame arrived"));
    assert!(ttft <= o.wall, "ttft {ttft:?} wall {:?}", o.wall);
    // The end of the stream is read after the block.
    assert!(o.wall >= BLOCK, "wall {:?}", o.wall);
    let itl = o.itl.unwrap_or_else(|| panic!("two frames, one gap"));
    assert!(itl.max_ms >= 0.0 && itl.max_ms * 1e-3 <= o.wall.as_secs_f64());
    ttft
}

#[tokio::test]
async fn a_busy_client_thread_is_not_counted_in_ttft_with_kernel_stamps() {
    let (o, clock) = blocked_run(RxClock::Kernel).await;
    let ttft = check_common(&o);
    if cfg!(target_os = "linux") {
        assert_eq!(clock, "kernel");
        // The first frame reached the socket right after the server was let go; the read that took it (and, the
        // client being blocked, the second frame too: one read's bytes share its newest segment's time) came
        // BLOCK later. TTFT is the arrival, not the read.
        assert!(ttft < BLOCK / 2, "ttft {ttft:?} includes the client's busy time");
    } else {
        assert_eq!(clock, "user");
        assert!(ttft >= BLOCK);
    }
}

#[tokio::test]
async fn a_busy_client_thread_is_counted_in_ttft_with_user_stamps() {
    let (o, clock) = blocked_run(RxClock::User).await;
    let ttft = check_common(&o);
    assert_eq!(clock, "user");
    // The same run timed when the task took the frame: the whole block is in TTFT.
    assert!(ttft >= BLOCK, "ttft {ttft:?}");
}
