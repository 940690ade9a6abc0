//! `logging`: one CSV line per allocator call through an upstream — headroom's own
//! allocation log, which `alloc::replay` reads back.
//!
//! Columns (`LOG_HEADER`): `t_ns` (device time after the call, nanoseconds since the device
//! was opened), `action`, `ptr` (hex), `bytes`, `stream` (the harness's stream number) and
//! `detail`. Actions:
//!
//! | action | ptr | bytes | stream | detail |
//! | --- | --- | --- | --- | --- |
//! | `allocate` | the block | requested | allocation stream | |
//! | `free` | the block | requested at allocation | allocation stream | |
//! | `record_stream` | the block | | the other stream | |
//! | `empty_cache` | | bytes released | | |
//! | `failure` | the block (free) or empty (allocate) | requested (allocate) | stream | the call and its error |
//!
//! A write error does not fail the allocation that was being logged: the first one is kept
//! and returned by `flush`, and logging stops there.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::alloc::ptr_map::PtrMap;
use crate::alloc::{AllocError, AllocStats, Allocator, Block};
use crate::device::prelude::*;
use crate::device::{DevPtr, StreamId};
use crate::record::timeline::push_u64;

/// The header line of headroom's allocation log.
pub const LOG_HEADER: [&str; 6] = ["t_ns", "action", "ptr", "bytes", "stream", "detail"];

pub struct LoggingAdaptor {
    upstream: Box<dyn Allocator>,
    out: BufWriter<Box<dyn Write + Send>>,
    /// The line being written, reused: a replayed trace logs millions of lines.
    buf: Vec<u8>,
    /// Live blocks: address → (requested bytes, stream), for the `free` lines.
    live: PtrMap<(u64, StreamId)>,
    error: Option<io::Error>,
    lines: u64,
}

impl LoggingAdaptor {
    /// Logs to `out`, starting with the header line.
    pub fn new(
        upstream: Box<dyn Allocator>,
        out: Box<dyn Write + Send>,
    ) -> io::Result<LoggingAdaptor> {
        let mut out = BufWriter::with_capacity(1 << 16, out);
        writeln!(out, "{}", LOG_HEADER.join(","))?;
        // At once: a killed run's log still has its header.
        out.flush()?;
        Ok(LoggingAdaptor {
            upstream,
            out,
            buf: Vec::with_capacity(128),
            live: PtrMap::default(),
            error: None,
            lines: 0,
        })
    }

    /// Logs to a new file at `path` (replacing it).
    pub fn create(upstream: Box<dyn Allocator>, path: &Path) -> io::Result<LoggingAdaptor> {
        let file = File::create_new(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
        })?;
        LoggingAdaptor::new(upstream, Box::new(file))
    }

    /// Lines written after the header.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes the log; returns the first write error met so far, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }

    pub fn upstream(&self) -> &dyn Allocator {
        self.upstream.as_ref()
    }

    pub fn upstream_mut(&mut self) -> &mut dyn Allocator {
        self.upstream.as_mut()
    }

    fn line(
        &mut self,
        dev: &dyn DeviceCore,
        action: &str,
        ptr: Option<DevPtr>,
        bytes: Option<u64>,
        stream: Option<StreamId>,
        detail: &str,
    ) {
        if self.error.is_some() {
            return;
        }
        // The CSV line by hand, as the csv crate writes it (a field is quoted only when it
        // holds a comma, a quote or a line break): no allocation per line.
        let b = &mut self.buf;
        b.clear();
        push_u64(b, dev.now_ns());
        b.push(b',');
        push_cell(b, action);
        b.push(b',');
        if let Some(p) = ptr {
            push_hex(b, p);
        }
        b.push(b',');
        if let Some(x) = bytes {
            push_u64(b, x);
        }
        b.push(b',');
        if let Some(s) = stream {
            push_u64(b, s.0 as u64);
        }
        b.push(b',');
        push_cell(b, detail);
        b.push(b'\n');
        match self.out.write_all(b) {
            Ok(()) => self.lines += 1,
            Err(e) => self.error = Some(e),
        }
    }
}

/// Appends `v` as `{:#x}` writes it (`0x` and lowercase digits).
fn push_hex(out: &mut Vec<u8>, v: u64) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut v = v;
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(b"0x");
    out.extend_from_slice(&digits[i..]);
}

/// Appends a CSV cell: quoted, its quotes doubled, when it holds a comma, quote or line break.
fn push_cell(out: &mut Vec<u8>, s: &str) {
    if !s.bytes().any(|c| matches!(c, b',' | b'"' | b'\n' | b'\r')) {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    out.push(b'"');
    for c in s.bytes() {
        if c == b'"' {
            out.push(b'"');
        }
        out.push(c);
    }
    out.push(b'"');
}

impl Allocator for LoggingAdaptor {
    fn kind(&self) -> crate::alloc::AllocatorKind {
        self.upstream.kind()
    }

    fn allocate(
        &mut self,
        dev: &mut dyn AllocDevice,
        bytes: u64,
        stream: StreamId,
    ) -> Result<Block, AllocError> {
        match self.upstream.allocate(dev, bytes, stream) {
            Ok(b) => {
                self.live.insert(b.ptr, (b.requested_bytes, b.stream));
                self.line(dev, "allocate", Some(b.ptr), Some(bytes), Some(stream), "");
                Ok(b)
            }
            Err(e) => {
                self.line(
                    dev,
                    "failure",
                    None,
                    Some(bytes),
                    Some(stream),
                    &format!("allocate: {e}"),
                );
                Err(e)
            }
        }
    }

    fn free(&mut self, dev: &mut dyn AllocDevice, ptr: DevPtr) -> Result<(), AllocError> {
        let known = self.live.get(&ptr).copied();
        match self.upstream.free(dev, ptr) {
            Ok(()) => {
                self.live.remove(&ptr);
                let (bytes, stream) = known.map_or((None, None), |(b, s)| (Some(b), Some(s)));
                self.line(dev, "free", Some(ptr), bytes, stream, "");
                Ok(())
            }
            Err(e) => {
                let stream = known.map(|(_, s)| s);
                self.line(
                    dev,
                    "failure",
                    Some(ptr),
                    None,
                    stream,
                    &format!("free: {e}"),
                );
                Err(e)
            }
        }
    }

    fn record_stream(
        &mut self,
        dev: &mut dyn AllocDevice,
        ptr: DevPtr,
        stream: StreamId,
    ) -> Result<(), AllocError> {
        match self.upstream.record_stream(dev, ptr, stream) {
            Ok(()) => {
                self.line(dev, "record_stream", Some(ptr), None, Some(stream), "");
                Ok(())
            }
            Err(e) => {
                self.line(
                    dev,
                    "failure",
                    Some(ptr),
                    None,
                    Some(stream),
                    &format!("record_stream: {e}"),
                );
                Err(e)
            }
        }
    }

    fn empty_cache(&mut self, dev: &mut dyn AllocDevice) -> Result<u64, AllocError> {
        match self.upstream.empty_cache(dev) {
            Ok(released) => {
                self.line(dev, "empty_cache", None, Some(released), None, "");
                Ok(released)
            }
            Err(e) => {
                self.line(
                    dev,
                    "failure",
                    None,
                    None,
                    None,
                    &format!("empty_cache: {e}"),
                );
                Err(e)
            }
        }
    }

    fn refresh(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        self.upstream.refresh(dev)
    }

    fn complete_pending_frees(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        self.upstream.complete_pending_frees(dev)
    }

    fn stats(&self) -> AllocStats {
        self.upstream.stats()
    }

    fn byte_counters(&self) -> (u64, u64, u64) {
        self.upstream.byte_counters()
    }

    fn rounded_size(&self, bytes: u64) -> u64 {
        self.upstream.rounded_size(bytes)
    }

    fn driver_bytes_for(&self, bytes: u64) -> u64 {
        self.upstream.driver_bytes_for(bytes)
    }

    fn largest_free_for(&self, bytes: u64) -> u64 {
        self.upstream.largest_free_for(bytes)
    }

    /// Frees (and logs) every live block, releases the upstream, and flushes the log.
    fn release_all(&mut self, dev: &mut dyn AllocDevice) -> Result<(), AllocError> {
        let live: Vec<DevPtr> = self.live.keys().copied().collect();
        let mut errors = super::release_through(self, dev, live);
        if let Err(e) = self.upstream.release_all(dev) {
            errors.push(e);
        }
        if let Err(e) = self.flush() {
            errors.push(AllocError::Invalid(format!(
                "cannot write the allocation log: {e}"
            )));
        }
        errors.into_iter().next().map_or(Ok(()), Err)
    }
}

impl Drop for LoggingAdaptor {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::direct::DirectAllocator;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;
    use std::sync::{Arc, Mutex};

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_as_the_csv_crate_writes_them() {
        let cells = [
            "",
            "allocate",
            "free: no live block at 0x10",
            "allocate: out of memory, 2 GiB asked",
            "a \"quoted\" word",
            "two\nlines",
            "carriage\rreturn",
        ];
        for c in cells {
            let mut ours = Vec::new();
            push_cell(&mut ours, c);
            let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
            w.write_record(["1", c]).unwrap();
            let theirs = w.into_inner().unwrap();
            assert_eq!([b"1,".as_slice(), &ours, b"\n"].concat(), theirs, "{c:?}");
        }
        for v in [0u64, 9, 10, 0xff, 0x7f00_0000_0000, u64::MAX] {
            let (mut d, mut h) = (Vec::new(), Vec::new());
            push_u64(&mut d, v);
            push_hex(&mut h, v);
            assert_eq!(String::from_utf8(d).unwrap(), v.to_string());
            assert_eq!(String::from_utf8(h).unwrap(), format!("{v:#x}"));
        }
    }

    #[test]
    fn one_line_per_call() {
        let mut d = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let buf = Shared::default();
        let mut a =
            LoggingAdaptor::new(Box::new(DirectAllocator::default()), Box::new(buf.clone()))
                .unwrap();
        let s = StreamId::MAIN;
        let x = a.allocate(&mut d, 4096, s).unwrap();
        assert!(a.allocate(&mut d, 8 << 30, s).is_err());
        a.free(&mut d, x.ptr).unwrap();
        assert!(a.free(&mut d, x.ptr).is_err());
        a.flush().unwrap();
        let bytes = buf.0.lock().unwrap().clone();
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(bytes.as_slice());
        let rows: Vec<Vec<String>> = r
            .records()
            .map(|x| x.unwrap().iter().map(str::to_string).collect())
            .collect();
        assert_eq!(rows[0], LOG_HEADER);
        let actions: Vec<&str> = rows[1..].iter().map(|r| r[1].as_str()).collect();
        assert_eq!(actions, ["allocate", "failure", "free", "failure"]);
        assert_eq!(rows[1][2], format!("{:#x}", x.ptr));
        assert_eq!((rows[1][3].as_str(), rows[1][4].as_str()), ("4096", "0"));
        assert_eq!(
            rows[3][3], "4096",
            "a free line carries the allocation's size"
        );
        assert!(
            rows[2][5].starts_with("allocate: out of memory"),
            "{:?}",
            rows[2]
        );
        assert_eq!(
            rows[4][2],
            format!("{:#x}", x.ptr),
            "a failed free names the address"
        );
        assert_eq!(a.lines(), 4);
    }
}
