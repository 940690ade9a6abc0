//! Expanding workloads must be linear in their steps: a capture of 20,000 allocation and free
//! nodes takes ten times a capture of 2,000 (compare `expand/capture/2000` with
//! `expand/capture/20000` in one report: per-element throughput must match within noise), and
//! the same for a plain phase of touches and for many graphs followed by many frees (each free
//! checks the graphs that use the freed name, not every graph).

use std::hint::black_box;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use headroom::workload::Workload;

fn capture(nodes: usize) -> String {
    let steps: Vec<String> = (0..nodes / 2)
        .map(|i| {
            format!(
                "{{ op = \"allocate\", name = \"t{i}\", size = \"1MiB\" }}, {{ op = \"free\", name = \"t{i}\" }}"
            )
        })
        .collect();
    format!(
        "[workload]\nname = \"cap\"\n[[phase]]\nname = \"p\"\nsteps = [\n  {{ op = \"capture\", graph = \"g\", stream = \"g\", steps = [{}] }},\n]\n",
        steps.join(",\n")
    )
}

fn touches(n: usize) -> String {
    format!(
        "[workload]\nname = \"t\"\n[[phase]]\nname = \"p\"\nsteps = [\n  {{ op = \"allocate\", name = \"w\", size = \"4KiB\" }},\n  {{ op = \"repeat\", times = {n}, steps = [{{ op = \"touch\", name = \"w\" }}] }},\n]\n"
    )
}

/// `n / 2` graphs whose kernels use `w`, then `n / 2` allocate-and-free pairs of other names.
fn graphs_then_frees(n: usize) -> String {
    let mut steps = vec!["{ op = \"allocate\", name = \"w\", size = \"4KiB\" }".to_string()];
    steps.extend((0..n / 2).map(|i| {
        format!(
            "{{ op = \"capture\", graph = \"g{i}\", stream = \"s\", steps = [{{ op = \"touch\", name = \"w\" }}] }}"
        )
    }));
    steps.extend((0..n / 2).map(|i| {
        format!(
            "{{ op = \"allocate\", name = \"t{i}\", size = \"4KiB\" }}, {{ op = \"free\", name = \"t{i}\" }}"
        )
    }));
    format!(
        "[workload]\nname = \"gf\"\n[[phase]]\nname = \"p\"\nsteps = [\n  {},\n]\n",
        steps.join(",\n  ")
    )
}

fn expand(c: &mut Criterion) {
    let mut g = c.benchmark_group("expand");
    g.sample_size(10);
    for (what, make) in [
        ("capture", capture as fn(usize) -> String),
        ("touches", touches),
        ("graphs-then-frees", graphs_then_frees),
    ] {
        for n in [2_000usize, 20_000] {
            let text = make(n);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_with_input(BenchmarkId::new(what, n), &text, |b, text| {
                b.iter(|| {
                    black_box(
                        Workload::from_toml(text, Path::new("w.toml"), 80 << 30)
                            .unwrap()
                            .phases
                            .len(),
                    )
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, expand);
criterion_main!(benches);
