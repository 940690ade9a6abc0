//! Whole workload files as TOML text: every section and every step op the parser knows, each
//! field present or not and sometimes of the wrong kind, unknown keys, repeats and captures
//! nested in each other, and phases and step ids that `[expect] oom` can name.

use proptest::prelude::*;

use super::values::{
    Text, boolean, bytes, count, count_u32, duration, edge_u64, float, graph, junk, maybe, name,
    odd_name, quote, size, stream, u32_list, w,
};

/// An inline table `{ op = "OP", key = value, … }`: each field present with its probability,
/// sometimes an unknown key, sometimes a misspelled or missing `op`.
fn table(wild: bool, op: &'static str, fields: Vec<(&'static str, Text, f64)>) -> Text {
    let parts: Vec<BoxedStrategy<Option<String>>> = fields
        .into_iter()
        .map(|(key, value, p)| {
            maybe(p, value)
                .prop_map(move |v| v.map(|v| format!("{key} = {v}")))
                .boxed()
        })
        .collect();
    let op_text = prop_oneof![
        40 => Just(format!("op = {}", quote(op))),
        w(wild, 1) => Just(format!("op = {}", quote(&op.to_uppercase()))),
        w(wild, 1) => Just(String::new()),
        w(wild, 1) => Just("op = 7".to_string()),
    ];
    let extra = maybe(
        if wild { 0.03 } else { 0.0 },
        (
            prop::sample::select(&["bogus", "sizes", "for", "op", "name", "times"][..]),
            junk(),
        )
            .prop_map(|(k, v)| format!("{k} = {v}")),
    );
    (op_text, parts, extra)
        .prop_map(|(op, parts, extra)| {
            let items: Vec<String> = std::iter::once(op)
                .chain(parts.into_iter().flatten())
                .chain(extra)
                .filter(|s| !s.is_empty())
                .collect();
            format!("{{ {} }}", items.join(", "))
        })
        .boxed()
}

/// One of the `good` spellings of an enum, or (wild) a `bad` one.
fn variant(
    wild: bool,
    good: &'static [&'static str],
    bad: &'static str,
) -> BoxedStrategy<&'static str> {
    prop_oneof![4 => prop::sample::select(good), w(wild, 1) => Just(bad)].boxed()
}

/// A field that is there always in a clean file, nearly always in a wild one.
fn needed(wild: bool) -> f64 {
    if wild { 0.97 } else { 1.0 }
}

/// Probability `p` in a wild file, never in a clean one.
fn rare(wild: bool, p: f64) -> f64 {
    if wild { p } else { 0.0 }
}
/// An optional field.
const SOMETIMES: f64 = 0.4;

fn primitive(wild: bool) -> Text {
    prop_oneof![
        6 => table(wild, "allocate", vec![
            ("name", name(wild), needed(wild)),
            ("size", size(wild), needed(wild)),
            ("count", count(wild), SOMETIMES),
            ("via", variant(wild, &["\"allocator\"", "\"driver\""], "\"cpu\"").prop_map(String::from).boxed(), 0.2),
            ("stream", stream(wild), 0.3),
            ("on_oom", variant(wild, &["\"stop\"", "\"continue\""], "\"ignore\"").prop_map(String::from).boxed(), 0.2),
        ]),
        4 => table(wild, "free", vec![("name", name(wild), needed(wild)), ("keep_every", count_u32(wild), 0.2)]),
        2 => table(wild, "touch", vec![("name", name(wild), needed(wild)), ("stride", bytes(wild), 0.3), ("stream", stream(wild), 0.2)]),
        2 => table(wild, "fill", vec![("name", name(wild), needed(wild)), ("seed", count_u32(wild), 0.3), ("stream", stream(wild), 0.2)]),
        2 => table(wild, "verify", vec![("name", name(wild), needed(wild)), ("seed", count_u32(wild), 0.3), ("stream", stream(wild), 0.2)]),
        1 => table(wild, "copy", vec![("src", name(wild), needed(wild)), ("dst", name(wild), needed(wild)), ("stream", stream(wild), 0.2)]),
        1 => table(wild, "triad", vec![
            ("a", name(wild), needed(wild)), ("b", name(wild), needed(wild)), ("c", name(wild), needed(wild)),
            ("scalar", float(), 0.3), ("stream", stream(wild), 0.2),
        ]),
        1 => table(wild, "corrupt", vec![
            ("name", name(wild), needed(wild)), ("offset", bytes(wild), needed(wild)), ("value", count_u32(wild), needed(wild)),
            ("stream", stream(wild), 0.2),
        ]),
        1 => table(wild, "spin", vec![("for", duration(wild), needed(wild)), ("stream", stream(wild), 0.4)]),
        2 => table(wild, "sleep", vec![("for", duration(wild), needed(wild))]),
        2 => table(wild, "synchronize", vec![("stream", stream(wild), SOMETIMES)]),
        1 => table(wild, "trim", vec![("keep", bytes(wild), SOMETIMES)]),
        1 => table(wild, "empty_cache", vec![]),
        1 => table(wild, "record_stream", vec![("name", name(wild), needed(wild)), ("stream", stream(wild), needed(wild))]),
        1 => table(wild, "stack", vec![("frame", bytes(wild), needed(wild))]),
        1 => table(wild, "tenant", vec![("size", size(wild), needed(wild)), ("for", duration(wild), needed(wild))]),
        2 => table(wild, "instantiate", vec![("graph", graph(wild), needed(wild)), ("auto_free", boolean(wild), 0.5)]),
        1 => table(wild, "upload", vec![("graph", graph(wild), needed(wild)), ("stream", stream(wild), 0.3)]),
        2 => table(wild, "replay", vec![("graph", graph(wild), needed(wild)), ("times", count_u32(wild), 0.5), ("stream", stream(wild), 0.2)]),
        1 => table(wild, "destroy_graph", vec![("graph", graph(wild), needed(wild))]),
        1 => table(wild, "trim_graph_memory", vec![]),
        // (more than ten arms: none may weigh 0)
        1 => if wild {
            table(wild, "nonsense", vec![("name", name(wild), 0.5)])
        } else {
            table(wild, "empty_cache", vec![])
        },
    ]
    .boxed()
}

fn pattern(wild: bool) -> Text {
    prop_oneof![
        table(
            wild,
            "weights",
            vec![
                ("name", name(wild), SOMETIMES),
                ("total", size(wild), needed(wild)),
                ("tensors", count_u32(wild), 0.6),
                ("touch", boolean(wild), 0.3),
            ]
        ),
        table(
            wild,
            "activations",
            vec![
                ("name", name(wild), SOMETIMES),
                ("layers", count_u32(wild), needed(wild)),
                ("size", size(wild), needed(wild)),
                ("scratch", size(wild), 0.3),
                (
                    "mode",
                    variant(wild, &["\"train\"", "\"inference\""], "\"eval\"")
                        .prop_map(String::from)
                        .boxed(),
                    0.4
                ),
                ("layer_time", duration(wild), 0.3),
            ]
        ),
        table(
            wild,
            "workspace",
            vec![
                ("name", name(wild), SOMETIMES),
                ("size", size(wild), needed(wild)),
                ("repeats", count_u32(wild), 0.5),
                ("hold", duration(wild), 0.4),
                ("gap", duration(wild), 0.4),
                (
                    "via",
                    prop::sample::select(&["\"allocator\"", "\"driver\""][..])
                        .prop_map(String::from)
                        .boxed(),
                    0.2
                ),
            ]
        ),
        table(
            wild,
            "kv",
            vec![
                ("name", name(wild), SOMETIMES),
                ("requests", count_u32(wild), needed(wild)),
                ("block", bytes(wild), needed(wild)),
                ("blocks_per_request", count_u32(wild), needed(wild)),
                ("prefill_blocks", count_u32(wild), 0.5),
                ("arrive_every", count_u32(wild), 0.5),
                ("tick", duration(wild), 0.5),
            ]
        ),
        table(
            wild,
            "graphs",
            vec![
                ("name", graph(wild), needed(wild)),
                ("stream", stream(wild), needed(wild)),
                ("batch_sizes", u32_list(wild), needed(wild)),
                ("layers", count_u32(wild), 0.5),
                ("workspace_per_batch", bytes(wild), needed(wild)),
                ("output_per_batch", bytes(wild), 0.5),
                (
                    "order",
                    variant(wild, &["\"descending\"", "\"ascending\""], "\"random\"")
                        .prop_map(String::from)
                        .boxed(),
                    0.3
                ),
                ("samples", u32_list(wild), 0.4),
                ("replays", count_u32(wild), 0.4),
                ("auto_free", boolean(wild), 0.4),
            ]
        ),
        table(
            wild,
            "comm",
            vec![
                ("name", name(wild), SOMETIMES),
                (
                    "topology",
                    variant(wild, &["\"ring\"", "\"all_to_all\""], "\"tree\"")
                        .prop_map(String::from)
                        .boxed(),
                    0.5
                ),
                ("buffer", bytes(wild), needed(wild)),
                ("channels", count_u32(wild), 0.5),
                ("rank_count", count_u32(wild), 0.5),
                ("base", size(wild), 0.5),
            ]
        ),
    ]
    .boxed()
}

/// Inner steps of a `repeat` or `capture` (in a clean file, at least one).
fn step_list(wild: bool, inner: Text) -> Text {
    prop::collection::vec(inner, usize::from(!wild)..5)
        .prop_map(|v| format!("[{}]", v.join(", ")))
        .boxed()
}

/// Steps a capture records in a clean file: GPU work on the capture stream (named or not),
/// and repeats of it.
fn capturable(wild: bool) -> Text {
    let leaf = prop_oneof![
        3 => table(wild, "allocate", vec![
            ("name", name(wild), 1.0), ("size", size(wild), 1.0), ("count", count_u32(wild), 0.2),
        ]),
        2 => table(wild, "free", vec![("name", name(wild), 1.0)]),
        2 => table(wild, "touch", vec![("name", name(wild), 1.0)]),
        1 => table(wild, "fill", vec![("name", name(wild), 1.0), ("seed", count_u32(wild), 0.3)]),
        1 => table(wild, "copy", vec![("src", name(wild), 1.0), ("dst", name(wild), 1.0)]),
        1 => table(wild, "spin", vec![("for", duration(wild), 1.0)]),
    ]
    .boxed();
    leaf.prop_recursive(1, 8, 3, move |inner| {
        table(
            wild,
            "repeat",
            vec![
                ("times", count_u32(wild), 1.0),
                ("steps", step_list(wild, inner), 1.0),
            ],
        )
    })
    .boxed()
}

/// Any step, with `repeat` and `capture` nested up to three deep.
pub fn step(wild: bool) -> Text {
    let leaf = prop_oneof![4 => primitive(wild), 1 => pattern(wild)].boxed();
    leaf.prop_recursive(3, 24, 4, move |inner| {
        let recorded = if wild {
            inner.clone()
        } else {
            capturable(wild)
        };
        prop_oneof![
            3 => table(wild, "repeat", vec![
                ("times", count_u32(wild), needed(wild)),
                ("steps", step_list(wild, inner), needed(wild)),
            ]),
            2 => table(wild, "capture", vec![
                ("graph", graph(wild), needed(wild)), ("stream", stream(wild), needed(wild)),
                ("steps", step_list(wild, recorded), needed(wild)),
            ]),
        ]
        .boxed()
    })
    .boxed()
}

fn section(head: &'static str, keys: Vec<(&'static str, Text, f64)>) -> Text {
    let parts: Vec<BoxedStrategy<Option<String>>> = keys
        .into_iter()
        .map(|(k, v, p)| {
            maybe(p, v)
                .prop_map(move |v| v.map(|v| format!("{k} = {v}\n")))
                .boxed()
        })
        .collect();
    parts
        .prop_map(move |p| format!("{head}\n{}\n", p.into_iter().flatten().collect::<String>()))
        .boxed()
}

fn workload_section(wild: bool) -> Text {
    let named = prop_oneof![
        8 => quoted_name(),
        w(wild, 1) => odd_name().prop_map(|n| quote(&n)),
    ];
    section(
        "[workload]",
        vec![
            ("name", named.boxed(), needed(wild)),
            (
                "description",
                prop_oneof![
                    Just(quote("rank {rank} of {rank_count}")),
                    odd_name().prop_map(|n| quote(&n))
                ]
                .boxed(),
                0.3,
            ),
            ("version", Just("2".to_string()).boxed(), rare(wild, 0.02)),
        ],
    )
}

fn quoted_name() -> Text {
    prop::sample::select(&["fuzz", "w.r{rank}", "a b"][..])
        .prop_map(quote)
        .boxed()
}

fn settings(wild: bool) -> Text {
    section(
        "[settings]",
        vec![
            ("sample_interval", duration(wild), 0.6),
            ("keep_free", bytes(wild), 0.4),
            ("allow_oom", boolean(wild), 0.4),
            ("interval", duration(wild), rare(wild, 0.02)),
        ],
    )
}

fn allocator(wild: bool) -> Text {
    let mb = prop_oneof![
        4 => prop::sample::select(&["20", "128", "512"][..]).prop_map(String::from),
        w(wild, 1) => int_edge(),
        w(wild, 1) => Just("\"0\"".to_string()),
    ];
    let fraction = prop_oneof![
        4 => prop::sample::select(&["0.25", "0.5", "0.9", "1.0"][..]).prop_map(String::from),
        w(wild, 1) => prop::sample::select(&["0.0", "1.5", "-0.1", "nan", "\"0.5\"", "1"][..]).prop_map(String::from),
    ];
    let divisions = prop_oneof![
        4 => prop::sample::select(&["4", "\"4\"", "\"[256:1,>:4]\"", "2"][..]).prop_map(String::from),
        w(wild, 1) => prop::sample::select(&["0", "3", "\"[>:0]\"", "\"[\"", "18446744073709551615"][..]).prop_map(String::from),
    ];
    let settings = prop_oneof![
        4 => prop::sample::select(&[
            "\"expandable_segments:True,max_split_size_mb:20\"", "\"backend:native\"",
            "\"roundup_power2_divisions:[1:2,2:4]\"",
        ][..]).prop_map(String::from),
        w(wild, 1) => prop::sample::select(&[
            "\"backend:cudaMallocAsync\"", "\"garbage_collection_threshold:0.6\"", "\":\"",
            "\",,\"", "\"pinned_use_cuda_host_register:True\"",
        ][..]).prop_map(String::from),
    ];
    let pool = section(
        "[allocator]\nkind = \"pool\"",
        vec![
            ("release_threshold", bytes(wild), 0.4),
            ("reuse_opportunistic", boolean(wild), 0.3),
            ("reuse_internal_dependencies", boolean(wild), 0.3),
        ],
    );
    let caching = section(
        "[allocator]\nkind = \"caching\"",
        vec![
            ("max_split_size_mb", mb.clone().boxed(), 0.3),
            ("max_non_split_rounding_mb", mb.boxed(), 0.1),
            ("expandable_segments", boolean(wild), 0.3),
            (
                "garbage_collection_threshold",
                fraction.clone().boxed(),
                rare(wild, 0.15),
            ),
            ("per_process_memory_fraction", fraction.boxed(), 0.3),
            ("roundup_power2_divisions", divisions.boxed(), 0.2),
            ("settings", settings.boxed(), 0.2),
        ],
    );
    let direct = prop::sample::select(&["[allocator]\nkind = \"direct\"\n", "[allocator]\n"][..])
        .prop_map(String::from);
    let mixed = section(
        "[allocator]",
        vec![
            (
                "kind",
                prop::sample::select(
                    &["\"direct\"", "\"pool\"", "\"caching\"", "\"slab\"", "1"][..],
                )
                .prop_map(String::from)
                .boxed(),
                0.9,
            ),
            ("release_threshold", bytes(wild), 0.2),
            ("expandable_segments", boolean(wild), 0.2),
            (
                "garbage_collection_threshold",
                Just("0.5".to_string()).boxed(),
                0.2,
            ),
        ],
    );
    prop_oneof![2 => direct, 3 => pool, 5 => caching, w(wild, 2) => mixed].boxed()
}

fn int_edge() -> BoxedStrategy<String> {
    edge_u64().prop_map(|n| n.to_string()).boxed()
}

fn expect(wild: bool) -> Text {
    let oom = prop_oneof![
        prop::sample::select(
            &[
                "false",
                "true",
                "\"none\"",
                "\"any\"",
                "\"all\"",
                "3",
                "\"/\"",
                "\"a/b/c\""
            ][..]
        )
        .prop_map(String::from),
        (
            phase_name_plain(),
            1..6u32,
            prop::sample::select(&["s", "", "s1.", "x"][..])
        )
            .prop_map(|(p, n, pre)| quote(&format!("{p}/{pre}{n}"))),
    ];
    let views = prop::sample::select(
        &[
            "device_used_bytes",
            "own_bytes",
            "alloc_allocated_bytes",
            "alloc_reserved_bytes",
            "graph_reserved_bytes",
            "pool_used_bytes",
            "nonsense_bytes",
        ][..],
    );
    let peak = prop::collection::vec((views, bytes(wild)), 0..3).prop_map(|v| {
        if v.is_empty() {
            String::new()
        } else {
            let body: String = v.iter().map(|(k, s)| format!("{k} = {s}\n")).collect();
            format!("[expect.peak]\n{body}\n")
        }
    });
    let head = section(
        "[expect]",
        vec![
            ("oom", oom.boxed(), 0.6),
            ("mismatches", count_u32(wild), 0.2),
            ("min_headroom", bytes(wild), 0.2),
        ],
    );
    (head, peak).prop_map(|(h, p)| h + &p).boxed()
}

/// Phase names of a clean file, by position (`[expect] oom` names them too).
const PHASE_NAMES: &[&str] = &["load", "serve", "decode", "p"];

fn phase_name_plain() -> BoxedStrategy<&'static str> {
    prop::sample::select(PHASE_NAMES).boxed()
}

/// A phase of `step`s; in a clean file its name is set by its position (names are unique).
/// `@` in a step (an episode's name) becomes `@I_` for step I.
fn phase(wild: bool, step: Text) -> Text {
    let named = prop_oneof![
        10 => phase_name_plain().prop_map(quote),
        w(wild, 1) => odd_name().prop_map(|n| quote(&n)),
    ];
    let named = maybe(if wild { 0.97 } else { 0.0 }, named);
    (
        named,
        prop::collection::vec(step, usize::from(!wild)..7),
        maybe(rare(wild, 0.02), junk()),
    )
        .prop_map(|(name, steps, extra)| {
            let steps: Vec<String> = steps
                .iter()
                .enumerate()
                .map(|(i, s)| s.replace('@', &format!("@{i}_")))
                .collect();
            let mut s = String::from("[[phase]]\n");
            s += &format!("name = {}\n", name.unwrap_or_else(|| "PHASE".into()));
            s += &format!("steps = [\n  {}\n]\n", steps.join(",\n  "));
            if let Some(x) = extra {
                s += &format!("other = {x}\n");
            }
            s + "\n"
        })
        .boxed()
}

/// A whole workload file, its steps drawn from all the parser knows.
pub fn workload(wild: bool) -> Text {
    workload_of(wild, step(wild))
}

/// A clean workload file of episodes, valid by construction but for what they add up to.
pub fn episodic() -> Text {
    workload_of(false, super::episodes::episode())
}

/// A whole workload file of phases of `step`s (`@` in phase I becomes `pI.`).
fn workload_of(wild: bool, step: Text) -> Text {
    (
        maybe(needed(wild), workload_section(wild)),
        maybe(0.4, settings(wild)),
        maybe(0.4, allocator(wild)),
        maybe(0.3, expect(wild)),
        prop::collection::vec(phase(wild, step), usize::from(!wild)..4),
        maybe(rare(wild, 0.02), Just("[extra]\nkey = 1\n".to_string())),
    )
        .prop_map(|(w, s, a, e, phases, extra)| {
            let mut t = String::new();
            for part in [w, s, a, e].into_iter().flatten() {
                t += &part;
            }
            for (i, p) in phases.iter().enumerate() {
                let unique = quote(PHASE_NAMES[i % PHASE_NAMES.len()]);
                t += &p
                    .replacen("PHASE", &unique, 1)
                    .replace('@', &format!("p{i}."));
            }
            t + &extra.unwrap_or_default()
        })
        .boxed()
}
