//! The replay client against servers that misbehave at the HTTP level, both clients (`--http-client hyper` and
//! `reqwest`): `both!` makes a `hyper` and a `reqwest` test of each case function. The servers are raw TCP on
//! 127.0.0.1 ([`Server`]), so a test decides byte for byte what a connection gets (or does not get) and counts the
//! requests that reached it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loadshape::replay::client::{self, Client, ClientConfig, Endpoint, HttpClient, LiveCounters, Outcome};
use loadshape::replay::dialect::Dialect;
use loadshape::replay::rxstamp::RxClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// `name::hyper` and `name::reqwest` tests of each `async fn name(hc: HttpClient)`.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn hyper() {
                super::$name(super::HttpClient::Hyper).await
            }
            #[tokio::test]
            async fn reqwest() {
                super::$name(super::HttpClient::Reqwest).await
            }
        }
    )*};
}

both!(
    a_request_whose_bytes_were_written_is_never_sent_again,
    a_connection_the_server_closed_while_idle_is_replaced,
);

/// What a connection does after reading one request.
#[derive(Clone)]
enum Reply {
    /// Write these bytes, wait, then close (a server whose idle timeout is short).
    SendThenCloseAfter(Vec<u8>, Duration),
    /// Close without a byte of an answer.
    Close,
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
            Reply::SendThenCloseAfter(bytes, after) => {
                let _ = sock.write_all(&bytes).await;
                tokio::time::sleep(after).await;
                return;
            }
            Reply::Close => return,
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
    }
}

fn client_for(cfg: ClientConfig) -> Client {
    Client::new(client::http_client(&[]).unwrap_or_else(|e| panic!("{e}")), cfg)
}

async fn send(c: &Client) -> Outcome {
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
