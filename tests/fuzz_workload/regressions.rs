//! Inputs the fuzzer found (and ones next to them), each loaded once more through the same
//! checks: loaded or refused within the time limit, without a panic or unbounded memory.

use std::time::Duration;

use headroom::workload::Rank;

use super::oracle::{self, Case};

const GIB: u64 = 1 << 30;

/// Loads `steps` as the only phase of a workload on a 4 GiB device; returns the error text,
/// if refused. Fails on anything the fuzzer fails on, or on a load that takes more than `limit`
/// of CPU time (the work, whatever else the machine runs).
fn load_within(steps: &str, limit: Duration) -> Option<String> {
    let text =
        format!("[workload]\nname = \"r\"\n\n[[phase]]\nname = \"p\"\nsteps = [\n  {steps}\n]\n");
    oracle::quiet_panics();
    let o = oracle::run(&Case {
        text: text.clone(),
        total_bytes: 4 * GIB,
        rank: Rank::SINGLE,
    })
    .unwrap_or_else(|why| panic!("{why}\n{text}"));
    assert!(o.cpu < limit, "took {:?} of CPU: {text}", o.cpu);
    o.error
}

#[test]
fn kv_with_many_short_requests_is_linear() {
    // Each tick walked every request that ever arrived: 100,000 requests took 5·10^9 steps
    // (the bound of a million actions stopped none of them).
    let err = load_within(
        r#"{ op = "kv", requests = 100000, block = "4KiB", blocks_per_request = 1, tick = "0ns" }"#,
        Duration::from_secs(5),
    );
    assert_eq!(err, None);
}

#[test]
fn kv_idle_ticks_between_arrivals_cost_nothing() {
    // With no tick time, the ticks between far-apart arrivals emitted nothing but were walked
    // one by one (2^32 of them), and the tick counter overflowed.
    let err = load_within(
        r#"{ op = "kv", requests = 3, block = "1MiB", blocks_per_request = 1, arrive_every = 4294967295, tick = "0ns" }"#,
        Duration::from_secs(2),
    );
    assert_eq!(err, None);
}

#[test]
fn kv_with_the_most_requests_takes_no_memory_up_front() {
    // A table of every request's blocks (2^32 entries, 32 GiB) was made before the first
    // action, which is refused here (the name), so nothing else costs anything.
    let err = load_within(
        r#"{ op = "kv", name = "no spaces", requests = 4294967295, block = "1MiB", blocks_per_request = 1 }"#,
        Duration::from_secs(2),
    );
    assert!(err.unwrap().contains("may use only letters"));
}

#[test]
fn graphs_with_the_most_layers_are_refused_before_the_capture_is_built() {
    let err = load_within(
        r#"{ op = "graphs", name = "g", stream = "s", batch_sizes = [1, 2], layers = 4294967295, workspace_per_batch = "1B" }"#,
        Duration::from_secs(10),
    );
    assert!(err.unwrap().contains("1000000 headroom expands"));
}

#[test]
fn graphs_sizes_past_2_to_the_64_are_refused() {
    let err = load_within(
        r#"{ op = "graphs", name = "g", stream = "s", batch_sizes = [1, 2], workspace_per_batch = "18446744073709551615B" }"#,
        Duration::from_secs(2),
    );
    // 2 × (2^64 − 1) overflows at the second batch size, and the error says where and why.
    let err = err.expect("refused");
    assert!(
        err.contains("step 1 (graphs), sample batch size 2: workspace_per_batch × batch size 2 is more than 2^64 bytes"),
        "{err}"
    );
}

#[test]
fn a_repeat_of_steps_that_emit_nothing_is_bounded() {
    // `free` with keep_every = 1 keeps every member: no action, so the action bound never
    // stopped 2^32 rounds of it.
    let err = load_within(
        r#"{ op = "allocate", name = "w", size = "1MiB", count = 2 },
  { op = "repeat", times = 4294967295, steps = [{ op = "repeat", times = 4294967295, steps = [{ op = "free", name = "w", keep_every = 1 }] }] }"#,
        Duration::from_secs(10),
    );
    assert!(
        err.unwrap()
            .contains("steps walked so far expand to no action")
    );
}

#[test]
fn comm_channels_without_peers_cost_nothing() {
    let err = load_within(
        r#"{ op = "comm", rank_count = 1, channels = 4294967295, buffer = "1MiB", base = "1MiB" }"#,
        Duration::from_secs(2),
    );
    assert_eq!(err, None);
}

#[test]
fn a_capture_allocating_past_the_action_bound_is_refused_up_front() {
    // Inside a capture, `count` was not checked against the bound before the nodes were made
    // one by one (a million of them, 20 s in a debug build, before the refusal).
    let err = load_within(
        r#"{ op = "capture", graph = "g", stream = "s", steps = [{ op = "allocate", name = "c", size = "1MiB", count = 1000001 }] }"#,
        Duration::from_secs(2),
    );
    assert!(err.unwrap().contains("1000000 headroom expands"));
}
