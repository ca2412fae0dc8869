//! The replay client against servers that misbehave at the HTTP level, both clients (`--http-client hyper` and
//! `reqwest`): `both!` makes a `hyper` and a `reqwest` test of each case function. The servers are raw TCP on
//! 127.0.0.1 ([`Server`]), so a test decides byte for byte what a connection gets (or does not get) and counts the
//! requests that reached it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loadshape::replay::client::{self, Client, ClientConfig, Endpoint, HttpClient, LiveCounters, RequestOutcome};
use loadshape::replay::dialect::Dialect;
use loadshape::replay::rxstamp::RxClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

#[macro_use]
#[path = "common/both_clients.rs"]
mod both_clients;

both!(
    a_request_whose_bytes_were_written_is_never_sent_again,
    a_connection_the_server_closed_while_idle_is_replaced,
    no_response_headers_fail_at_the_stall_timeout,
    a_redirect_is_not_followed_and_names_its_location,
    retry_after_in_seconds_is_waited_and_recorded,
    retry_after_as_an_http_date_is_honoured,
    retries_are_bounded_by_max_retries,
    a_retry_after_beyond_the_timeout_fails_at_once,
    without_max_retries_an_overloaded_answer_fails_at_once,
    a_cut_during_a_retry_wait_ends_the_request_at_once,
    a_body_without_line_ends_fails_at_the_decoders_limit,
);

/// What a connection does after reading one request.
#[derive(Clone)]
enum Reply {
    /// Write these bytes and read the next request.
    Send(Vec<u8>),
    /// Write these bytes, wait, then close (a server whose idle timeout is short).
    SendThenCloseAfter(Vec<u8>, Duration),
    /// Close without a byte of an answer.
    Close,
    /// Keep the connection open and never answer.
    Silence,
}

/// A raw HTTP/1.1 server on 127.0.0.1: each connection reads requests (head, then a `content-length` body) and
/// answers each as `answer(number of POSTs so far, counting this one)` says. Other methods (reqwest's warm-up
/// `GET /models`) get a 404 and are not counted.
struct Server {
    base: String,
    posts: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

impl Server {
    async fn start(answer: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let posts = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(answer);
        let (p, c) = (posts.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve_conn(sock, p.clone(), answer.clone()));
            }
        });
        Server {
            base: format!("http://{addr}/v1"),
            posts,
            connections,
        }
    }

    fn posts(&self) -> usize {
        self.posts.load(Ordering::SeqCst)
    }
}

async fn serve_conn(mut sock: TcpStream, posts: Arc<AtomicUsize>, answer: Arc<impl Fn(usize) -> Reply>) {
    let mut buf = Vec::new();
    loop {
        let Some((head, body_len)) = read_head(&mut sock, &mut buf).await else {
            return;
        };
        while buf.len() < body_len {
            let mut more = [0u8; 4096];
            match sock.read(&mut more).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&more[..n]),
            }
        }
        buf.drain(..body_len);
        if !head.starts_with("POST ") {
            let _ = sock
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        }
        let n = posts.fetch_add(1, Ordering::SeqCst) + 1;
        match answer(n) {
            Reply::Send(bytes) => {
                if sock.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Reply::SendThenCloseAfter(bytes, after) => {
                let _ = sock.write_all(&bytes).await;
                tokio::time::sleep(after).await;
                return;
            }
            Reply::Close => return,
            Reply::Silence => {
                // Read on (and drop) whatever comes, never answering, until the client closes.
                let mut sink = [0u8; 4096];
                while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
        }
    }
}

/// One request head (as text) and its `content-length`, the head's bytes taken off `buf`; `None` at EOF.
async fn read_head(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, usize)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            return Some((head, len));
        }
        let mut more = [0u8; 4096];
        match sock.read(&mut more).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&more[..n]),
        }
    }
}

/// A whole streamed answer: one content frame with `finish_reason`, usage, `[DONE]`.
fn sse_ok() -> Vec<u8> {
    let body = "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"length\"}],\
                \"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A response with `status` (e.g. `503 Service Unavailable`), extra header lines and a short body.
fn answer(status: &str, headers: &[&str], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

fn config(hc: HttpClient, base: &str) -> ClientConfig {
    ClientConfig {
        base_url: base.to_string(),
        model: "m".into(),
        api_key: None,
        endpoint: Endpoint::Completions,
        dialect: Dialect::Vllm,
        temperature: 0.0,
        timeout: Duration::from_secs(20),
        stall_timeout: None,
        http_client: hc,
        rx_clock: RxClock::Kernel,
        ca_certs: Vec::new(),
        max_retries: 0,
    }
}

fn client_for(cfg: ClientConfig) -> Client {
    Client::new(client::http_client(&[]).unwrap_or_else(|e| panic!("{e}")), cfg)
}

async fn send(c: &Client) -> RequestOutcome {
    c.complete("prompt", 1, false, &LiveCounters::default(), &CancellationToken::new())
        .await
}

/// Issue #16, item 10: a server that reads a request and closes a pre-opened (so reused) connection without
/// answering saw each POST twice on the hyper path: the client took the close for the keep-alive race and sent the
/// request again. A request whose bytes were written is never sent again: one POST per request, each a failure.
async fn a_request_whose_bytes_were_written_is_never_sent_again(hc: HttpClient) {
    let server = Server::start(|_| Reply::Close).await;
    let c = client_for(config(hc, &server.base));
    c.warm(2).await;
    for i in 1..=2 {
        let o = send(&c).await;
        assert!(!o.ok, "request {i} cannot succeed: the server never answers");
        assert!(
            o.error.as_deref().is_some_and(|e| e.starts_with("request failed:")),
            "{:?}",
            o.error
        );
        assert_eq!(o.failure, Some(shared::record::FailureKind::Connect));
        assert_eq!(server.posts(), i, "request {i}: the server saw each request once");
    }
}

/// The keep-alive race the resend was for still works: a server that closes an idle connection (after answering
/// on it) costs the next request a new connection, not a failure, and the request is sent once.
async fn a_connection_the_server_closed_while_idle_is_replaced(hc: HttpClient) {
    let server = Server::start(|_| Reply::SendThenCloseAfter(sse_ok(), Duration::from_millis(20))).await;
    let c = client_for(config(hc, &server.base));
    let first = send(&c).await;
    assert!(first.ok, "{:?}", first.error);
    // Long enough for the server's close to reach the client.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = send(&c).await;
    assert!(second.ok, "{:?}", second.error);
    assert_eq!(server.posts(), 2);
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

/// Issue #16, item 11: `--stall-timeout` covers the wait for the response headers ("and before the first" frame):
/// a server that reads the request and never answers fails the request at the stall limit, naming it, not at the
/// whole-request `--timeout`.
async fn no_response_headers_fail_at_the_stall_timeout(hc: HttpClient) {
    let server = Server::start(|_| Reply::Silence).await;
    let mut cfg = config(hc, &server.base);
    cfg.timeout = Duration::from_secs(20);
    cfg.stall_timeout = Some(Duration::from_millis(300));
    let c = client_for(cfg);
    let o = send(&c).await;
    assert!(!o.ok);
    let err = o.error.clone().unwrap_or_default();
    assert!(err.starts_with("stall:") && err.contains("response headers"), "{err}");
    assert!(
        o.wall < Duration::from_secs(20),
        "ended by the stall limit, not --timeout: {:?}",
        o.wall
    );
    assert_eq!(server.posts(), 1);
}

/// Issue #16, item 4: reqwest followed a 307 to another host and sent the POST body there. Neither client follows a
/// redirect: the request fails with the 3xx status and the `Location` it named, and the other host sees nothing.
async fn a_redirect_is_not_followed_and_names_its_location(hc: HttpClient) {
    let elsewhere = Server::start(|_| Reply::Send(sse_ok())).await;
    let location = format!("{}/completions", elsewhere.base);
    let header = format!("location: {location}");
    let server = Server::start(move |_| Reply::Send(answer("307 Temporary Redirect", &[&header], "moved"))).await;
    let c = client_for(config(hc, &server.base));
    let o = send(&c).await;
    assert!(!o.ok, "the redirect was followed");
    let err = o.error.clone().unwrap_or_default();
    assert!(err.starts_with("HTTP 307"), "{err}");
    assert!(err.contains(&location), "the error names the Location: {err}");
    assert_eq!(server.posts(), 1);
    assert_eq!(elsewhere.posts(), 0, "the other host got the request");
}

/// Issue #16, item 18: a 503 with `Retry-After: 1` is waited out and the request sent again, which then streams.
/// The outcome says so (the record's `retries` and `retry_statuses`), and its clocks start at the first attempt, what the user
/// waited: TTFT and E2E include the second of waiting.
async fn retry_after_in_seconds_is_waited_and_recorded(hc: HttpClient) {
    let server = Server::start(|n| match n {
        1 => Reply::Send(answer("503 Service Unavailable", &["retry-after: 1"], "busy")),
        _ => Reply::Send(sse_ok()),
    })
    .await;
    let mut cfg = config(hc, &server.base);
    cfg.max_retries = 3;
    let o = send(&client_for(cfg)).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(o.retry_statuses, [503]);
    assert_eq!(server.posts(), 2);
    let ttft = o.ttft.unwrap_or_else(|| panic!("a content frame came"));
    assert!(
        ttft >= Duration::from_secs(1),
        "TTFT counts from the first attempt: {ttft:?}"
    );
    assert!(o.wall >= ttft);
}

/// A 429 whose `Retry-After` is an HTTP-date (here: now, so a date already reached by the time it is read) is
/// retried after no wait.
async fn retry_after_as_an_http_date_is_honoured(hc: HttpClient) {
    let server = Server::start(|n| match n {
        1 => {
            let date = format!("retry-after: {}", httpdate::fmt_http_date(std::time::SystemTime::now()));
            Reply::Send(answer("429 Too Many Requests", &[&date], "slow down"))
        }
        _ => Reply::Send(sse_ok()),
    })
    .await;
    let mut cfg = config(hc, &server.base);
    cfg.max_retries = 1;
    let o = send(&client_for(cfg)).await;
    assert!(o.ok, "{:?}", o.error);
    assert_eq!(o.retry_statuses, [429]);
    assert_eq!(server.posts(), 2);
}

/// A server that always answers 503 `Retry-After: 0` gets the request `1 + --max-retries` times, then the request
/// fails naming the limit, each retried attempt recorded.
async fn retries_are_bounded_by_max_retries(hc: HttpClient) {
    let server = Server::start(|_| Reply::Send(answer("503 Service Unavailable", &["retry-after: 0"], "busy"))).await;
    let mut cfg = config(hc, &server.base);
    cfg.max_retries = 2;
    let o = send(&client_for(cfg)).await;
    assert!(!o.ok);
    let err = o.error.clone().unwrap_or_default();
    assert!(err.starts_with("HTTP 503") && err.contains("--max-retries 2"), "{err}");
    assert_eq!(o.retry_statuses, [503, 503]);
    assert_eq!(server.posts(), 3);
}

/// A `Retry-After` longer than what is left of `--timeout` fails the request at once, naming it, without a wait.
async fn a_retry_after_beyond_the_timeout_fails_at_once(hc: HttpClient) {
    let server = Server::start(|_| Reply::Send(answer("503 Service Unavailable", &["retry-after: 120"], "busy"))).await;
    let mut cfg = config(hc, &server.base);
    cfg.max_retries = 3;
    cfg.timeout = Duration::from_secs(20);
    let o = send(&client_for(cfg)).await;
    assert!(!o.ok);
    let err = o.error.clone().unwrap_or_default();
    assert!(
        err.starts_with("HTTP 503") && err.contains("Retry-After 120s is beyond"),
        "{err}"
    );
    assert!(o.retry_statuses.is_empty());
    assert!(o.wall < Duration::from_secs(20), "no wait: {:?}", o.wall);
    assert_eq!(server.posts(), 1);
}

/// `--max-retries 0`: the first 503 fails the request, as before retries existed.
async fn without_max_retries_an_overloaded_answer_fails_at_once(hc: HttpClient) {
    let server = Server::start(|_| Reply::Send(answer("503 Service Unavailable", &["retry-after: 0"], "busy"))).await;
    let o = send(&client_for(config(hc, &server.base))).await;
    assert!(!o.ok);
    let err = o.error.clone().unwrap_or_default();
    assert!(err.starts_with("HTTP 503 Service Unavailable: busy"), "{err}");
    assert!(o.retry_statuses.is_empty());
    assert_eq!(server.posts(), 1);
}

/// The end of the run (the cut token) ends a request that is waiting out a `Retry-After`, with a cut record that
/// keeps the retry it was waiting for.
async fn a_cut_during_a_retry_wait_ends_the_request_at_once(hc: HttpClient) {
    let server = Server::start(|_| Reply::Send(answer("503 Service Unavailable", &["retry-after: 10"], "busy"))).await;
    let mut cfg = config(hc, &server.base);
    cfg.max_retries = 3;
    cfg.timeout = Duration::from_secs(60);
    let c = client_for(cfg);
    let cut = CancellationToken::new();
    let canceller = cut.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let o = c.complete("prompt", 1, false, &LiveCounters::default(), &cut).await;
    assert_eq!(o.error.as_deref(), Some(client::CUT_ERROR));
    assert_eq!(o.retry_statuses, [503]);
    assert!(o.wall < Duration::from_secs(10), "the wait was cut short: {:?}", o.wall);
    assert_eq!(server.posts(), 1);
}

/// A 200 whose body is 4 MiB and more of bytes without a line end fails the request at the SSE decoder's limit
/// (`sse::MAX_LINE_BYTES`), naming it, instead of holding the whole body (issue #16: the decoder's memory bound).
async fn a_body_without_line_ends_fails_at_the_decoders_limit(hc: HttpClient) {
    let len = loadshape::replay::sse::MAX_LINE_BYTES + (256 << 10);
    let server = Server::start(move |_| {
        let mut out =
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {len}\r\n\r\n").into_bytes();
        out.resize(out.len() + len, b'a');
        Reply::Send(out)
    })
    .await;
    let o = send(&client_for(config(hc, &server.base))).await;
    assert!(!o.ok);
    let err = o.error.clone().unwrap_or_default();
    assert!(
        err.starts_with("malformed SSE stream: an SSE line longer than 4194304 bytes"),
        "{err}"
    );
}
