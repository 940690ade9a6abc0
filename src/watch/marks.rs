//! Phases marked by the job: headroom makes a FIFO and names it in `HEADROOM_MARK`; each line
//! the job writes to it starts a phase named by the line (an empty line ends the current one).
//!
//! The FIFO lives in a private temporary folder (never in the result folder), is kept open for
//! reading and writing by headroom so a writer never blocks and a closed writer is no end of
//! file, and is removed when the watch ends. Lines up to 4 KiB written in one `write` are
//! atomic, so several processes of a job can mark without mixing their lines.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Instant;

use anyhow::Context;

use crate::record::NO_PHASE;
use crate::report::watch::MAX_PHASES;
use crate::sampler::LiveViews;
use crate::watch::Msg;

/// The longest phase name kept, in characters (a longer line is cut).
const MAX_NAME_CHARS: usize = 120;
/// The longest line read; more is cut (and the rest of it dropped).
const MAX_LINE_BYTES: usize = 4096;

/// One line written to the mark FIFO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub t_ns: u64,
    /// The phase it started: its index and unique name; `None` for an empty line (the
    /// current phase ends) or a mark past the phase limit.
    pub phase: Option<(u32, String)>,
    /// Past `MAX_PHASES`: the line is counted, the last phase goes on.
    pub beyond_limit: bool,
    /// The line as written (lossy UTF-8, without its newline).
    pub line: String,
}

/// The FIFO the job writes marks to; removed (with its folder) on drop.
pub struct MarkFifo {
    dir: PathBuf,
    path: PathBuf,
    file: File,
}

impl MarkFifo {
    pub fn create() -> anyhow::Result<MarkFifo> {
        let base = std::env::temp_dir();
        let mut dir = None;
        for n in 0..100u32 {
            let d = base.join(format!("headroom-watch-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {
                    dir = Some(d);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", d.display())),
            }
        }
        let dir = dir.context("cannot find a free folder name for the mark FIFO")?;
        let path = dir.join("mark");
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .context("the temporary folder's path holds a NUL byte")?;
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(e).with_context(|| format!("cannot create the FIFO {}", path.display()));
        }
        // Read and write: opening never blocks, and writers closing is not an end of file.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .with_context(|| format!("cannot open the FIFO {}", path.display()));
        match file {
            Ok(file) => Ok(MarkFifo { dir, path, file }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads marks until `stop`, then what is left; sets the phase in `live` as each arrives.
    pub fn read_until(
        &mut self,
        tx: &Sender<Msg>,
        live: &LiveViews,
        origin: Instant,
        stop: &AtomicBool,
    ) {
        let mut reader = LineReader::default();
        let mut names = PhaseNames::default();
        let mut buf = [0u8; 8192];
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, if stopping { 0 } else { 50 }) };
            if ready > 0
                && let Ok(n) = self.file.read(&mut buf)
                && n > 0
            {
                let t_ns = origin.elapsed().as_nanos() as u64;
                for line in reader.push(&buf[..n]) {
                    let m = names.mark(t_ns, &line);
                    match &m.phase {
                        Some((i, _)) => live.set_phase(*i),
                        None if !m.beyond_limit => live.set_phase(NO_PHASE),
                        None => {}
                    }
                    if tx.send(Msg::Mark(m)).is_err() {
                        return;
                    }
                }
                continue;
            }
            if stopping {
                return;
            }
        }
    }
}

impl Drop for MarkFifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Splits bytes into lines, cutting one that grows past `MAX_LINE_BYTES`.
#[derive(Debug, Default)]
struct LineReader {
    partial: Vec<u8>,
    /// Dropping the rest of a line that was cut.
    skipping: bool,
}

impl LineReader {
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                if !std::mem::take(&mut self.skipping) {
                    out.push(std::mem::take(&mut self.partial));
                }
            } else if !self.skipping {
                self.partial.push(b);
                if self.partial.len() >= MAX_LINE_BYTES {
                    out.push(std::mem::take(&mut self.partial));
                    self.skipping = true;
                }
            }
        }
        out
    }
}

/// Phase names as marked: each line a phase, a repeated name numbered (`step`, `step (2)`).
#[derive(Debug, Default)]
pub struct PhaseNames {
    seen: HashMap<String, u32>,
    count: u32,
}

impl PhaseNames {
    /// The mark a line makes.
    pub fn mark(&mut self, t_ns: u64, raw: &[u8]) -> Mark {
        let line = String::from_utf8_lossy(raw)
            .trim_end_matches('\r')
            .to_string();
        let name: String = line
            .trim()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_NAME_CHARS)
            .collect();
        let mut mark = Mark {
            t_ns,
            phase: None,
            beyond_limit: false,
            line,
        };
        if name.is_empty() {
            return mark;
        }
        if self.count as usize >= MAX_PHASES {
            mark.beyond_limit = true;
            return mark;
        }
        let n = self.seen.entry(name.clone()).or_insert(0);
        *n += 1;
        let unique = if *n == 1 {
            name
        } else {
            format!("{name} ({n})")
        };
        mark.phase = Some((self.count, unique));
        self.count += 1;
        mark
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_writes_and_long_lines_are_cut() {
        let mut r = LineReader::default();
        assert!(r.push(b"lo").is_empty());
        assert_eq!(
            r.push(b"ad\nstep 1\n"),
            vec![b"load".to_vec(), b"step 1".to_vec()]
        );
        let long = vec![b'x'; MAX_LINE_BYTES + 10];
        let out = r.push(&[long.as_slice(), b"\nnext\n"].concat());
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].len(), MAX_LINE_BYTES);
        assert_eq!(out[1], b"next");
    }

    #[test]
    fn repeated_names_are_numbered_and_empty_lines_end_a_phase() {
        let mut p = PhaseNames::default();
        assert_eq!(p.mark(1, b"load\r").phase, Some((0, "load".into())));
        assert_eq!(p.mark(2, b"step").phase, Some((1, "step".into())));
        assert_eq!(p.mark(3, b"  step ").phase, Some((2, "step (2)".into())));
        let end = p.mark(4, b"");
        assert_eq!(end.phase, None);
        assert!(!end.beyond_limit);
        assert_eq!(
            p.mark(5, b"a\x1bb\xff").phase,
            Some((3, "a b\u{fffd}".into()))
        );
    }

    #[test]
    fn marks_past_the_limit_stay_in_the_last_phase() {
        let mut p = PhaseNames::default();
        for i in 0..MAX_PHASES {
            assert!(p.mark(0, format!("p{i}").as_bytes()).phase.is_some());
        }
        let m = p.mark(0, b"one more");
        assert!(m.beyond_limit && m.phase.is_none());
    }

    #[test]
    fn a_fifo_is_read_and_removed() {
        use std::io::Write;
        let mut fifo = MarkFifo::create().unwrap();
        let path = fifo.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        let live = LiveViews::default();
        let stop = AtomicBool::new(true);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"load\nwarmup\n")
            .unwrap();
        fifo.read_until(&tx, &live, Instant::now(), &stop);
        let names: Vec<String> = rx
            .try_iter()
            .filter_map(|m| match m {
                Msg::Mark(m) => m.phase.map(|p| p.1),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["load", "warmup"]);
        assert_eq!(live.snapshot().0, 1);
        drop(fifo);
        assert!(!path.exists());
    }
}
