//! The `graphs` section of `summary.json` and of the terminal summary: each CUDA graph's
//! memory (the executable graph itself apart from its allocation nodes), what each trim gave
//! back, and for a `graphs` pattern the total next to what a linear extrapolation from two
//! sample captures would have budgeted.
//!
//! Every byte count is a device-free difference or a driver attribute, raw. Differences are
//! signed: on a real GPU another process can move device free memory between two readings.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::device::{GraphMemUsage, GraphShape};
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, SignedBytes};
use crate::workload::expand::GraphsSpec;

/// Everything the run measured about CUDA graphs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GraphsSummary {
    /// The driver's graph memory attributes at the end of the run, before anything was
    /// released (the highs are the run's high-water marks).
    pub driver_usage: Option<GraphMemUsage>,
    pub graphs: Vec<GraphRecord>,
    pub trims: Vec<TrimRecord>,
    pub patterns: Vec<GraphPatternReport>,
}

/// One captured graph and what each stage of its life did to device memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GraphRecord {
    pub graph: String,
    /// Where it was captured.
    pub phase: String,
    pub step: String,
    pub stream: String,
    /// Set for a graph a `graphs` pattern captured.
    pub pattern: Option<String>,
    pub batch_size: Option<u32>,
    /// Captured alone as one of the pattern's extrapolation samples.
    pub sample: bool,
    #[serde(flatten)]
    pub shape: GraphShape,
    pub auto_free: Option<bool>,
    pub device_free_before_capture_bytes: u64,
    /// Device free lost across the capture (expected 0: a capture records, it takes nothing).
    pub capture_bytes: Option<i64>,
    /// Device free lost at instantiation: the executable graph itself.
    pub exec_bytes: Option<i64>,
    /// Device free lost at the first upload or launch: the allocation nodes made physical.
    pub first_map_bytes: Option<i64>,
    /// The graph allocator's reserved memory grown at the first upload or launch.
    pub graph_reserved_growth_bytes: Option<i64>,
    pub launches: u64,
    /// Device free after its latest launches.
    pub device_free_after_launches_bytes: Option<u64>,
    /// Device free regained by destroying it (the allocator keeps its memory until a trim).
    pub destroy_returned_bytes: Option<i64>,
    pub destroyed: bool,
}

impl GraphRecord {
    /// Device free lost from the start of its capture to after its latest launches.
    pub fn cost_bytes(&self) -> Option<i64> {
        self.device_free_after_launches_bytes
            .map(|after| self.device_free_before_capture_bytes as i64 - after as i64)
    }
}

/// A `cuDeviceGraphMemTrim` and what it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrimRecord {
    pub phase: String,
    pub step: String,
    pub graph_reserved_before_bytes: u64,
    pub graph_reserved_after_bytes: u64,
    /// reserved before − after.
    pub released_bytes: i64,
    pub device_free_gain_bytes: i64,
}

/// One graph of a `graphs` pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PatternGraph {
    pub batch_size: u32,
    pub graph: String,
    /// Device free lost from the start of its capture to after its replays.
    pub cost_bytes: i64,
    pub exec_bytes: Option<i64>,
    pub graph_reserved_growth_bytes: Option<i64>,
    pub kernel_nodes: u32,
    pub alloc_node_bytes: u64,
}

/// A `graphs` pattern: the measured total next to the linear extrapolation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GraphPatternReport {
    pub name: String,
    pub stream: String,
    /// `descending` or `ascending`.
    pub order: String,
    /// How a graph's work and allocations scale with its batch size.
    pub rule: String,
    /// In capture order.
    pub graphs: Vec<PatternGraph>,
    /// The sum of every graph's cost (the graphs are captured back to back).
    pub measured_total_bytes: i64,
    /// Each captured alone, then destroyed and trimmed.
    pub samples: Vec<PatternGraph>,
    /// Σ over the batch sizes of the line through the two samples' costs.
    pub predicted_total_bytes: i64,
    /// predicted − measured: positive when the extrapolation over-budgets.
    pub error_bytes: i64,
    /// error ÷ measured × 100.
    pub error_percent: f64,
}

/// Σ over `batch_sizes` of the line through `(b1, c1)` and `(b2, c2)`, rounded to the byte.
pub fn linear_extrapolation(samples: [(u32, i64); 2], batch_sizes: &[u32]) -> i64 {
    let [(b1, c1), (b2, c2)] = samples;
    let (b1, c1, b2, c2) = (b1 as i128, c1 as i128, b2 as i128, c2 as i128);
    let n = batch_sizes.len() as i128;
    let offsets: i128 = batch_sizes.iter().map(|b| *b as i128 - b1).sum();
    // n·c1 + (c2 − c1)·Σ(b − b1)/(b2 − b1), in one division so the result is exact.
    let (num, den) = (n * c1 * (b2 - b1) + (c2 - c1) * offsets, b2 - b1);
    let (num, den) = if den < 0 { (-num, -den) } else { (num, den) };
    // Half a byte rounds away from zero.
    let magnitude = (2 * num.abs() + den) / (2 * den);
    (if num < 0 { -magnitude } else { magnitude }) as i64
}

fn pattern_graph(r: &GraphRecord) -> Option<PatternGraph> {
    Some(PatternGraph {
        batch_size: r.batch_size?,
        graph: r.graph.clone(),
        cost_bytes: r.cost_bytes()?,
        exec_bytes: r.exec_bytes,
        graph_reserved_growth_bytes: r.graph_reserved_growth_bytes,
        kernel_nodes: r.shape.kernel_nodes,
        alloc_node_bytes: r.shape.alloc_node_bytes,
    })
}

/// The report of a finished `graphs` pattern, from the records of its graphs.
pub fn pattern_report(
    spec: &GraphsSpec,
    records: &[GraphRecord],
) -> Result<GraphPatternReport, String> {
    let ours = |sample: bool| -> Vec<PatternGraph> {
        records
            .iter()
            .filter(|r| r.pattern.as_deref() == Some(spec.name.as_str()) && r.sample == sample)
            .filter_map(pattern_graph)
            .collect()
    };
    let graphs = ours(false);
    let samples = ours(true);
    let cost_of = |b: u32| {
        samples
            .iter()
            .find(|s| s.batch_size == b)
            .map(|s| s.cost_bytes)
            .ok_or_else(|| format!("the sample capture of batch size {b} has no measurement"))
    };
    let c1 = cost_of(spec.samples[0])?;
    let c2 = cost_of(spec.samples[1])?;
    if graphs.len() != spec.batch_sizes.len() {
        return Err(format!(
            "{} of {} graphs were measured",
            graphs.len(),
            spec.batch_sizes.len()
        ));
    }
    let measured: i64 = graphs.iter().map(|g| g.cost_bytes).sum();
    let predicted = linear_extrapolation(
        [(spec.samples[0], c1), (spec.samples[1], c2)],
        &spec.batch_sizes,
    );
    let error = predicted - measured;
    let error_percent = if measured != 0 {
        error as f64 * 100.0 / measured as f64
    } else {
        0.0
    };
    let rule = format!(
        "batch size b: an output of b × {} bytes left live after each launch, and {} layers each allocating, touching, filling and freeing a workspace of b × {} bytes inside the graph",
        spec.output_per_batch_bytes, spec.layers, spec.workspace_per_batch_bytes
    );
    Ok(GraphPatternReport {
        name: spec.name.clone(),
        stream: spec.stream.clone(),
        order: format!("{:?}", spec.order).to_lowercase(),
        rule,
        graphs,
        measured_total_bytes: measured,
        samples,
        predicted_total_bytes: predicted,
        error_bytes: error,
        error_percent,
    })
}

fn signed(v: Option<i64>) -> String {
    v.map_or("-".into(), |b| SignedBytes(b as i128).to_string())
}

/// Appends the graphs section of the terminal summary.
pub fn render(g: &GraphsSummary, o: &mut String) {
    if g.graphs.is_empty() {
        return;
    }
    let _ = writeln!(o);
    let mut t = TextTable::new(&[
        ("graph", Align::Left),
        ("kernels", Align::Right),
        ("allocs", Align::Right),
        ("alloc nodes", Align::Right),
        ("executable", Align::Right),
        ("first map", Align::Right),
        ("pool growth", Align::Right),
        ("destroy", Align::Right),
    ]);
    for r in g.graphs.iter().filter(|r| !r.sample) {
        t.row([
            r.graph.clone(),
            r.shape.kernel_nodes.to_string(),
            r.shape.alloc_nodes.to_string(),
            Bytes(r.shape.alloc_node_bytes).to_string(),
            signed(r.exec_bytes),
            signed(r.first_map_bytes),
            signed(r.graph_reserved_growth_bytes),
            signed(r.destroy_returned_bytes.map(|b| -b)),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "(device used at each stage: the executable graph at instantiation, its allocation nodes made physical at the first upload or launch; pool growth is the graph allocator's reserved memory)"
    );
    for t in &g.trims {
        let _ = writeln!(
            o,
            "trim_graph_memory at {}/{}: released {} (graph reserved {} → {})",
            t.phase,
            t.step,
            SignedBytes(t.released_bytes as i128),
            Bytes(t.graph_reserved_before_bytes),
            Bytes(t.graph_reserved_after_bytes)
        );
    }
    if let Some(u) = &g.driver_usage {
        let _ = writeln!(
            o,
            "graph memory (driver): used {} (high {}), reserved {} (high {})",
            Bytes(u.used_current_bytes),
            Bytes(u.used_high_bytes),
            Bytes(u.reserved_current_bytes),
            Bytes(u.reserved_high_bytes)
        );
    }
    for p in &g.patterns {
        let _ = writeln!(
            o,
            "graphs {}: {} graphs on stream {} ({} order) cost {} in total; a linear extrapolation from captures of batch sizes {} and {} alone predicted {}: {} ({:+.1}%)",
            p.name,
            p.graphs.len(),
            p.stream,
            p.order,
            SignedBytes(p.measured_total_bytes as i128),
            p.samples.first().map_or(0, |s| s.batch_size),
            p.samples.get(1).map_or(0, |s| s.batch_size),
            SignedBytes(p.predicted_total_bytes as i128),
            SignedBytes(p.error_bytes as i128),
            p.error_percent
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn extrapolation_is_exact_and_rounds_to_the_byte() {
        // A line through (1, 4 MiB) and (512, 544 MiB), summed over 1, 2, 4 … 512.
        let sizes: Vec<u32> = (0..10).map(|i| 1 << i).collect();
        let p = linear_extrapolation([(1, 4 * MIB), (512, 544 * MIB)], &sizes);
        // 10 × 4 MiB + 540 MiB × (1023 − 10) / 511.
        let exact = 10.0 * 4.0 * MIB as f64 + 540.0 * MIB as f64 * 1013.0 / 511.0;
        assert_eq!(p, exact.round() as i64);
        // The samples themselves are predicted exactly, in either order.
        assert_eq!(linear_extrapolation([(8, 100), (2, 40)], &[2, 8]), 140);
        assert_eq!(
            linear_extrapolation([(1, 0), (3, 1)], &[2]),
            1,
            "0.5 rounds up"
        );
        assert_eq!(
            linear_extrapolation([(1, 0), (3, -1)], &[2]),
            -1,
            "−0.5 rounds away"
        );
    }
}
