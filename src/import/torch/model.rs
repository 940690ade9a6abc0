//! A PyTorch memory snapshot as headroom holds it: the trace of every device in compact
//! columns (ten million entries fit in a few hundred megabytes), stack frames stored once and
//! shared, the final segments, and the allocator settings the snapshot recorded.
//!
//! Field names follow PyTorch's (`torch/cuda/memory.py`, `_snapshot`: `Segment`, `Block`,
//! `TraceEntry`, `Frame`; `torch/csrc/cuda/Module.cpp`, `THCPModule_memorySnapshot`).

use std::collections::{BTreeMap, HashMap};

use crate::import::pickle::FastMap;

pub use super::columns::Entries;

/// `TraceEntry.action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Action {
    /// A block was handed out (`size`: what was asked for).
    Alloc = 0,
    /// The program freed a block (it may still be in use on other streams).
    FreeRequested,
    /// The block is back in the cache for reuse.
    FreeCompleted,
    /// `cudaMalloc` of a new segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A snapshot was taken here.
    Snapshot,
    /// The allocator raised out-of-memory (`size`: the rounded request; `device_free`).
    Oom,
    /// Metadata attached to a live allocation (`_annotate_memory`).
    Annotate,
    /// An action this reader does not know (counted by name).
    Other,
}

impl Action {
    pub const ALL: [Action; 11] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::Annotate,
        Action::Other,
    ];

    pub fn parse(s: &str) -> Action {
        Action::parse_bytes(s.as_bytes())
    }

    pub fn parse_bytes(s: &[u8]) -> Action {
        match s {
            b"alloc" => Action::Alloc,
            b"free_requested" => Action::FreeRequested,
            b"free_completed" => Action::FreeCompleted,
            b"segment_alloc" => Action::SegmentAlloc,
            b"segment_free" => Action::SegmentFree,
            b"segment_map" => Action::SegmentMap,
            b"segment_unmap" => Action::SegmentUnmap,
            b"snapshot" => Action::Snapshot,
            b"oom" => Action::Oom,
            b"annotate" => Action::Annotate,
            _ => Action::Other,
        }
    }

    /// PyTorch's name (`other` for unknown ones).
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Annotate => "annotate",
            Action::Other => "other",
        }
    }
}

/// One trace entry, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub action: Action,
    /// `addr`, or `device_free` for an `oom` entry.
    pub addr: u64,
    pub size: u64,
    /// Index into `Snapshot::streams`.
    pub stream: u16,
    /// Index into `Snapshot::pools` (0: the default pool).
    pub pool: u16,
    /// `time_us`, where recorded.
    pub time_us: Option<i64>,
    /// Index into `Frames::stacks` (0: no frames recorded).
    pub stack: u32,
    /// Index into `Snapshot::metadata` (0: none).
    pub meta: u32,
}

/// `Frame`: one line of a stack trace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

/// Frames and stacks, each stored once.
#[derive(Debug)]
pub struct Frames {
    pub frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    /// Frame ids, innermost call first (PyTorch's order). Stack 0 is empty.
    pub stacks: Vec<Box<[u32]>>,
    stack_ids: FastMap<Box<[u32]>, u32>,
    /// The stack looked up last (consecutive entries often share one).
    last_stack: u32,
}

impl Default for Frames {
    fn default() -> Frames {
        let mut stack_ids = FastMap::default();
        stack_ids.insert(Box::from([]), 0);
        Frames {
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: vec![Box::from([])],
            stack_ids,
            last_stack: 0,
        }
    }
}

impl Frames {
    pub fn frame_id(&mut self, f: Frame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }

    pub fn stack_id(&mut self, frames: &[u32]) -> u32 {
        if *self.stacks[self.last_stack as usize] == *frames {
            return self.last_stack;
        }
        if let Some(&id) = self.stack_ids.get(frames) {
            self.last_stack = id;
            return id;
        }
        let id = self.stacks.len() as u32;
        self.last_stack = id;
        self.stacks.push(Box::from(frames));
        self.stack_ids.insert(Box::from(frames), id);
        id
    }

    /// The frames of a stack, innermost first.
    pub fn stack(&self, id: u32) -> impl Iterator<Item = &Frame> {
        self.stacks
            .get(id as usize)
            .into_iter()
            .flat_map(|s| s.iter())
            .map(|&f| &self.frames[f as usize])
    }
}

/// A small table of distinct values, each with its index.
#[derive(Debug, Clone)]
pub struct Table<T: Eq + std::hash::Hash + Clone> {
    pub values: Vec<T>,
    index: FastMap<T, u16>,
}

impl<T: Eq + std::hash::Hash + Clone> Table<T> {
    pub fn with_first(first: T) -> Table<T> {
        let mut index = FastMap::default();
        index.insert(first.clone(), 0);
        Table {
            values: vec![first],
            index,
        }
    }

    /// The index of `v`, if it is in the table.
    pub fn find(&self, v: &T) -> Option<u16> {
        self.index.get(v).copied()
    }

    /// The index of `v`, added if new; `None` past 65,536 distinct values.
    pub fn id(&mut self, v: T) -> Option<u16> {
        if let Some(&i) = self.index.get(&v) {
            return Some(i);
        }
        let i = u16::try_from(self.values.len()).ok()?;
        self.values.push(v.clone());
        self.index.insert(v, i);
        Some(i)
    }
}

/// `Block.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    /// `active_pending_free` (older PyTorch documents it as `active_awaiting_free`).
    ActivePendingFree,
    Inactive,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: u32,
}

/// `Segment`, as held when the snapshot was taken.
#[derive(Debug, Clone)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub stream: i64,
    /// `segment_type == "large"`.
    pub is_large: bool,
    /// `is_expandable` (absent before PyTorch 2.1).
    pub is_expandable: Option<bool>,
    pub pool_id: (i64, i64),
    pub blocks: Vec<Block>,
}

/// `allocator_settings` (PyTorch 2.5 and later record it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordedSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as last set.
    pub conf: String,
    /// `max_split_size` in bytes; `None` when unlimited (recorded as -1).
    pub max_split_size_bytes: Option<u64>,
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// `roundup_power2_divisions` by interval start in MiB (`"1"`, `"2"`, … `"32768"`).
    pub roundup_power2_divisions: BTreeMap<u64, u64>,
    /// Other keys, as text (`release_lock_on_cudamalloc`, `pinned_*`, …).
    pub other: BTreeMap<String, String>,
}

/// The trace of one device: a range of `Snapshot::entries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTrace {
    pub device: u32,
    pub start: usize,
    pub end: usize,
}

impl DeviceTrace {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// How the file was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Pickle { protocol: u8 },
    Json,
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Encoding::Pickle { protocol } => write!(f, "pickle (protocol {protocol})"),
            Encoding::Json => f.write_str("JSON"),
        }
    }
}

/// A whole snapshot.
#[derive(Debug)]
pub struct Snapshot {
    /// The file, as named on the command line.
    pub source: String,
    pub encoding: Encoding,
    pub segments: Vec<Segment>,
    /// One per list in `device_traces` (its index is the device), empty ones included.
    pub traces: Vec<DeviceTrace>,
    pub entries: Entries,
    pub frames: Frames,
    /// `stream` values (the `cudaStream_t` as an integer; 0 is the default stream).
    pub streams: Table<i64>,
    /// `pool_id` values; index 0 is `(0, 0)`, the default pool.
    pub pools: Table<(i64, i64)>,
    /// `(compile_context, user_metadata)` pairs; index 0 is none.
    pub metadata: Table<(String, String)>,
    pub settings: Option<RecordedSettings>,
    /// Actions this reader does not know, by name, with their count.
    pub unknown_actions: BTreeMap<String, u64>,
    /// Top-level keys that were present and not used (`external_annotations`, …).
    pub ignored_keys: Vec<String>,
    /// Trace entries a pickle's fast path could not read (built as dicts first): a
    /// figure for the reader's speed, not for the snapshot.
    pub slow_entries: u64,
}

impl Snapshot {
    pub fn empty(source: &str, encoding: Encoding) -> Snapshot {
        Snapshot {
            source: source.to_string(),
            encoding,
            segments: Vec::new(),
            traces: Vec::new(),
            entries: Entries::default(),
            frames: Frames::default(),
            streams: Table::with_first(0),
            pools: Table::with_first((0, 0)),
            metadata: Table::with_first((String::new(), String::new())),
            settings: None,
            unknown_actions: BTreeMap::new(),
            ignored_keys: Vec::new(),
            slow_entries: 0,
        }
    }

    /// The devices whose trace has entries.
    pub fn traced_devices(&self) -> Vec<DeviceTrace> {
        self.traces
            .iter()
            .copied()
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// How many entries of each action a device's trace holds.
    pub fn action_counts(&self, t: &DeviceTrace) -> BTreeMap<&'static str, u64> {
        let mut counts = [0u64; Action::ALL.len()];
        for i in t.start..t.end {
            counts[self.entries.action(i) as usize] += 1;
        }
        Action::ALL
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| (a.name(), n))
            .collect()
    }
}
