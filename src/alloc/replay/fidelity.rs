//! How closely a replay follows the allocator that recorded the trace: for every request,
//! the segments the recording allocator took from or gave back to the driver, next to the
//! ones the replayed allocator did. Kinds and sizes are compared, not addresses (the replay
//! has its own); adjacent mapped or unmapped pages of one request count as one range on both
//! sides, since PyTorch records a range per call and the model maps page by page.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of segment decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentOpKind {
    /// `cudaMalloc` of a segment (`segment_alloc`).
    SegmentAlloc,
    /// `cudaFree` of a segment (`segment_free`).
    SegmentFree,
    /// Pages mapped into an expandable segment (`segment_map`).
    Map,
    /// Pages unmapped from an expandable segment (`segment_unmap`).
    Unmap,
}

impl SegmentOpKind {
    pub fn name(self) -> &'static str {
        match self {
            SegmentOpKind::SegmentAlloc => "segment_alloc",
            SegmentOpKind::SegmentFree => "segment_free",
            SegmentOpKind::Map => "segment_map",
            SegmentOpKind::Unmap => "segment_unmap",
        }
    }
}

/// One segment decision: kind, address (the recording's or the replay's own) and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SegmentOp {
    pub kind: SegmentOpKind,
    pub ptr: u64,
    pub bytes: u64,
}

/// The first request where the replay did not do what the recording did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Divergence {
    /// Position in the source (a snapshot's trace entry).
    pub at: u64,
    /// The request, in words (`alloc of 3145728 bytes on stream 0`).
    pub request: String,
    /// Where the program made it, when the source records frames.
    pub origin: Option<String>,
    /// `served` or `refused`, in the recording and in the replay.
    pub recorded_outcome: String,
    pub replayed_outcome: String,
    /// Segment decisions, `kind bytes` each.
    pub recorded: Vec<String>,
    pub replayed: Vec<String>,
}

/// The agreement over a whole replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Fidelity {
    pub requests_compared: u64,
    /// Segment decisions the recording made.
    pub recorded_decisions: u64,
    /// Of those, how many the replay made for the same request (same kind and size).
    pub reproduced_decisions: u64,
    /// Decisions the replay made that the recording did not.
    pub extra_decisions: u64,
    /// Requests served in one and refused in the other.
    pub outcome_mismatches: u64,
    /// Requests with any difference.
    pub divergent_requests: u64,
    pub first_divergence: Option<Divergence>,
}

impl Fidelity {
    /// Reproduced decisions over all decisions either side made, in percent (100 when
    /// neither made any).
    pub fn percent(&self) -> f64 {
        let all = self.recorded_decisions + self.extra_decisions;
        if all == 0 {
            100.0
        } else {
            self.reproduced_decisions as f64 * 100.0 / all as f64
        }
    }

    /// Every decision and outcome reproduced.
    pub fn is_exact(&self) -> bool {
        self.divergent_requests == 0
    }

    /// `100% (412/412)`, or `99.5% (410/412, 2 more by the replay)`.
    pub fn summary(&self) -> String {
        let pct = self.percent();
        // Never print 100% for a replay that is not exact.
        let shown = if self.is_exact() {
            format!("{pct:.0}%")
        } else {
            format!("{:.1}%", pct.min(99.9))
        };
        let mut s = format!(
            "{shown} ({}/{}",
            self.reproduced_decisions, self.recorded_decisions
        );
        if self.extra_decisions > 0 {
            s.push_str(&format!(", {} more by the replay", self.extra_decisions));
        }
        s.push(')');
        s
    }

    /// Compares one request's decisions and outcomes and adds them to the totals.
    /// `describe` is called only for the first divergence.
    pub fn add(
        &mut self,
        at: u64,
        recorded: &[SegmentOp],
        replayed: &[SegmentOp],
        recorded_served: bool,
        replayed_served: bool,
        describe: impl FnOnce() -> (String, Option<String>),
    ) {
        if recorded.is_empty() && replayed.is_empty() && recorded_served == replayed_served {
            // Most requests: no decision on either side, the same outcome.
            self.requests_compared += 1;
            return;
        }
        let rec = canonical(recorded);
        let rep = canonical(replayed);
        let matched = common(&rec, &rep);
        self.requests_compared += 1;
        self.recorded_decisions += rec.len() as u64;
        self.reproduced_decisions += matched;
        self.extra_decisions += rep.len() as u64 - matched;
        let outcome_differs = recorded_served != replayed_served;
        if outcome_differs {
            self.outcome_mismatches += 1;
        }
        if outcome_differs || matched as usize != rec.len() || matched as usize != rep.len() {
            self.divergent_requests += 1;
            if self.first_divergence.is_none() {
                let (request, origin) = describe();
                let words = |v: &[(SegmentOpKind, u64)]| {
                    let mut out: Vec<String> = Vec::new();
                    let mut i = 0;
                    while i < v.len() {
                        let n = v[i..].iter().take_while(|x| **x == v[i]).count();
                        let (k, b) = v[i];
                        out.push(if n == 1 {
                            format!("{} {b}", k.name())
                        } else {
                            format!("{} {b} ×{n}", k.name())
                        });
                        i += n;
                    }
                    out
                };
                let outcome = |served: bool| if served { "served" } else { "refused" }.to_string();
                self.first_divergence = Some(Divergence {
                    at,
                    request,
                    origin,
                    recorded_outcome: outcome(recorded_served),
                    replayed_outcome: outcome(replayed_served),
                    recorded: words(&rec),
                    replayed: words(&rep),
                });
            }
        }
    }
}

/// Decisions as sorted `(kind, bytes)`, adjacent map (or unmap) ranges joined.
fn canonical(ops: &[SegmentOp]) -> Vec<(SegmentOpKind, u64)> {
    let mut out: Vec<(SegmentOpKind, u64)> = Vec::with_capacity(ops.len());
    let mut ranges: Vec<SegmentOp> = Vec::new();
    for op in ops {
        match op.kind {
            SegmentOpKind::Map | SegmentOpKind::Unmap => ranges.push(*op),
            k => out.push((k, op.bytes)),
        }
    }
    ranges.sort_by_key(|o| (o.kind, o.ptr));
    let mut i = 0;
    while i < ranges.len() {
        let mut cur = ranges[i];
        let mut j = i + 1;
        while j < ranges.len() && ranges[j].kind == cur.kind && ranges[j].ptr == cur.ptr + cur.bytes
        {
            cur.bytes += ranges[j].bytes;
            j += 1;
        }
        out.push((cur.kind, cur.bytes));
        i = j;
    }
    out.sort_unstable();
    out
}

/// The size of the multiset intersection of two sorted lists.
fn common(a: &[(SegmentOpKind, u64)], b: &[(SegmentOpKind, u64)]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "segments reproduced: {} over {} requests compared{}",
            self.summary(),
            self.requests_compared,
            if self.outcome_mismatches > 0 {
                format!(
                    "; {} requests served in one and refused in the other",
                    self.outcome_mismatches
                )
            } else {
                String::new()
            }
        )?;
        if let Some(d) = &self.first_divergence {
            writeln!(
                f,
                "first divergence at entry {}: {}{} — recorded: {} [{}]; replayed: {} [{}]",
                d.at,
                d.request,
                d.origin
                    .as_ref()
                    .map(|o| format!(" (at {o})"))
                    .unwrap_or_default(),
                d.recorded_outcome,
                d.recorded.join(", "),
                d.replayed_outcome,
                d.replayed.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn op(kind: SegmentOpKind, ptr: u64, bytes: u64) -> SegmentOp {
        SegmentOp { kind, ptr, bytes }
    }

    #[test]
    fn sizes_and_kinds_are_compared_not_addresses_or_order() {
        let mut f = Fidelity::default();
        let rec = [
            op(SegmentOpKind::SegmentFree, 0x1000, 2 * MIB),
            op(SegmentOpKind::SegmentAlloc, 0x9000, 20 * MIB),
        ];
        let rep = [
            op(SegmentOpKind::SegmentAlloc, 0x5, 20 * MIB),
            op(SegmentOpKind::SegmentFree, 0x7, 2 * MIB),
        ];
        f.add(1, &rec, &rep, true, true, || unreachable!());
        assert_eq!((f.recorded_decisions, f.reproduced_decisions), (2, 2));
        assert!(f.is_exact());
        assert_eq!(f.summary(), "100% (2/2)");
    }

    #[test]
    fn adjacent_pages_count_as_one_mapped_range() {
        let mut f = Fidelity::default();
        let rec = [op(SegmentOpKind::Map, 0x100, 40 * MIB)];
        let rep = [
            op(SegmentOpKind::Map, 20 * MIB, 20 * MIB),
            op(SegmentOpKind::Map, 0, 20 * MIB),
        ];
        f.add(3, &rec, &rep, true, true, || unreachable!());
        assert!(f.is_exact(), "{f:?}");
    }

    #[test]
    fn the_first_divergence_is_kept_with_both_sides() {
        let mut f = Fidelity::default();
        f.add(
            7,
            &[op(SegmentOpKind::SegmentAlloc, 0, 20 * MIB)],
            &[],
            true,
            true,
            || ("alloc of 3145728 bytes on stream 0".into(), None),
        );
        f.add(
            9,
            &[],
            &[op(SegmentOpKind::SegmentAlloc, 0, 2 * MIB)],
            false,
            true,
            || ("later".into(), None),
        );
        assert_eq!(f.recorded_decisions, 1);
        assert_eq!(f.reproduced_decisions, 0);
        assert_eq!(f.extra_decisions, 1);
        assert_eq!(f.outcome_mismatches, 1);
        let d = f.first_divergence.as_ref().unwrap();
        assert_eq!(d.at, 7);
        assert_eq!(d.recorded, ["segment_alloc 20971520"]);
        assert!(d.replayed.is_empty());
        assert_eq!(f.summary(), "0.0% (0/1, 1 more by the replay)");
    }
}
