//! Launching captured graphs (`upload`, `replay`), with the rules the driver enforces checked
//! first: a graph whose captured kernels use memory freed since the capture, a free node that
//! would free twice, allocations of the last launch still live without auto-free.

use super::*;

impl Emitter<'_, '_, '_> {
    /// The graph's capture stream, once it is instantiated.
    fn instantiated(&self, graph: &str, op: &str) -> Result<(String, bool), WorkloadError> {
        let Some(info) = self.names.graphs.graphs.get(graph) else {
            return Err(self.no_graph(graph, op));
        };
        match info.state {
            State::Captured => Err(self.err(format!(
                "{op} of graph {graph:?}, which is not instantiated; add an instantiate step before it"
            ))),
            State::Instantiated { auto_free } => Ok((info.stream.clone(), auto_free)),
        }
    }

    pub(in crate::workload::expand) fn upload(
        &mut self,
        graph: &str,
        stream: Option<&str>,
    ) -> Result<(), WorkloadError> {
        let (own, _) = self.instantiated(graph, "upload")?;
        self.push(Action::Upload {
            graph: graph.into(),
            stream: stream.unwrap_or(&own).into(),
        })
    }

    pub(in crate::workload::expand) fn replay(
        &mut self,
        graph: &str,
        times: u32,
        stream: Option<&str>,
    ) -> Result<(), WorkloadError> {
        let (own, auto_free) = self.instantiated(graph, "replay")?;
        if times == 0 {
            return Err(self.err("times must be at least 1"));
        }
        // What the checks below read (not the graph's `uses`, which may be large).
        let info = &self.names.graphs.graphs[graph];
        let (stale, frees, unfreed, launched) = (
            info.stale.clone(),
            info.frees.clone(),
            info.unfreed.clone(),
            info.launched,
        );
        if let Some(n) = &stale {
            return Err(self.err(format!(
                "graph {graph:?} uses {n:?}, which was freed after the capture: the graph still holds its old address, and a replay would touch freed memory"
            )));
        }
        for f in &frees {
            if !self.names.graphs.owners.contains_key(f) {
                return Err(self.err(format!(
                    "graph {graph:?} frees {f:?}, which is not a live graph allocation at this point"
                )));
            }
            if times > 1 {
                return Err(self.err(format!(
                    "graph {graph:?} frees {f:?} on every launch; replaying it {times} times would free it twice"
                )));
            }
        }
        let still_live: Vec<&str> = unfreed
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| {
                self.names
                    .graphs
                    .owners
                    .get(*n)
                    .is_some_and(|(g, _)| g == graph)
            })
            .collect();
        if !auto_free {
            if !still_live.is_empty() {
                return Err(self.err(format!(
                    "replay of graph {graph:?}: {} from its previous launch still live and it was instantiated without auto_free, so cuGraphLaunch would fail (CUDA_ERROR_INVALID_VALUE); free them first, or instantiate with auto_free = true",
                    if still_live.len() == 1 {
                        format!("{:?} is", still_live[0])
                    } else {
                        format!("{still_live:?} are")
                    }
                )));
            }
            if times > 1 && !unfreed.is_empty() {
                return Err(self.err(format!(
                    "replay of graph {graph:?} {times} times: it leaves {:?} live after each launch and was instantiated without auto_free, so the second launch would fail (CUDA_ERROR_INVALID_VALUE); instantiate with auto_free = true",
                    unfreed[0].0
                )));
            }
        }
        let stream = stream.unwrap_or(&own).to_string();
        for (n, l) in &unfreed {
            let ours = self
                .names
                .graphs
                .owners
                .get(n)
                .is_some_and(|(g, _)| g == graph);
            if self.names.live.contains_key(n) && !ours {
                return Err(self.err(format!(
                    "replay of graph {graph:?} would allocate {n:?} again, but that name is now another allocation; free it first"
                )));
            }
            let book = self.book();
            book.pending.remove(n);
            book.owners
                .insert(n.clone(), (graph.into(), stream.clone()));
            self.names.live.insert(n.clone(), l.clone());
        }
        for f in &frees {
            self.names.live.remove(f);
            let book = self.book();
            book.owners.remove(f);
            book.freed_outside(f);
        }
        let first = !launched;
        if let Some(g) = self.book().graphs.get_mut(graph) {
            g.launched = true;
            g.last_stream = stream.clone();
        }
        let replay = |times: u32, first: bool| Action::Replay {
            graph: graph.into(),
            stream: stream.clone(),
            times,
            first,
        };
        if first && times > 1 {
            self.multi = true;
            self.push(replay(1, true))?;
            self.push(replay(times - 1, false))
        } else {
            self.push(replay(times, first))
        }
    }
}
