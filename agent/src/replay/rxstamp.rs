//! Kernel receive timestamps for the hyper path: the time a response's bytes reached this machine, instead of the
//! time the stream's task got around to them.
//!
//! At hundreds of streams one runtime thread reads every socket; a frame that arrives while the thread is busy with
//! other streams' frames waits in the socket until its turn, and a clock read when the task takes the chunk counts
//! that wait into TTFT and ITL (client-made error). [`RxStream`] is the connection's socket with `SO_TIMESTAMPNS`
//! enabled (Linux): it reads through `recvmsg`, takes the kernel's receive time of the read's bytes from the control
//! message, converts it to the [`Instant`] timeline ([`kernel_arrival`]) and keeps it in the connection's [`RxStamp`],
//! which the stream reads when it takes a body chunk.
//!
//! **Which read's time a chunk gets.** hyper may hand a body chunk out of bytes an earlier read brought (several
//! chunks from one read). The stamp is always that of the *latest* read on the connection, which is the read that
//! brought the chunk's bytes or a later one — never an earlier one, so a TTFT or an ITL gap is never under-reported
//! (a chunk stamped by a later read is late by that read's distance, as a user-space clock would be). For TCP the
//! kernel gives the time of the last segment the read took, so a read that gathers several segments is stamped by
//! its newest one.
//!
//! **Switching the kernel's stamping on takes a moment.** Linux stamps received packets only while some socket
//! asks for it (a static key, switched on by a deferred kernel work item when the first such socket appears, and
//! off again some time after the last one closes). Until that work item has run, TCP reads bring no timestamp; under
//! `chrt -f` (the benches' real-time runs), with the client and the server keeping both cores busy, it ran only
//! after a closed loop's whole first wave. So the pool's warm-up waits for stamps to arrive on a probe connection of
//! its own ([`KernelStamps::ready`], at most 200 ms) and keeps that probe open for the pool's life, which keeps the
//! stamping switched on across reconnects.
//!
//! Without the option (not Linux, `setsockopt` refused, `--rx-clock user`) the socket is read as before and nothing
//! is stamped: the stream reads [`Instant::now`] when it takes the chunk. A read that brings bytes without a
//! timestamp (none should) is stamped with `Instant::now()` at the read, so an older kernel stamp is never reused.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Which clock stamps the arrival of response bytes on the hyper path (`--rx-clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RxClock {
    /// The kernel's receive time of the bytes (`SO_TIMESTAMPNS`; Linux, `http://` through hyper); elsewhere the
    /// user-space clock.
    #[default]
    Kernel,
    /// The moment the stream's task takes the chunk (`Instant::now()`), as before.
    User,
}

/// The longest a read's bytes are taken to have waited in the socket. A larger age means the wall clock was
/// stepped between the kernel's stamp and the read; the arrival is then at most this much before the read (late,
/// never early, by the step).
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// The origin of the packed stamps (set when the first pool is made, long before any read).
pub fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The arrival time of the latest read that brought bytes on one connection, and whether the kernel stamped it;
/// and when the latest write returned (user-space clock).
#[derive(Debug, Default)]
pub struct RxStamp {
    /// `((ns after origin) + 1) << 1 | kernel`; 0 = no read stamped yet.
    packed: AtomicU64,
    /// `(ns after origin) + 1` when the latest write that took bytes returned; 0 = none yet.
    written: AtomicU64,
    /// Bytes the socket took, all writes together (whether a request's bytes left: a request is resent only if
    /// none did).
    bytes_written: AtomicU64,
}

/// `at` as nanoseconds after [`origin`], plus one (0 stands for "none yet").
fn ns_after_origin(at: Instant) -> u64 {
    at.saturating_duration_since(origin()).as_nanos() as u64 + 1
}

/// The inverse of [`ns_after_origin`]; `None` for 0.
fn instant_of(ns: u64) -> Option<Instant> {
    (ns != 0).then(|| origin() + Duration::from_nanos(ns - 1))
}

impl RxStamp {
    pub fn set(&self, at: Instant, kernel: bool) {
        self.packed
            .store((ns_after_origin(at) << 1) | u64::from(kernel), Ordering::Relaxed);
    }

    /// When the latest write returned (`Instant::now()` right after it).
    pub fn written(&self) -> Option<Instant> {
        instant_of(self.written.load(Ordering::Relaxed))
    }

    /// Bytes the socket has taken so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// After a write: when it took bytes, note how many and that it returned now.
    fn note_write(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r
            && *n > 0
        {
            self.written.store(ns_after_origin(Instant::now()), Ordering::Relaxed);
            self.bytes_written.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }

    /// The latest read's arrival time and whether the kernel stamped it; `None` before any stamped read.
    pub fn latest(&self) -> Option<(Instant, bool)> {
        let p = self.packed.load(Ordering::Relaxed);
        instant_of(p >> 1).map(|at| (at, p & 1 == 1))
    }
}

/// The kernel's receive time (`kernel`, wall-clock time since the Unix epoch) on the [`Instant`] timeline, given
/// both clocks read at once right after the read ([`clock_pair`]): `now − (real_now − kernel)`, the age clamped to
/// `[0, MAX_AGE]` (a stamp "in the future" — the wall clock stepped back — is taken as now). Robust to the offset
/// between the two clocks, which is never needed.
pub fn kernel_arrival(kernel: Duration, now: Instant, real_now: SystemTime) -> Instant {
    let age = real_now
        .duration_since(SystemTime::UNIX_EPOCH + kernel)
        .unwrap_or_default()
        .min(MAX_AGE);
    now.checked_sub(age).unwrap_or(now)
}

/// How far apart the two `Instant` reads of [`clock_pair`] may be before it reads the pair again.
pub const PAIR_SLACK: Duration = Duration::from_micros(20);

/// The two clocks read "at once", for [`kernel_arrival`]: the wall clock read between two `Instant` reads and
/// paired with the *later* one. A thread preempted between the reads (a loaded machine) then makes the arrival late
/// by at most the gap, never early: paired with the earlier read, a 2 ms preemption put a frame 2 ms before its bytes
/// arrived (a TTFT under-reported by 2 ms, seen on a loaded machine). Read again, up to three times, while the gap
/// is over [`PAIR_SLACK`]; the last pair is used regardless.
pub fn clock_pair() -> (Instant, SystemTime) {
    let mut tries = 0;
    loop {
        let before = Instant::now();
        let real = SystemTime::now();
        let after = Instant::now();
        tries += 1;
        if after.duration_since(before) <= PAIR_SLACK || tries == 3 {
            return (after, real);
        }
    }
}

/// A loopback TCP connection with kernel receive timestamps on, kept open so that the kernel keeps stamping
/// received packets (see the module docs).
#[derive(Debug)]
pub struct KernelStamps {
    _rx: RxStream,
    _peer: TcpStream,
}

impl KernelStamps {
    /// Open a probe connection with `SO_TIMESTAMPNS` on and wait, up to `limit`, until a byte sent over it comes
    /// back with the kernel's timestamp. Returns the probe (to keep) and whether stamps arrived in time; `None` when
    /// the socket cannot stamp at all (not Linux, the option refused) or the probe could not be set up.
    pub async fn ready(limit: Duration) -> Option<(KernelStamps, bool)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.ok()?;
        let addr = listener.local_addr().ok()?;
        let (tcp, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (tcp, (mut peer, _)) = (tcp.ok()?, accepted.ok()?);
        let (mut rx, stamp) = RxStream::new(tcp, RxClock::Kernel);
        if !rx.kernel() {
            return None;
        }
        let until = Instant::now() + limit;
        let mut byte = [0u8; 1];
        let stamped = loop {
            peer.write_all(b".").await.ok()?;
            rx.read_exact(&mut byte).await.ok()?;
            if stamp.latest().is_some_and(|(_, kernel)| kernel) {
                break true;
            }
            if Instant::now() >= until {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        Some((KernelStamps { _rx: rx, _peer: peer }, stamped))
    }
}

/// A connection's TCP socket, reading through `recvmsg` with the kernel's receive timestamps when enabled.
#[derive(Debug)]
pub struct RxStream {
    tcp: TcpStream,
    stamp: Arc<RxStamp>,
    /// `SO_TIMESTAMPNS` is on: reads go through `recvmsg` and stamp [`RxStamp`].
    kernel: bool,
}

impl RxStream {
    /// Wrap `tcp`; with [`RxClock::Kernel`] ask the kernel for receive timestamps (where it cannot, reads are plain
    /// and stamp nothing). Returns the stamp the reads keep.
    pub fn new(tcp: TcpStream, clock: RxClock) -> (Self, Arc<RxStamp>) {
        let kernel = clock == RxClock::Kernel && enable_timestamps(&tcp);
        let stamp = Arc::new(RxStamp::default());
        (
            RxStream {
                tcp,
                stamp: stamp.clone(),
                kernel,
            },
            stamp,
        )
    }

    /// Reads are stamped by the kernel.
    pub fn kernel(&self) -> bool {
        self.kernel
    }
}

#[cfg(target_os = "linux")]
fn enable_timestamps(tcp: &TcpStream) -> bool {
    nix::sys::socket::setsockopt(tcp, nix::sys::socket::sockopt::ReceiveTimestampns, &true).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn enable_timestamps(_tcp: &TcpStream) -> bool {
    false
}

impl AsyncRead for RxStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        #[cfg(target_os = "linux")]
        if this.kernel {
            return linux::poll_read_stamped(&this.tcp, &this.stamp, cx, buf);
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

/// Writes note when they returned ([`RxStamp::written`]: how long after `t_submit` a request left, in the summary).
impl AsyncWrite for RxStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.stamp.note_write(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.stamp.note_write(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::cell::RefCell;
    use std::io::{self, IoSliceMut};
    use std::os::fd::AsRawFd;
    use std::task::{Context, Poll, ready};
    use std::time::{Duration, Instant};

    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use tokio::io::{Interest, ReadBuf};
    use tokio::net::TcpStream;

    use super::{RxStamp, clock_pair, kernel_arrival};

    /// Room for one `SCM_TIMESTAMPNS` control message (`CMSG_SPACE(16)` = 32 bytes on 64-bit Linux), with margin.
    const CMSG_BYTES: usize = 64;
    /// The most one read takes (hyper's own buffer asks for 8 KiB at first).
    const SCRATCH_BYTES: usize = 64 * 1024;

    thread_local! {
        /// Where `recvmsg` writes (it needs initialized memory; hyper's read buffer is not): one per runtime
        /// thread, the read's bytes are copied out of it at once.
        static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_BYTES].into_boxed_slice());
    }

    pub(super) fn poll_read_stamped(
        tcp: &TcpStream,
        stamp: &RxStamp,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            // `try_io` clears the readiness when the closure says it would block; the loop then waits for the next.
            // A read that took less than it could have drained the socket: as tokio's own `poll_read` does, the
            // readiness is cleared then too (by saying "would block" and keeping the bytes aside), so the next read
            // waits for the next epoll event instead of making a `recvmsg` that can only fail with EAGAIN — one
            // system call per frame saved at one frame per wake-up.
            let mut drained = false;
            match tcp.try_io(Interest::READABLE, || {
                let (n, want) = recv_stamped(tcp.as_raw_fd(), stamp, buf)?;
                if n > 0 && n < want {
                    drained = true;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && drained => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    /// One `recvmsg` into `buf`: (bytes read, bytes it could have read).
    fn recv_stamped(fd: std::os::fd::RawFd, stamp: &RxStamp, buf: &mut ReadBuf<'_>) -> io::Result<(usize, usize)> {
        SCRATCH.with_borrow_mut(|scratch| {
            let want = buf.remaining().min(scratch.len());
            let mut cmsg = [0u8; CMSG_BYTES];
            let (n, kernel) = {
                let mut iov = [IoSliceMut::new(&mut scratch[..want])];
                let msg = recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty()).map_err(io::Error::from)?;
                let kernel = msg.cmsgs().ok().and_then(|mut it| {
                    it.find_map(|c| match c {
                        ControlMessageOwned::ScmTimestampns(ts) => {
                            let secs = u64::try_from(ts.tv_sec()).ok()?;
                            let nanos = u32::try_from(ts.tv_nsec()).ok().filter(|&n| n < 1_000_000_000)?;
                            Some(Duration::new(secs, nanos))
                        }
                        _ => None,
                    })
                });
                (msg.bytes, kernel)
            };
            if n > 0 {
                match kernel {
                    Some(k) => {
                        let (now, real_now) = clock_pair();
                        stamp.set(kernel_arrival(k, now, real_now), true);
                    }
                    None => stamp.set(Instant::now(), false),
                }
                buf.put_slice(&scratch[..n]);
            }
            Ok((n, want))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_arrival_subtracts_the_age_and_clamps_it() {
        let now = Instant::now() + Duration::from_secs(5);
        let real_now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let since_epoch = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        // 3 ms old.
        let k = since_epoch(real_now - Duration::from_millis(3));
        assert_eq!(kernel_arrival(k, now, real_now), now - Duration::from_millis(3));
        // A stamp after the read (the wall clock stepped back): now.
        let k = since_epoch(real_now + Duration::from_millis(3));
        assert_eq!(kernel_arrival(k, now, real_now), now);
        // Older than MAX_AGE (the wall clock stepped forward): at most MAX_AGE early.
        assert_eq!(kernel_arrival(Duration::ZERO, now, real_now), now - MAX_AGE);
    }

    #[test]
    fn clock_pair_never_puts_an_arrival_before_its_stamp() {
        // A "kernel stamp" taken as the wall clock right after an Instant read: the arrival computed from any later
        // clock_pair is at or after that Instant (up to the clocks' rounding), and no later than the pair's Instant.
        for _ in 0..10_000 {
            let before = Instant::now();
            let stamp = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            let (now, real_now) = clock_pair();
            let arrival = kernel_arrival(stamp, now, real_now);
            assert!(
                arrival + Duration::from_micros(1) >= before,
                "{arrival:?} before {before:?}"
            );
            assert!(arrival <= now);
        }
    }

    #[test]
    fn stamps_round_trip() {
        let s = RxStamp::default();
        assert_eq!(s.latest(), None);
        let t = origin() + Duration::from_micros(1234);
        s.set(t, true);
        assert_eq!(s.latest(), Some((t, true)));
        s.set(t + Duration::from_nanos(1), false);
        assert_eq!(s.latest(), Some((t + Duration::from_nanos(1), false)));
        // Before the origin: taken as the origin (later, never earlier).
        if let Some(before) = origin().checked_sub(Duration::from_millis(1)) {
            s.set(before, true);
            assert_eq!(s.latest(), Some((origin(), true)));
        }
    }

    /// A connected pair on 127.0.0.1: (the client's socket, the server's).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let (tcp, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let tcp = tcp.unwrap_or_else(|e| panic!("{e}"));
        (tcp, accepted.unwrap_or_else(|e| panic!("{e}")).0)
    }

    #[tokio::test]
    async fn reads_are_stamped_by_the_kernel_on_linux() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Stamping is switched on (and kept on while `_keep` lives) before the first read that must carry a stamp.
        let _keep = match KernelStamps::ready(Duration::from_secs(5)).await {
            Some((keep, stamped)) => {
                assert!(stamped, "the kernel never stamped the probe's bytes");
                Some(keep)
            }
            None if cfg!(target_os = "linux") => panic!("SO_TIMESTAMPNS refused on Linux"),
            None => None,
        };
        for clock in [RxClock::Kernel, RxClock::User] {
            let (tcp, mut server) = pair().await;
            let (mut rx, stamp) = RxStream::new(tcp, clock);
            assert_eq!(rx.kernel(), cfg!(target_os = "linux") && clock == RxClock::Kernel);
            assert_eq!(stamp.latest(), None);
            let before_send = Instant::now();
            server.write_all(b"hello").await.unwrap_or_else(|e| panic!("{e}"));
            // The bytes wait in the socket while this thread is busy: the kernel's stamp is from before the wait.
            std::thread::sleep(Duration::from_millis(30));
            let mut got = [0u8; 16];
            let n = rx.read(&mut got).await.unwrap_or_else(|e| panic!("{e}"));
            let after_read = Instant::now();
            assert_eq!(&got[..n], b"hello");
            match stamp.latest() {
                Some((at, true)) => {
                    assert!(rx.kernel());
                    assert!(
                        at >= before_send && at <= after_read,
                        "{before_send:?} {at:?} {after_read:?}"
                    );
                    assert!(after_read - at >= Duration::from_millis(25), "{:?}", after_read - at);
                }
                Some((_, false)) => panic!("a read with the option on brought no timestamp"),
                None => assert!(!rx.kernel(), "a kernel-stamped read left no stamp"),
            }
            // EOF stamps nothing new; writes pass through and note when they returned.
            let before_write = Instant::now();
            rx.write_all(b"x").await.unwrap_or_else(|e| panic!("{e}"));
            assert!(
                stamp
                    .written()
                    .is_some_and(|w| w >= before_write && w <= Instant::now())
            );
            let mut one = [0u8; 1];
            server.read_exact(&mut one).await.unwrap_or_else(|e| panic!("{e}"));
            let last = stamp.latest();
            server.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rx.read(&mut got).await.unwrap_or_else(|e| panic!("{e}")), 0);
            assert_eq!(stamp.latest(), last);
        }
    }
}
