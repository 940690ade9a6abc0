//! `explain` on inputs that are not a plain log: a device of random bytes (refused as binary)
//! and colour codes around and inside a message (read through).

use headroom::explain::explain_text;

fn run(args: &[&str]) -> crate::common::Out {
    crate::common::headroom(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

#[test]
fn a_device_of_random_bytes_is_refused_as_binary() {
    let out = run(&["explain", "/dev/urandom"]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.contains("/dev/urandom: not a text log:")
            && out.stderr.contains("NUL or control bytes"),
        "{}",
        out.stderr
    );
}

#[test]
fn colour_codes_around_and_inside_a_message_do_not_hide_it() {
    let text = "\u{1b}[1;31mtorch.OutOfMemoryError\u{1b}[0m: CUDA out of memory. Tried to \
                allocate \u{1b}[1m20.00 MiB\u{1b}[0m. GPU 0 has a total capacity of \
                \u{1b}[33m79.19 GiB\u{1b}[0m of which 6.00 MiB is free.\n";
    let r = explain_text(text);
    assert_eq!(r.explanations.len(), 1, "{:?}", r.unrecognized);
    let m = serde_json::to_value(&r.explanations[0].message).unwrap();
    assert_eq!(m["raised_as"], "torch.OutOfMemoryError");
    // 20.00 MiB is [19.995, 20.005] MiB; 79.19 GiB is [79.185, 79.195] GiB.
    assert_eq!(m["requested"]["low"], 20_966_278u64);
    assert_eq!(m["device_total"]["high"], 85_034_983_751u64);
}

#[test]
fn a_signal_while_explain_reads_ends_it_at_once_without_a_promise_to_stop_later() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    // stdin stays open: explain waits for more of the log.
    let mut child = Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(["explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open until it has exited: the end of its input would end it too.
    let stdin = child.stdin.take();
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    drop(stdin);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!stderr.contains("stopping after this step"), "{stderr}");
}
