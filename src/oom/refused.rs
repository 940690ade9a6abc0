//! The OOM record every producer starts from: where the request was refused, the request as
//! the allocator saw it, and the allocator's own figures; the producer adds what it knows of
//! the device.

use super::{Diagnosis, OomRecord, RefusedBy};

/// Where a refused request happened and what refused it, as its producer names it.
pub struct OomPlace {
    pub utc: String,
    pub t_ns: u64,
    pub phase: String,
    pub step: String,
    pub op: String,
    pub name: String,
    pub stream: String,
    pub via: RefusedBy,
}

impl OomRecord {
    /// The record every producer (a run, an imported snapshot) starts from: the place, the
    /// request as the allocator saw it, the device's free and used memory at that instant and
    /// the allocator's own figures (`stats`, and the largest free block in the pool the request
    /// needed). The rest of the device's evidence (total, idle, own bytes, what lies outside the
    /// allocator, graphs, NVML, processes) is unknown until the producer fills in what it knows;
    /// then `diagnose`.
    pub fn refused(
        place: OomPlace,
        req: &crate::alloc::OomRequest,
        stats: &crate::alloc::AllocStats,
        largest_free_block_bytes: u64,
        device_free_bytes: u64,
        device_used_bytes: u64,
    ) -> OomRecord {
        OomRecord {
            utc: place.utc,
            t_ns: place.t_ns,
            phase: place.phase,
            step: place.step,
            op: place.op,
            name: place.name,
            via: place.via,
            requested_bytes: req.requested_bytes,
            rounded_bytes: req.rounded_bytes,
            driver_request_bytes: req.driver_request_bytes,
            pool: req.pool.clone(),
            stream: place.stream,
            retries: req.retries.clone(),
            device_total_bytes: None,
            device_free_bytes,
            device_used_bytes: Some(device_used_bytes),
            idle_device_free_bytes: None,
            own_bytes: 0,
            outside_allocator_bytes: None,
            device_evidence_basis: None,
            alloc_allocated_bytes: stats.allocated_bytes,
            alloc_reserved_bytes: stats.reserved_bytes,
            reserved_but_unallocated_bytes: stats
                .reserved_bytes
                .saturating_sub(stats.allocated_bytes),
            largest_free_block_bytes,
            inactive_split_count: stats.inactive_split_count,
            inactive_split_bytes: stats.inactive_split_bytes,
            unexplained_used_bytes: None,
            graph_used_bytes: None,
            graph_reserved_bytes: None,
            graph_exec_bytes: None,
            nvml: None,
            processes: None,
            processes_doubt: None,
            diagnosis: Diagnosis::default(),
        }
    }
}
