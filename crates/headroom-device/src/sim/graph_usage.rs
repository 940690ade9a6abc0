//! The graph pool's usage, kept as graphs change: each stream's cache (the largest transient
//! peak of the graphs mapped on it), the live graph allocations and the executables, so that a
//! memory reading costs O(streams) however many graphs exist.

use std::collections::{BTreeSet, HashMap};

use super::{LiveAlloc, SimGraphs};
use crate::{DevPtr, StreamId};

/// What the graphs use, kept up to date by every change (`map`, `insert_live`,
/// `remove_live`, instantiation and `remove_graph`).
#[derive(Debug, Clone, Default)]
pub(super) struct Usage {
    /// Per stream, the mapped graphs as (transient bytes, graph): its cache is the largest.
    pub(super) mapped: HashMap<StreamId, BTreeSet<(u64, u32)>>,
    /// Rounded bytes of the live graph allocations.
    pub(super) live_bytes: u64,
    /// Bytes of every executable graph.
    pub(super) exec_bytes: u64,
}

impl SimGraphs {
    pub(super) fn exec_bytes(&self) -> u64 {
        self.usage.exec_bytes
    }

    /// Memory mapped by at least one graph or backing a live graph allocation: each stream's
    /// cache (the largest transient peak of the graphs mapped on it) plus live allocations.
    pub(super) fn used(&self) -> u64 {
        let caches: u64 = self
            .usage
            .mapped
            .values()
            .filter_map(|m| m.last().map(|(t, _)| *t))
            .sum();
        caches + self.usage.live_bytes
    }

    /// What `used` would be with graph `id` mapped on `stream` and `live_bytes` live.
    pub(super) fn used_if_mapped(&self, id: u32, stream: StreamId, live_bytes: u64) -> u64 {
        let Some(g) = self.graphs.get(&id) else {
            return self.used();
        };
        let mut caches: u64 = 0;
        let mut seen_stream = false;
        for (s, m) in &self.usage.mapped {
            // The stream's largest without this graph, then with it if it maps here.
            let mut cache = m
                .iter()
                .rev()
                .find(|(_, gid)| *gid != id)
                .map_or(0, |(t, _)| *t);
            if *s == stream {
                cache = cache.max(g.transient_bytes);
                seen_stream = true;
            }
            caches += cache;
        }
        if !seen_stream {
            caches += g.transient_bytes;
        }
        caches + live_bytes
    }

    /// The same as `used`, from every graph: what the kept `usage` must agree with.
    #[cfg(test)]
    pub(super) fn used_recomputed(&self) -> u64 {
        let mut caches: std::collections::BTreeMap<StreamId, u64> = Default::default();
        for g in self.graphs.values() {
            if let Some(s) = g.exec.as_ref().and_then(|e| e.mapped_on) {
                let c = caches.entry(s).or_default();
                *c = (*c).max(g.transient_bytes);
            }
        }
        let live: u64 = self.live.values().map(|l| l.rounded_bytes).sum();
        caches.values().sum::<u64>() + live
    }

    #[cfg(test)]
    pub(super) fn exec_bytes_recomputed(&self) -> u64 {
        self.graphs
            .values()
            .filter_map(|g| g.exec.as_ref())
            .map(|e| e.exec_bytes)
            .sum()
    }

    /// Maps graph `id` on `stream` (`None`: unmaps it).
    pub(super) fn map(&mut self, id: u32, stream: Option<StreamId>) {
        let Some(g) = self.graphs.get_mut(&id) else {
            return;
        };
        let Some(e) = g.exec.as_mut() else {
            return;
        };
        let key = (g.transient_bytes, id);
        if let Some(old) = e.mapped_on.take()
            && let Some(m) = self.usage.mapped.get_mut(&old)
        {
            m.remove(&key);
            if m.is_empty() {
                self.usage.mapped.remove(&old);
            }
        }
        if let Some(s) = stream {
            e.mapped_on = Some(s);
            self.usage.mapped.entry(s).or_default().insert(key);
        }
    }

    pub(super) fn insert_live(&mut self, ptr: DevPtr, rounded_bytes: u64) {
        if let Some(old) = self.live.insert(ptr, LiveAlloc { rounded_bytes }) {
            self.usage.live_bytes -= old.rounded_bytes;
        }
        self.usage.live_bytes += rounded_bytes;
    }

    pub(super) fn remove_live(&mut self, ptr: &DevPtr) -> Option<LiveAlloc> {
        let old = self.live.remove(ptr)?;
        self.usage.live_bytes -= old.rounded_bytes;
        Some(old)
    }

    /// Forgets graph `id`: its mapping and its executable go with it.
    pub(super) fn remove_graph(&mut self, id: u32) {
        self.map(id, None);
        if let Some(g) = self.graphs.remove(&id)
            && let Some(e) = g.exec
        {
            self.usage.exec_bytes -= e.exec_bytes;
        }
    }
}
