//! The direct HTTP/1.1 path: hyper's connection API (`hyper::client::conn::http1`), one connection per stream, as the
//! floor client of `scripts/bench_replay.sh` does; `http://`, and `https://` through rustls ([`super::tls`]).
//!
//! [`H1Pool`] keeps the idle connections (a stack: a stream takes one, uses it for one request and its whole
//! response, and puts it back once the body has ended). A connection is opened only when none is idle (lazily; the
//! run opens as many as it will hold streams before its first request, [`H1Pool::warm`]), with `TCP_NODELAY`. A
//! connection goes back on the stack only when its response was read to the end and the server did not say
//! `Connection: close`; any other (an error, a cut, a timeout, a body dropped early) is dropped, which closes it.
//!
//! **No task per connection.** hyper's connection future (`http1::Connection`: the socket reads and writes, the
//! HTTP/1.1 parser) is not spawned; the stream that holds the connection polls it itself, right before it polls the
//! response body ([`Conn::poll_io`]). A frame arriving then wakes one task, the stream's, which reads the socket and
//! gets the frame in the same poll — instead of waking the connection's task, which hands the frame to the body
//! channel and wakes the stream's task (two task polls per frame, as reqwest and the floor client do). An idle
//! connection is not polled at all; a server closing it meanwhile is noticed on its next use.
//!
//! **Receive times.** Each connection's socket is an [`RxStream`]: with `--rx-clock kernel` (the default) on Linux
//! it reads through `recvmsg` with `SO_TIMESTAMPNS`, and the stream times a body chunk by the kernel's receive time of
//! the latest read on its connection ([`Conn::rx_time`]; [`super::rxstamp`] says why that is never too early), not
//! by when its task got to the chunk.
//!
//! Why not reqwest for these: per request reqwest adds its tower layers (the redirect policy re-parses the URI of
//! every request), a boxed `Pending` future, hyper-util's pool checkout, its idle task and the `MapErr`-boxed body
//! over the same hyper connection; on the one thread that reads every stream that per-request work queues ahead of
//! other streams' frames (docs/replay.md, "TTFT error at 256 streams"). reqwest stays as `--http-client reqwest`.
//!
//! **TLS.** For `https://` the stamped socket is wrapped in a rustls client stream (`Io`); the handshake is
//! part of opening a connection (so of the warm-up, or of the TTFT of a request that has to open one). Decrypted
//! bytes come out of reads of the stamped socket, so a chunk's time is still that of the latest socket read, which
//! brought the end of its TLS record or came later: never too early.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::future::Future as _;
use std::os::fd::{AsRawFd as _, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONNECTION, HOST, HeaderMap, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;

use super::rxstamp::{KernelStamps, RxClock, RxStamp, RxStream};

/// The sending half of one HTTP/1.1 connection.
pub type Sender = SendRequest<Full<Bytes>>;

/// The connection itself: socket I/O and the HTTP/1.1 state machine, driven by whoever holds the [`Conn`].
type Driver = http1::Connection<TokioIo<Io>, Full<Bytes>>;

/// A connection's byte stream: the stamped socket itself (`Left`), or rustls over it (`Right`).
type Io = tokio_util::either::Either<RxStream, Box<tokio_rustls::client::TlsStream<RxStream>>>;

/// What `https://` connections need: the rustls connector and the name the certificate must be valid for.
struct TlsTarget {
    connector: tokio_rustls::TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
}

/// Idle HTTP/1.1 connections to one `http://` or `https://` origin, and the parts of a request that never change.
pub struct H1Pool {
    /// `host` (without IPv6 brackets) and port to connect to.
    host: String,
    port: u16,
    /// The request target in origin form (`/v1/completions`).
    path: Uri,
    /// Host, content type and (marked sensitive) authorization.
    headers: HeaderMap,
    idle: Mutex<Vec<Conn>>,
    opened: AtomicU64,
    /// Whether connections go back to the pool after their response. Cleared for good once the server shows it
    /// closes connections right after their responses while it advertises keep-alive ([`H1Pool::stop_reuse`]).
    reuse: AtomicBool,
    /// A connection served a second response: the server keeps connections after a response, as its headers say.
    /// Until then a connection is reused only once it has sat idle [`CONFIRM_AFTER`] (its close would have arrived).
    kept: AtomicBool,
    /// The origin of `last_start_ns`.
    base: std::time::Instant,
    /// When the last request started, nanoseconds after `base` ([`H1Pool::pace_start`]).
    last_start_ns: AtomicU64,
    /// Requests queued for their turn to start ([`H1Pool::pace_start`]).
    waiting: AtomicU64,
    /// The turn to start, handed from one queued request to the next.
    turn: tokio::sync::Notify,
    /// Which clock new connections' reads are stamped by.
    rx_clock: RxClock,
    /// The probe connection that keeps the kernel's receive stamping on ([`KernelStamps`]), once warmed.
    stamps: Mutex<Option<KernelStamps>>,
    /// `https://`: how to wrap each connection in TLS.
    tls: Option<TlsTarget>,
}

/// An idle connection the server closed sooner than this after its response ended was closed because the response
/// ended, not by an idle timeout (servers' keep-alive timeouts are seconds: 5 s in llama.cpp's, 75 s in nginx's).
pub const PROMPT_CLOSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Until the server has kept a connection after a response, a connection that served one is reused only after
/// this long idle ([`H1Pool::take_idle`]); a request meanwhile opens a new one (once per stream at most, at the
/// start of a run against a server that keeps its connections).
pub const CONFIRM_AFTER: std::time::Duration = std::time::Duration::from_millis(2);

/// The warm-up's connections start this far apart ([`H1Pool::warm`]). A server whose HTTP layer hands connections to a
/// thread pool can leave a burst of them unserved: llama.cpp's `llama-server` (cpp-httplib, `--parallel` + 4 fixed
/// threads, more spawned only when none is idle at the moment a connection is queued) left 4 of 12 connections
/// opened back to back without a thread for 5.1 s, until idle keep-alive connections timed out, while 12 opened 1 ms
/// apart were all answered within 1 ms (2026-12-07, `--parallel 4`). A run whose first request went on such a
/// connection waited that long for its first token: the first step of an 8-session run on 4 slots took 2.3–2.6 s
/// instead of 0.3 s. 2,048 streams take 2 s to warm at this pace, before the run's origin.
pub const WARM_GAP: std::time::Duration = std::time::Duration::from_millis(1);

/// Runs `start()` `n` times, [`WARM_GAP`] apart (a start does not wait for the one before to finish), and collects
/// what they return: the warm-up's pace, for hyper's connections ([`H1Pool::warm`]) and reqwest's pool alike.
pub async fn paced<T, F: std::future::Future<Output = T>>(n: usize, start: impl Fn() -> F) -> Vec<T> {
    let start = &start;
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    futures_util::future::join_all((0..n).map(|i| async move {
        tokio::time::sleep(WARM_GAP * i).await;
        start().await
    }))
    .await
}

/// Requests that would start closer together than this yield to the runtime first ([`H1Pool::pace_start`]).
const START_GAP_NS: u64 = 50_000;

impl std::fmt::Debug for H1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H1Pool")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field("opened", &self.opened.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One connection: its sender and its driver, held by one stream at a time.
pub struct Conn {
    pub tx: Sender,
    /// `None` once the connection has ended (closed by either side, or failed).
    io: Option<Driver>,
    /// Taken from the pool (it served a request before), as opposed to opened for this one.
    pub reused: bool,
    /// When it went back to the pool (its previous response had ended).
    idle_since: Option<std::time::Instant>,
    /// Responses it has carried to their end.
    responses: u32,
    /// The arrival time of the latest read that brought bytes (kernel-stamped reads only; see [`RxStream`]).
    rx: Arc<RxStamp>,
    /// The socket, to read its own state ([`Conn::peer_closed`]); open while `io` holds it.
    fd: RawFd,
}

impl Conn {
    /// Drive the connection: read what the socket has (handing response heads and body chunks to their
    /// receivers), write what is queued. Registers `cx` for the socket's next readiness. Once the connection has
    /// ended it is dropped here (closing the socket) and this does nothing.
    pub fn poll_io(&mut self, cx: &mut Context<'_>) {
        if let Some(io) = &mut self.io
            && Pin::new(io).poll(cx).is_ready()
        {
            self.io = None;
        }
    }

    /// When the bytes of the latest read arrived, by the kernel's clock (`true`) or the read's own (`false`); `None`
    /// when reads are not stamped (then the caller reads its clock). Never earlier than the read that brought any
    /// byte the connection has handed out so far.
    pub fn rx_time(&self) -> Option<(std::time::Instant, bool)> {
        self.rx.latest()
    }

    /// When the latest write on the connection returned (user-space clock).
    pub fn last_write(&self) -> Option<std::time::Instant> {
        self.rx.written()
    }

    /// Bytes the connection's socket has taken so far (TLS records included): unchanged across a request's send
    /// means not a byte of it left.
    pub fn bytes_written(&self) -> u64 {
        self.rx.bytes_written()
    }

    /// The connection has ended: it cannot carry another request.
    pub fn is_closed(&self) -> bool {
        self.io.is_none() || self.tx.is_closed()
    }

    /// Drive the connection until it can take a request (true), or until it turns out closed (false). Driving it
    /// also notices a close by the server while it sat idle (the EOF is already there).
    pub async fn ready(&mut self) -> bool {
        std::future::poll_fn(|cx| {
            self.poll_io(cx);
            if self.is_closed() {
                return Poll::Ready(false);
            }
            self.tx.poll_ready(cx).map(|r| r.is_ok())
        })
        .await
    }

    /// Whether the server has closed or reset the connection, or sent bytes nobody asked for, by the socket's own
    /// state: a non-blocking one-byte `MSG_PEEK`. The driver learns of a close only once the runtime has taken in
    /// the socket's readiness, when it next polls for I/O; a thread held between a response's end and the next
    /// request (a loaded machine) finds the server's FIN in the socket and not yet in the driver, and would write a
    /// request into a connection the server has left.
    pub fn peer_closed(&self) -> bool {
        use nix::errno::Errno;
        use nix::sys::socket::{MsgFlags, recv};
        if self.is_closed() {
            return true;
        }
        let mut byte = [0u8; 1];
        !matches!(
            recv(self.fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
            Err(Errno::EAGAIN | Errno::EINTR)
        )
    }

    /// `fut`, polled after the connection is driven (the response head of a request sent on it).
    pub async fn drive<F: std::future::Future + Unpin>(&mut self, mut fut: F) -> F::Output {
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = Pin::new(&mut fut).poll(cx) {
                return Poll::Ready(v);
            }
            self.poll_io(cx);
            Pin::new(&mut fut).poll(cx)
        })
        .await
    }
}

impl H1Pool {
    /// The pool for `url` (an `http://` or `https://` URL with the full route, e.g.
    /// `http://127.0.0.1:8000/v1/completions`), or why there cannot be one (the text every request then fails with).
    /// Every request carries `headers` (the client's: content type, authorization) plus `Host`. `https://` trusts
    /// the platform's roots plus `ca_certs` ([`super::tls`]).
    pub fn new(
        url: &str,
        mut headers: HeaderMap,
        rx_clock: RxClock,
        ca_certs: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(format!(
                    "invalid URL {url:?}: the scheme must be http or https (got {other})"
                ));
            }
            None => return Err(format!("invalid URL {url:?}: no scheme")),
        };
        let authority = uri.authority().ok_or_else(|| format!("invalid URL {url:?}: no host"))?;
        // userinfo is not a part of the Host header.
        let host_port = authority.as_str().rsplit('@').next().unwrap_or(authority.as_str());
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("invalid URL {url:?}: {host:?} is not a TLS server name: {e}"))?;
            let connector = tokio_rustls::TlsConnector::from(super::tls::client_config(ca_certs)?);
            Some(TlsTarget { connector, name })
        } else {
            None
        };
        let path = match uri.path_and_query() {
            Some(pq) => pq.as_str().parse().map_err(|e| format!("invalid URL {url:?}: {e}"))?,
            None => Uri::from_static("/"),
        };
        // `Host`, which hyper's conn API leaves to the caller.
        headers.insert(
            HOST,
            HeaderValue::from_str(host_port).map_err(|e| format!("invalid URL {url:?}: {e}"))?,
        );
        // The origin of the connections' receive stamps, fixed before any read.
        super::rxstamp::origin();
        Ok(H1Pool {
            host,
            port,
            path,
            headers,
            idle: Mutex::new(Vec::new()),
            opened: AtomicU64::new(0),
            reuse: AtomicBool::new(true),
            kept: AtomicBool::new(false),
            base: std::time::Instant::now(),
            last_start_ns: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            turn: tokio::sync::Notify::new(),
            rx_clock,
            stamps: Mutex::new(None),
            tls,
        })
    }

    /// One POST of `body` to the endpoint (with the session header `session`, when it belongs to one).
    pub fn request(&self, body: Bytes, session: Option<&hyper::header::HeaderValue>) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path.clone();
        *req.headers_mut() = self.headers.clone();
        if let Some(v) = session {
            req.headers_mut().insert(super::dialect::SESSION_HEADER, v.clone());
        }
        req
    }

    /// Before a request's clock starts: when another request started less than 50 µs ago (or others are already
    /// queued), queue for a turn; each turn starts one request, after one yield to the runtime. A yielded task runs
    /// again only after the runtime has polled its sockets and run the streams they woke, so when many requests start
    /// at one instant (a closed loop's first wave, a burst of arrivals) the answers of those already sent are read
    /// between the starts instead of queueing behind all of them — that queueing would be client-made TTFT. Queued
    /// requests sleep (one is woken per turn), so a burst costs one wake-up and one yield per request. A request that
    /// starts alone (the steady state) does not wait.
    pub async fn pace_start(&self) {
        // Offset by one gap, so that the first start (last = 0) never queues: no turn is out yet.
        let now = self.base.elapsed().as_nanos() as u64 + START_GAP_NS;
        let last = self.last_start_ns.load(Ordering::Relaxed);
        if self.waiting.load(Ordering::Relaxed) == 0
            && now.saturating_sub(last) >= START_GAP_NS
            && self
                .last_start_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // Leave a turn for a request that comes while this one is still close.
            self.turn.notify_one();
            return;
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let mut queued = Queued {
            pool: self,
            has_turn: false,
        };
        // Bounded: should a turn ever be lost, a start waits at most 1 ms for it.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), self.turn.notified()).await;
        queued.has_turn = true;
        tokio::task::yield_now().await;
        // `queued` is dropped here: the turn goes on (also if this future is dropped while it waits).
    }

    /// Connections opened so far (the warm-up's included).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Connections idle in the pool now.
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// An idle connection that is ready for a request, if there is one (closed ones are dropped on the way). It
    /// waits only for the connection's own state to take in the end of its previous response ([`Conn::ready`]),
    /// never for the network, and asks the socket whether the server has closed it meanwhile
    /// ([`Conn::peer_closed`]). One found closed by the server within [`PROMPT_CLOSE`] of its response's end says
    /// that the server closes after each response ([`H1Pool::stop_reuse`]). Until a connection has served two
    /// responses (the server keeps them), one that served a response is taken only after [`CONFIRM_AFTER`] idle:
    /// a server that closes right after a response (the FIN follows the last chunk by 6–23 µs from llama-server)
    /// has closed it by then, and a request put on it sooner would be written into a socket the server has left.
    pub async fn take_idle(&self) -> Option<Conn> {
        loop {
            let mut c = {
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                if self.kept.load(Ordering::Relaxed) {
                    idle.pop()?
                } else {
                    let i = idle
                        .iter()
                        .rposition(|c| c.idle_since.is_none_or(|t| t.elapsed() >= CONFIRM_AFTER))?;
                    idle.remove(i)
                }
            };
            if c.ready().await && !c.peer_closed() {
                c.reused = true;
                return Some(c);
            }
            if c.idle_since.is_some_and(|t| t.elapsed() < PROMPT_CLOSE) {
                self.stop_reuse();
            }
        }
    }

    /// From now on every request gets a new connection, and none goes back to the pool. For a server that closes
    /// each connection once its response has ended although its headers say keep-alive (llama.cpp's
    /// `llama-server` does so after every streamed response, sending `Keep-Alive: timeout=5, max=100`): a request
    /// put on such a connection before its close arrives is written into a socket the server has left, and fails
    /// with "connection closed before message completed". In a closed loop without think time that was a quarter
    /// to a third of the requests (a probe of `loadshape calibrate`, 2026-12-02); the request it happens to is
    /// not sent again ([`super::client`]), so the first one can still fail.
    pub fn stop_reuse(&self) {
        if self.reuse.swap(false, Ordering::Relaxed) {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Whether connections are still reused ([`H1Pool::stop_reuse`]).
    fn reuses(&self) -> bool {
        self.reuse.load(Ordering::Relaxed)
    }

    /// A new connection: TCP connect (`TCP_NODELAY`, receive timestamps as `--rx-clock` says), for `https://` the
    /// TLS handshake, and the HTTP/1.1 handshake (no I/O: hyper's handshake only sets the connection up). Its driver
    /// goes with it.
    pub async fn connect(&self) -> Result<Conn, String> {
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connecting to {}:{}: {e}", self.host, self.port))?;
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let (stream, rx) = RxStream::new(stream, self.rx_clock);
        let io: Io = match &self.tls {
            None => Io::Left(stream),
            Some(t) => {
                Io::Right(Box::new(t.connector.connect(t.name.clone(), stream).await.map_err(
                    |e| format!("TLS handshake with {}:{}: {e}", self.host, self.port),
                )?))
            }
        };
        let (tx, conn) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("HTTP/1.1 handshake with {}:{}: {e}", self.host, self.port))?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            tx,
            io: Some(conn),
            reused: false,
            idle_since: None,
            responses: 0,
            rx,
            fd,
        })
    }

    /// Put a connection whose response was read to the end back on the stack, unless the response said
    /// `Connection: close` (or was HTTP/1.0 without keep-alive) or the connection is closed.
    pub fn put_back(&self, mut conn: Conn, response_headers: &HeaderMap, version: hyper::Version) {
        if conn.is_closed() || !keep_alive(response_headers, version) || !self.reuses() {
            return;
        }
        conn.responses += 1;
        if conn.responses >= 2 {
            self.kept.store(true, Ordering::Relaxed);
        }
        conn.idle_since = Some(std::time::Instant::now());
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
    }

    /// Open `n` connections, [`WARM_GAP`] apart, and leave them idle, so that the first wave of a run does not pay
    /// for hundreds of simultaneous TCP connects inside its TTFT. Failures are ignored (requests will say).
    ///
    /// Each is also driven once until it is ready for a request: the connection's first poll sets up its buffers
    /// and registers its socket with the runtime, work that would otherwise fall on the first wave of requests (at
    /// 256 streams, in a closed loop's first wave, all at the same instant).
    ///
    /// With kernel receive times, it first waits (at most 200 ms) until the kernel stamps received packets at all
    /// (see [`super::rxstamp`]: switching that on is deferred), so the first wave is not timed by the user-space
    /// clock; returns false when stamps did not come in time (the frames are then timed in user space until they do;
    /// `summary.json` counts which clock timed each request).
    pub async fn warm(&self, n: usize) -> bool {
        let mut stamped = true;
        if self.rx_clock == RxClock::Kernel
            && let Some((keep, ok)) = KernelStamps::ready(std::time::Duration::from_millis(200)).await
        {
            *self.stamps.lock().unwrap_or_else(|p| p.into_inner()) = Some(keep);
            stamped = ok;
        }
        let conns = paced(n, || async {
            let mut c = self.connect().await.ok()?;
            c.ready().await.then_some(c)
        })
        .await;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.extend(conns.into_iter().flatten());
        stamped
    }
}

/// A request queued by [`H1Pool::pace_start`]; leaving the queue (started, or dropped) hands the turn on.
struct Queued<'a> {
    pool: &'a H1Pool,
    has_turn: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.pool.waiting.fetch_sub(1, Ordering::Relaxed);
        if self.has_turn {
            let now = self.pool.base.elapsed().as_nanos() as u64 + START_GAP_NS;
            self.pool.last_start_ns.store(now, Ordering::Relaxed);
            self.pool.turn.notify_one();
        }
    }
}

/// Whether the server lets the connection carry another request after this response.
fn keep_alive(headers: &HeaderMap, version: hyper::Version) -> bool {
    let says = |word: &str| {
        headers.get_all(CONNECTION).iter().any(|v| {
            v.to_str()
                .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(word)))
        })
    };
    if version == hyper::Version::HTTP_10 {
        says("keep-alive")
    } else {
        !says("close")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{AUTHORIZATION, CONTENT_TYPE};

    /// What the client hands the pool: a content type and, with a key, a sensitive authorization.
    fn headers(key: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(k) = key {
            let mut v = HeaderValue::from_str(&format!("Bearer {k}")).unwrap_or_else(|e| panic!("{e}"));
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    #[test]
    fn request_parts_from_the_url() {
        let p = H1Pool::new(
            "http://127.0.0.1:8123/v1/completions",
            headers(Some("sk-1")),
            RxClock::Kernel,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.host.as_str(), p.port), ("127.0.0.1", 8123));
        let req = p.request(Bytes::from_static(b"{}"), None);
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri().to_string(), "/v1/completions");
        assert_eq!(req.headers()[HOST], "127.0.0.1:8123");
        assert_eq!(req.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(req.headers()[AUTHORIZATION], "Bearer sk-1");
        assert!(req.headers()[AUTHORIZATION].is_sensitive());

        let p = H1Pool::new(
            "http://[::1]/x/chat/completions?a=1",
            headers(None),
            RxClock::Kernel,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.host.as_str(), p.port), ("::1", 80));
        let req = p.request(Bytes::new(), None);
        assert_eq!(req.uri().to_string(), "/x/chat/completions?a=1");
        assert_eq!(req.headers()[HOST], "[::1]");
        assert!(req.headers().get(AUTHORIZATION).is_none());

        let p = H1Pool::new(
            "http://user:pw@host.example:81/v1/completions",
            headers(None),
            RxClock::User,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.request(Bytes::new(), None).headers()[HOST], "host.example:81");
        // A session step names its session.
        let s = hyper::header::HeaderValue::from_static("7-0");
        let req = p.request(Bytes::new(), Some(&s));
        assert_eq!(req.headers()[crate::replay::dialect::SESSION_HEADER], "7-0");
        assert_eq!(req.headers()[HOST], "host.example:81");

        // https: port 443 by default, and the certificate must name the URL's host.
        let ca = crate::replay::tls::test_ca_certs();
        let p = H1Pool::new(
            "https://gpu.example/v1/completions",
            headers(None),
            RxClock::Kernel,
            &ca,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.host.as_str(), p.port, p.tls.is_some()), ("gpu.example", 443, true));
        let p = H1Pool::new("http://gpu.example/v1/completions", headers(None), RxClock::Kernel, &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.tls.is_none());
    }

    #[test]
    fn bad_urls_are_errors_not_panics() {
        let ftp = H1Pool::new("ftp://example.com/v1/completions", headers(None), RxClock::Kernel, &[])
            .err()
            .unwrap_or_default();
        assert!(ftp.contains("must be http or https"), "{ftp}");
        assert!(H1Pool::new("not a url", headers(None), RxClock::Kernel, &[]).is_err());
        assert!(H1Pool::new("/v1/completions", headers(None), RxClock::Kernel, &[]).is_err());
    }

    /// The warm-up does not open its connections in one burst: the server accepts the k-th no sooner than k
    /// `WARM_GAP`s after the warm-up began (a burst left some of llama-server's unserved for 5 s, see `WARM_GAP`).
    /// Lower bounds, which a slow machine can only meet more easily.
    #[tokio::test]
    async fn the_warm_up_paces_its_connects() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
        let accepts = tokio::spawn(async move {
            let mut held = Vec::new();
            let mut at = Vec::new();
            while at.len() < 8 {
                let (sock, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
                at.push(std::time::Instant::now());
                held.push(sock);
            }
            (at, held)
        });
        let pool = H1Pool::new(
            &format!("http://127.0.0.1:{port}/v1/completions"),
            headers(None),
            RxClock::User,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t0 = std::time::Instant::now();
        assert!(pool.warm(8).await);
        assert_eq!(pool.idle(), 8, "every warmed connection is idle in the pool");
        let (at, _held) = accepts.await.unwrap_or_else(|e| panic!("{e}"));
        // The k-th accept needs k + 1 connects started, the last of them k gaps after the start.
        for (k, t) in (0u32..).zip(&at) {
            assert!(
                t.duration_since(t0) >= WARM_GAP * k,
                "accept {k} after {:?}",
                t.duration_since(t0)
            );
        }
    }

    /// On tokio's paused clock, so that the 1 ms bound on a wait cannot fire while the test thread is merely
    /// descheduled (a loaded CI runner did that and released a burst's queued starts together): time moves only
    /// when every task is idle, and the pass counter keeps one busy until the starts are done or it gives up.
    #[tokio::test(start_paused = true)]
    async fn paced_starts_all_get_a_turn_one_per_scheduler_pass() {
        use futures_util::FutureExt as _;
        let pool = std::sync::Arc::new(
            H1Pool::new("http://127.0.0.1:9/v1/completions", headers(None), RxClock::Kernel, &[])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        // The very first start does not queue (no turn is out yet): it is done on its first poll.
        let fresh = H1Pool::new("http://127.0.0.1:9/v1/completions", headers(None), RxClock::Kernel, &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(fresh.pace_start().now_or_never().is_some(), "the first start waited");
        // A queued start that is dropped (its request cut) hands its turn on; nobody waits for it.
        {
            let p = pool.clone();
            let first = tokio::spawn(async move { p.pace_start().await });
            let _ = first.await;
            let dropped = tokio::time::timeout(std::time::Duration::from_micros(1), pool.pace_start()).await;
            drop(dropped);
        }
        assert_eq!(pool.waiting.load(Ordering::Relaxed), 0);
        // A burst of 50 starts at one instant: every one gets its turn, in one scheduler pass each (a task that
        // counts passes by yielding sees at least one pass between consecutive starts after the first).
        let passes = std::sync::Arc::new(AtomicU64::new(0));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (pc, dc) = (passes.clone(), done.clone());
        let counter = tokio::spawn(async move {
            // Bounded, so that a lost turn ends in a failed assertion (the clock moves once this stops), not a hang.
            for _ in 0..1_000_000 {
                if dc.load(Ordering::Relaxed) {
                    break;
                }
                pc.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        let mut starts = Vec::new();
        for _ in 0..50 {
            let (p, pc) = (pool.clone(), passes.clone());
            starts.push(tokio::spawn(async move {
                p.pace_start().await;
                pc.load(Ordering::Relaxed)
            }));
        }
        let mut at = Vec::new();
        for s in starts {
            at.push(
                tokio::time::timeout(std::time::Duration::from_secs(5), s)
                    .await
                    .ok()
                    .and_then(Result::ok),
            );
        }
        done.store(true, Ordering::Relaxed);
        let _ = counter.await;
        let mut at: Vec<u64> = at
            .into_iter()
            .map(|a| a.unwrap_or_else(|| panic!("a start never got its turn")))
            .collect();
        at.sort_unstable();
        at.dedup();
        // The first start goes at once, in the second start's pass; every later one has a pass of its own.
        assert!(at.len() >= 49, "one start per scheduler pass: {at:?}");
        assert_eq!(pool.waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn keep_alive_rules() {
        let mut h = HeaderMap::new();
        assert!(keep_alive(&h, hyper::Version::HTTP_11));
        assert!(!keep_alive(&h, hyper::Version::HTTP_10));
        h.insert(CONNECTION, HeaderValue::from_static("Keep-Alive"));
        assert!(keep_alive(&h, hyper::Version::HTTP_10));
        h.insert(CONNECTION, HeaderValue::from_static("upgrade, Close"));
        assert!(!keep_alive(&h, hyper::Version::HTTP_11));
    }
}
