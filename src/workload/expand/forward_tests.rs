//! The check's fast-forward agrees exactly with a walk of every action: the same actions per
//! phase, the same facts, the same refusal (message and place) where one is refused.

use crate::workload::Rank;
use crate::workload::expand::{MAX_ACTIONS, expand_with};
use crate::workload::parse::parse;
use std::path::Path;

const GIB: u64 = 1 << 30;

/// (phase name, planned actions) of each phase, and the facts; or the refusal as shown.
type Seen = Result<(Vec<(String, u64)>, crate::workload::facts::Facts), String>;

thread_local! {
    /// Actions counted and not made, by this thread's checks so far.
    pub(super) static COUNTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn seen(text: &str, total: u64, forward: bool) -> Seen {
    let path = Path::new("f.toml");
    let file = parse(text, path).map_err(|e| e.to_string())?;
    let w = expand_with(file, path, total, Rank::SINGLE, forward).map_err(|e| e.to_string())?;
    Ok((
        w.phases
            .iter()
            .map(|p| (p.name.clone(), p.planned))
            .collect(),
        w.facts,
    ))
}

/// The check with and without fast-forward, which must agree; returns what they saw.
fn agree(steps: &str, expect: &str) -> Seen {
    let text = format!(
        "[workload]\nname = \"f\"\n{expect}\n[[phase]]\nname = \"p\"\nsteps = [\n{steps}\n]\n"
    );
    let counted = COUNTED.get();
    let forwarded = seen(&text, 4 * GIB, true);
    // Most of each of these is counted, not walked.
    let most = forwarded
        .as_ref()
        .map_or(0, |(p, _)| p.iter().map(|p| p.1).sum::<u64>());
    assert!(
        COUNTED.get() - counted >= most / 2,
        "{} of {most} counted: {text}",
        COUNTED.get() - counted
    );
    let walked = seen(&text, 4 * GIB, false);
    assert_eq!(forwarded, walked, "{text}");
    forwarded
}

fn planned(s: &Seen) -> u64 {
    s.as_ref().expect("accepted").0.iter().map(|p| p.1).sum()
}

fn refusal(s: &Seen) -> &str {
    s.as_ref().expect_err("refused")
}

const KV: &str = r#"{ op = "kv", name = "kv", requests = 3000, block = "4KiB", blocks_per_request = 9, prefill_blocks = 2, arrive_every = 3"#;

#[test]
fn kv_arrivals_counted_agree_with_every_one_walked() {
    for tick in ["0ms", "2ms"] {
        let s = agree(&format!("{KV}, tick = \"{tick}\" }},"), "");
        assert!(planned(&s) >= 3000 * 18, "{s:?}");
    }
    // Requests that overlap (arriving each tick), then none at all (arriving seldom).
    for every in [1, 40] {
        let s = agree(
            &format!(
                r#"{{ op = "kv", name = "kv", requests = 2000, block = "4KiB", blocks_per_request = 30, prefill_blocks = 1, arrive_every = {every}, tick = "0ms" }},"#
            ),
            "",
        );
        assert!(planned(&s) >= 2000 * 60, "{s:?}");
    }
}

#[test]
fn an_expected_oom_inside_counted_arrivals_is_found_and_one_past_them_is_not() {
    let steps = format!("{KV}, tick = \"1ms\" }},");
    let all = planned(&agree(&steps, ""));
    let found = agree(&steps, &format!("[expect]\noom = \"p/s1.{}\"\n", all / 2));
    assert_eq!(planned(&found), all);
    let past = agree(&steps, &format!("[expect]\noom = \"p/s1.{}\"\n", all + 1));
    assert!(refusal(&past).contains("names no step"), "{past:?}");
}

#[test]
fn kv_refusals_come_at_the_same_action_as_a_walk() {
    // 30 days of ticks run out part-way through the arrivals.
    let s = agree(
        r#"{ op = "kv", name = "kv", requests = 100000, block = "4KiB", blocks_per_request = 4, prefill_blocks = 1, arrive_every = 2, tick = "1h" },"#,
        "",
    );
    assert!(refusal(&s).contains("more than 30 days"), "{s:?}");
    // Block names grow past 200 characters at request 10: refused there.
    let long = "k".repeat(193);
    let s = agree(
        &format!(
            r#"{{ op = "kv", name = "{long}", requests = 5000, block = "4KiB", blocks_per_request = 4, prefill_blocks = 1, arrive_every = 1, tick = "0ms" }},"#
        ),
        "",
    );
    assert!(refusal(&s).contains("characters long"), "{s:?}");
    // A name the pattern would make is already live: refused when it is made.
    let s = agree(
        &format!(
            "{{ op = \"allocate\", name = \"kv.r2500[3]\", size = \"4KiB\" }},\n{KV}, tick = \"0ms\" }},"
        ),
        "",
    );
    assert!(refusal(&s).contains("already live"), "{s:?}");
}

#[test]
fn the_shipped_kv_pattern_grown_past_the_old_bound_is_counted() {
    // 65,536 requests of 64 blocks: 8.4 million actions, checked without making them all.
    let s = seen(
        "[workload]\nname = \"f\"\n[[phase]]\nname = \"p\"\nsteps = [{ op = \"kv\", name = \"kv\", requests = 65536, block = \"2MiB\", blocks_per_request = 64, prefill_blocks = 16, arrive_every = 2, tick = \"2ms\" }]\n",
        143 * GIB,
        true,
    );
    let n = planned(&s);
    assert!(n > 1_000_000 && n <= MAX_ACTIONS, "{n}");
}

#[test]
fn repeat_rounds_counted_agree_with_every_one_walked() {
    let s = agree(
        r#"{ op = "allocate", name = "w", size = "4KiB" },
{ op = "repeat", times = 20000, steps = [
  { op = "touch", name = "w" },
  { op = "allocate", name = "t", size = "8KiB", count = 3 },
  { op = "fill", name = "t" },
  { op = "verify", name = "t" },
  { op = "free", name = "t" },
  { op = "spin", for = "1us", stream = "s2" },
  { op = "repeat", times = 50, steps = [{ op = "sleep", for = "1us" }] },
] },"#,
        "",
    );
    assert_eq!(planned(&s), 1 + 20000 * (1 + 3 + 3 + 3 + 3 + 1 + 50));
    // Graphs captured, launched and destroyed every round.
    let s = agree(
        r#"{ op = "repeat", times = 5000, steps = [
  { op = "capture", graph = "g", stream = "s", steps = [
    { op = "allocate", name = "o", size = "4MiB" },
    { op = "fill", name = "o" },
    { op = "free", name = "o" },
  ] },
  { op = "instantiate", graph = "g", auto_free = true },
  { op = "replay", graph = "g", times = 3 },
  { op = "destroy_graph", graph = "g" },
] },"#,
        "",
    );
    assert!(planned(&s) > 5000 * 8, "{s:?}");
}

#[test]
fn repeat_refusals_and_expected_ooms_agree_with_a_walk() {
    let s = agree(
        r#"{ op = "repeat", times = 100000, steps = [{ op = "sleep", for = "1h" }] },"#,
        "",
    );
    assert!(refusal(&s).contains("round 721"), "{s:?}");
    let s = agree(
        r#"{ op = "allocate", name = "w", size = "4KiB" },
{ op = "repeat", times = 300000, steps = [{ op = "touch", name = "w" }, { op = "synchronize" }] },"#,
        "[expect]\noom = \"p/s2.400001\"\n",
    );
    assert_eq!(planned(&s), 600001);
    // Every round makes no action: refused at the bound on such steps, as walked.
    let s = agree(
        r#"{ op = "allocate", name = "w", size = "4KiB", count = 2 },
{ op = "repeat", times = 2000000, steps = [{ op = "free", name = "w", keep_every = 1 }] },"#,
        "",
    );
    assert!(refusal(&s).contains("expand to no action"), "{s:?}");
}

#[test]
fn the_bound_is_ten_million_actions_and_counted_rounds_reach_it() {
    // (Counted only: a walk of every action would take a while in a debug build.)
    let text = |times: u32, body: &str| {
        format!(
            "[workload]\nname = \"f\"\n[[phase]]\nname = \"p\"\nsteps = [\n{{ op = \"allocate\", name = \"w\", size = \"4KiB\" }},\n{{ op = \"repeat\", times = {times}, steps = [{body}] }},\n]\n"
        )
    };
    let touch = r#"{ op = "touch", name = "w" }"#;
    let s = seen(&text(9_999_999, touch), 4 * GIB, true);
    assert_eq!(planned(&s), MAX_ACTIONS);
    // One more is refused, naming the bound.
    let s = seen(
        &text(5_000_000, &format!("{touch}, {touch}")),
        4 * GIB,
        true,
    );
    assert!(refusal(&s).contains("more than the 10000000"), "{s:?}");
}

#[test]
fn workspace_repeats_and_inference_layers_counted_agree_with_a_walk() {
    for (hold, gap) in [("0ms", "0ms"), ("1ms", "2ms")] {
        let s = agree(
            &format!(
                r#"{{ op = "workspace", name = "ws", size = "1MiB", repeats = 30000, hold = "{hold}", gap = "{gap}" }},"#
            ),
            "",
        );
        assert!(planned(&s) >= 90000, "{s:?}");
    }
    let s = agree(
        r#"{ op = "activations", name = "a", layers = 30000, size = "1MiB", scratch = "64KiB", mode = "inference", layer_time = "1us" },"#,
        "[expect]\noom = \"p/s1.77777\"\n",
    );
    assert!(planned(&s) > 30000 * 4, "{s:?}");
    // A layer's name already live: refused when that layer is allocated.
    let s = agree(
        r#"{ op = "allocate", name = "a[20000]", size = "4KiB" },
{ op = "activations", name = "a", layers = 30000, size = "1MiB", mode = "inference" },"#,
        "",
    );
    assert!(refusal(&s).contains("already live"), "{s:?}");
}

#[test]
fn more_names_live_at_once_than_the_bound_are_refused() {
    let s = agree(
        r#"{ op = "allocate", name = "a", size = "512B", count = 1000000 },
{ op = "allocate", name = "b", size = "512B" },"#,
        "",
    );
    assert!(refusal(&s).contains("more than the 1000000"), "{s:?}");
}

#[test]
fn a_device_expansion_after_the_check_is_the_walk_for_that_device() {
    use crate::workload::WorkloadFile;
    let texts = [
        // Absolute sizes: the check's walk is reused, for a device that holds 3 GiB or not.
        "{ op = \"allocate\", name = \"a\", size = \"3GiB\" },\n{ op = \"touch\", name = \"a\" },\n{ op = \"free\", name = \"a\" },",
        // A share of the device, and a fill: walked again for the device.
        "{ op = \"allocate\", name = \"a\", size = \"40% of total\" },\n{ op = \"free\", name = \"a\" },",
        "{ op = \"allocate\", name = \"f\", size = \"1GiB\", count = \"fill\" },\n{ op = \"free\", name = \"f\" },",
    ];
    for steps in texts {
        let text = format!(
            "[workload]\nname = \"f\"\n[settings]\nallow_oom = true\n[[phase]]\nname = \"p\"\nsteps = [\n{steps}\n]\n"
        );
        for total in [2 * GIB, 4 * GIB] {
            let path = Path::new("f.toml");
            let checked = WorkloadFile::from_text(&text, path, Rank::SINGLE).unwrap();
            checked.check().unwrap();
            let fresh = WorkloadFile::from_text(&text, path, Rank::SINGLE).unwrap();
            let view = |w: Result<crate::workload::Workload, _>| {
                w.map(|w| {
                    let actions: Vec<_> =
                        w.actions().map(|(pi, p)| (pi, p.label, p.action)).collect();
                    (w.facts.clone(), w.planned_peak_bytes(), actions)
                })
                .map_err(|e: crate::workload::parse::WorkloadError| e.to_string())
            };
            assert_eq!(
                view(checked.expand(total)),
                view(fresh.expand(total)),
                "{text} on {total}"
            );
        }
    }
}
