//! Steps that are valid by construction, for files that get past the name checks into every
//! corner of the expander: an allocation used and freed, a graph captured, launched and
//! destroyed, a pattern, host and stream steps, and repeats of them.
//!
//! `@` in an episode stands for its own name; the phase and the workload replace it with a
//! prefix unique to the episode's place (`p0.2_`), so episodes never share a name.

use proptest::prelude::*;

use super::values::{Text, quote};

/// A size that fits every device of the run (at most 64 MiB), sometimes odd.
fn small_size() -> Text {
    prop_oneof![
        4 => (1..=64u64).prop_map(|n| quote(&format!("{n}MiB"))),
        2 => (1..=1024u64).prop_map(|n| quote(&format!("{n}KiB"))),
        1 => (1..=100_000u64).prop_map(|n| n.to_string()),
        1 => (1..=50u32).prop_map(|p| quote(&format!("0.{p:02}% of total"))),
    ]
    .boxed()
}

/// Mostly few, sometimes many, rarely up to past the action bound (such a case costs a
/// million actions' work).
fn how_many() -> BoxedStrategy<u64> {
    prop_oneof![400 => 1..5u64, 60 => 5..100u64, 1 => prop::sample::select(&[65_536u64, 333_334, 999_999, 1_000_000][..])]
        .boxed()
}

fn short() -> Text {
    prop_oneof![
        3 => Just(quote("0ns")),
        3 => (1..=20u64).prop_map(|n| quote(&format!("{n}us"))),
        2 => (1..=5u64).prop_map(|n| quote(&format!("{n}ms"))),
    ]
    .boxed()
}

/// An allocation (or a group), some work on it, its free.
fn buffer() -> Text {
    let group = (small_size(), how_many(), any::<bool>(), 0..4usize, 1..4u32, any::<bool>()).prop_map(
        |(size, n, driver, uses, seed, keep)| {
            let via = if driver { ", via = \"driver\"" } else { "" };
            let mut s = vec![format!("{{ op = \"allocate\", name = \"@\", size = {size}, count = {n}{via} }}")];
            let ops = ["touch", "fill", "record_stream", "fill"];
            for op in &ops[..uses] {
                s.push(match *op {
                    "record_stream" => "{ op = \"record_stream\", name = \"@\", stream = \"s1\" }".into(),
                    "fill" => format!("{{ op = \"fill\", name = \"@\", seed = {seed} }}, {{ op = \"verify\", name = \"@\", seed = {seed} }}"),
                    op => format!("{{ op = \"{op}\", name = \"@\", stream = \"s1\" }}"),
                });
            }
            if keep && n > 1 {
                s.push(format!("{{ op = \"free\", name = \"@\", keep_every = {} }}", (n / 2).max(2)));
            }
            s.push("{ op = \"free\", name = \"@\" }".into());
            s.join(", ")
        },
    );
    let kernels = (small_size(), any::<bool>()).prop_map(|(size, corrupt)| {
        let mut s = vec![
            format!("{{ op = \"allocate\", name = \"@\", size = {size}, count = 3 }}"),
            "{ op = \"fill\", name = \"@[0]\" }".to_string(),
            "{ op = \"copy\", src = \"@[0]\", dst = \"@[1]\", stream = \"s2\" }".into(),
            "{ op = \"triad\", a = \"@[2]\", b = \"@[0]\", c = \"@[1]\", scalar = 2.0 }".into(),
        ];
        if corrupt {
            s.push("{ op = \"corrupt\", name = \"@[0]\", offset = 0, value = 7 }".into());
            s.push("{ op = \"verify\", name = \"@[0]\" }".into());
        }
        s.push("{ op = \"free\", name = \"@\" }".into());
        s.join(", ")
    });
    let fill = (prop::sample::select(&["2MiB", "64MiB", "1GiB", "4KiB"][..]), any::<bool>()).prop_map(|(size, cont)| {
        let on_oom = if cont { ", on_oom = \"continue\"" } else { "" };
        format!("{{ op = \"allocate\", name = \"@\", size = \"{size}\", count = \"fill\"{on_oom} }}, {{ op = \"free\", name = \"@\" }}")
    });
    prop_oneof![6 => group, 2 => kernels, 1 => fill].boxed()
}

/// A graph captured, instantiated, launched and destroyed, its output freed, memory trimmed.
fn graph() -> Text {
    (small_size(), small_size(), 1..4u32, any::<bool>(), 0..3u32, how_many()).prop_map(
        |(ws, out, layers, upload, nested, replays)| {
            let mut body = Vec::new();
            for _ in 0..layers {
                body.push(format!("{{ op = \"allocate\", name = \"@w\", size = {ws} }}, {{ op = \"touch\", name = \"@w\" }}, {{ op = \"fill\", name = \"@w\", stream = \"gs\" }}, {{ op = \"free\", name = \"@w\" }}"));
            }
            if nested > 0 {
                body.push(format!("{{ op = \"repeat\", times = {nested}, steps = [{{ op = \"spin\", for = \"1us\" }}] }}"));
            }
            body.push(format!("{{ op = \"allocate\", name = \"@o\", size = {out} }}"));
            let mut s = vec![
                format!("{{ op = \"capture\", graph = \"@g\", stream = \"gs\", steps = [{}] }}", body.join(", ")),
                "{ op = \"instantiate\", graph = \"@g\", auto_free = true }".into(),
            ];
            if upload {
                s.push("{ op = \"upload\", graph = \"@g\" }".into());
            }
            s.push(format!("{{ op = \"replay\", graph = \"@g\", times = {} }}", replays.min(u32::MAX as u64)));
            s.push("{ op = \"synchronize\", stream = \"gs\" }".into());
            s.push("{ op = \"destroy_graph\", graph = \"@g\" }".into());
            s.push("{ op = \"free\", name = \"@o\" }".into());
            s.push("{ op = \"trim_graph_memory\" }".into());
            s.join(", ")
        },
    )
    .boxed()
}

/// A pattern step, named by the episode.
fn pattern() -> Text {
    prop_oneof![
        (how_many(), any::<bool>()).prop_map(|(n, touch)| format!(
            "{{ op = \"weights\", name = \"@\", total = \"1GiB\", tensors = {n}, touch = {touch} }}, {{ op = \"free\", name = \"@\" }}"
        )),
        (how_many(), small_size(), any::<bool>(), any::<bool>(), short()).prop_map(|(layers, size, scratch, train, t)| format!(
            "{{ op = \"activations\", name = \"@\", layers = {layers}, size = {size}{}, mode = \"{}\", layer_time = {t} }}",
            if scratch { ", scratch = \"1MiB\"" } else { "" },
            if train { "train" } else { "inference" }
        )),
        (small_size(), how_many(), short(), short()).prop_map(|(size, n, hold, gap)| format!(
            "{{ op = \"workspace\", name = \"@\", size = {size}, repeats = {n}, hold = {hold}, gap = {gap} }}"
        )),
        (how_many(), 1..6u32, 0..3u32, 1..4u32, short()).prop_map(|(requests, per, pre, every, tick)| format!(
            "{{ op = \"kv\", name = \"@\", requests = {requests}, block = \"2MiB\", blocks_per_request = {per}, prefill_blocks = {}, arrive_every = {every}, tick = {tick} }}",
            pre.clamp(1, per)
        )),
        (prop::collection::btree_set(1..64u32, 2..6), 1..3u32, any::<bool>(), 1..4u32).prop_map(|(sizes, layers, asc, replays)| {
            let sizes: Vec<String> = sizes.iter().map(u32::to_string).collect();
            format!(
                "{{ op = \"graphs\", name = \"@\", stream = \"gs\", batch_sizes = [{}], layers = {layers}, workspace_per_batch = \"64KiB\", output_per_batch = \"4KiB\", order = \"{}\", replays = {replays} }}, {{ op = \"destroy_graph\", graph = \"@\" }}, {{ op = \"free\", name = \"@.out\" }}",
                sizes.join(", "),
                if asc { "ascending" } else { "descending" }
            )
        }),
        (any::<bool>(), 1..9u32, 1..9u32).prop_map(|(ring, channels, ranks)| format!(
            "{{ op = \"comm\", name = \"@\", topology = \"{}\", buffer = \"1MiB\", channels = {channels}, rank_count = {}, base = \"4MiB\" }}, {{ op = \"free\", name = \"@\" }}",
            if ring { "ring" } else { "all_to_all" },
            ranks.max(1)
        )),
    ]
    .boxed()
}

/// Host and stream steps that name nothing.
fn host() -> Text {
    prop_oneof![
        short().prop_map(|d| format!("{{ op = \"sleep\", for = {d} }}")),
        (1..=20u64).prop_map(|d| format!("{{ op = \"spin\", for = \"{d}us\", stream = \"s1\" }}, {{ op = \"synchronize\", stream = \"s1\" }}")),
        Just("{ op = \"synchronize\" }".to_string()),
        Just("{ op = \"empty_cache\" }".to_string()),
        small_size().prop_map(|k| format!("{{ op = \"trim\", keep = {} }}", if k.contains('%') { "0".into() } else { k })),
        prop::sample::select(&["1KiB", "64KiB", "512B"][..]).prop_map(|f| format!("{{ op = \"stack\", frame = \"{f}\" }}")),
        small_size().prop_map(|s| format!("{{ op = \"tenant\", size = {s}, for = \"1ms\" }}")),
    ]
    .boxed()
}

/// One episode, or a repeat of a few (each renamed apart).
pub fn episode() -> Text {
    let leaf = prop_oneof![5 => buffer(), 2 => graph(), 3 => pattern(), 2 => host()].boxed();
    leaf.prop_recursive(2, 12, 3, |inner| {
        let times = prop_oneof![40 => 1..4u64, 8 => 4..20u64, 1 => how_many()];
        (times, prop::collection::vec(inner, 1..4))
            .prop_map(|(times, inner)| {
                let steps: Vec<String> = inner
                    .iter()
                    .enumerate()
                    .map(|(k, s)| s.replace('@', &format!("@{k}r")))
                    .collect();
                format!(
                    "{{ op = \"repeat\", times = {times}, steps = [{}] }}",
                    steps.join(", ")
                )
            })
            .boxed()
    })
    .boxed()
}
