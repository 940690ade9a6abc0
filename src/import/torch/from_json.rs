//! A snapshot written as JSON (the same dict `_snapshot()` returns, tuples as arrays): read
//! as a stream, so each trace entry becomes a compact record as soon as it is parsed.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::from_pickle::meta_id;
use super::model::{
    Action, Block, BlockState, DeviceTrace, Encoding, Entry, Frame, RecordedSettings, Segment,
    Snapshot,
};

#[derive(Deserialize)]
struct JsonFrame {
    #[serde(default)]
    filename: String,
    #[serde(default)]
    line: i64,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct JsonEntry {
    action: String,
    addr: Option<u64>,
    device_free: Option<u64>,
    size: u64,
    #[serde(default)]
    stream: i64,
    time_us: Option<i64>,
    #[serde(default)]
    frames: Vec<JsonFrame>,
    compile_context: Option<String>,
    user_metadata: Option<String>,
    pool_id: Option<(i64, i64)>,
}

#[derive(Deserialize)]
struct JsonBlock {
    size: u64,
    #[serde(default)]
    requested_size: u64,
    address: Option<u64>,
    state: String,
    #[serde(default)]
    frames: Vec<JsonFrame>,
}

#[derive(Deserialize)]
struct JsonSegment {
    #[serde(default)]
    device: i64,
    address: u64,
    total_size: u64,
    #[serde(default)]
    allocated_size: u64,
    #[serde(default)]
    active_size: u64,
    #[serde(default)]
    stream: i64,
    segment_type: Option<String>,
    is_expandable: Option<bool>,
    segment_pool_id: Option<(i64, i64)>,
    #[serde(default)]
    blocks: Vec<JsonBlock>,
}

fn stack(snap: &mut Snapshot, frames: Vec<JsonFrame>, buf: &mut Vec<u32>) -> u32 {
    buf.clear();
    for f in frames {
        buf.push(snap.frames.frame_id(Frame {
            filename: f.filename,
            line: f.line,
            name: f.name,
        }));
    }
    snap.frames.stack_id(buf)
}

fn entry(snap: &mut Snapshot, j: JsonEntry, buf: &mut Vec<u32>) -> Result<Entry, String> {
    let action = Action::parse(&j.action);
    if action == Action::Other {
        *snap.unknown_actions.entry(j.action.clone()).or_default() += 1;
    }
    let addr = if action == Action::Oom {
        j.device_free
            .ok_or("an `oom` entry without `device_free`")?
    } else {
        j.addr
            .ok_or_else(|| format!("a `{}` entry without `addr`", j.action))?
    };
    Ok(Entry {
        action,
        addr,
        size: j.size,
        stream: snap
            .streams
            .id(j.stream)
            .ok_or("more than 65,536 streams")?,
        pool: snap
            .pools
            .id(j.pool_id.unwrap_or((0, 0)))
            .ok_or("more than 65,536 pools")?,
        time_us: j.time_us,
        stack: stack(snap, j.frames, buf),
        meta: meta_id(snap, j.compile_context, j.user_metadata),
    })
}

struct Top<'a>(&'a mut Snapshot);
struct Traces<'a>(&'a mut Snapshot);
struct OneDevice<'a>(&'a mut Snapshot, usize);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the snapshot dict (segments, device_traces, allocator_settings)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let snap = self.0;
        let mut seen_segments = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "segments" => {
                    seen_segments = true;
                    let segs: Vec<JsonSegment> = map.next_value()?;
                    for (i, s) in segs.into_iter().enumerate() {
                        let seg = segment(snap, s)
                            .map_err(|e| de::Error::custom(format!("segments[{i}]: {e}")))?;
                        snap.segments.push(seg);
                    }
                }
                "device_traces" => map.next_value_seed(Traces(&mut *snap))?,
                "allocator_settings" => {
                    let v: serde_json::Value = map.next_value()?;
                    snap.settings = Some(settings(&v));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    snap.ignored_keys.push(key);
                }
            }
        }
        if !seen_segments {
            return Err(de::Error::custom(
                "no `segments` key: not a PyTorch memory snapshot",
            ));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Traces<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Traces<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of trace lists, one per device")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let snap = self.0;
        let mut dev = 0;
        loop {
            let start = snap.entries.len();
            if dev == super::MAX_DEVICES {
                return Err(de::Error::custom(format!(
                    "device_traces: more than {0} devices: headroom reads at most {0} devices",
                    super::MAX_DEVICES
                )));
            }
            if seq.next_element_seed(OneDevice(&mut *snap, dev))?.is_none() {
                return Ok(());
            }
            snap.traces.push(DeviceTrace {
                device: dev as u32,
                start,
                end: snap.entries.len(),
            });
            dev += 1;
        }
    }
}

impl<'de> DeserializeSeed<'de> for OneDevice<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OneDevice<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of trace entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (snap, dev) = (self.0, self.1);
        let mut buf = Vec::new();
        let mut i = 0usize;
        loop {
            let next = seq
                .next_element::<JsonEntry>()
                .map_err(|e| de::Error::custom(format!("device_traces[{dev}][{i}]: {e}")))?;
            let Some(j) = next else { return Ok(()) };
            let e = entry(snap, j, &mut buf)
                .map_err(|e| de::Error::custom(format!("device_traces[{dev}][{i}]: {e}")))?;
            if snap.entries.len() >= super::MAX_ENTRIES {
                return Err(de::Error::custom(format!(
                    "device_traces[{dev}][{i}]: more than {} trace entries: headroom reads at most that many",
                    super::MAX_ENTRIES
                )));
            }
            snap.entries.push(e);
            i += 1;
        }
    }
}

fn segment(snap: &mut Snapshot, s: JsonSegment) -> Result<Segment, String> {
    let mut buf = Vec::new();
    let mut next = s.address;
    let mut blocks = Vec::with_capacity(s.blocks.len());
    for (i, b) in s.blocks.into_iter().enumerate() {
        let address = b.address.unwrap_or(next);
        next = address + b.size;
        let state = match b.state.as_str() {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            other => return Err(format!("blocks[{i}]: unknown state {other:?}")),
        };
        blocks.push(Block {
            address,
            size: b.size,
            requested_size: b.requested_size,
            state,
            stack: stack(snap, b.frames, &mut buf),
        });
    }
    Ok(Segment {
        device: s.device,
        address: s.address,
        total_size: s.total_size,
        allocated_size: s.allocated_size,
        active_size: s.active_size,
        stream: s.stream,
        is_large: s
            .segment_type
            .map_or(s.total_size > 2 << 20, |t| t == "large"),
        is_expandable: s.is_expandable,
        pool_id: s.segment_pool_id.unwrap_or((0, 0)),
        blocks,
    })
}

fn settings(v: &serde_json::Value) -> RecordedSettings {
    let mut s = RecordedSettings::default();
    let Some(map) = v.as_object() else {
        return s;
    };
    for (k, v) in map {
        match k.as_str() {
            "PYTORCH_CUDA_ALLOC_CONF" => s.conf = v.as_str().unwrap_or_default().to_string(),
            "max_split_size" => {
                s.max_split_size_bytes = v.as_i64().filter(|&b| b > 0).map(|b| b as u64)
            }
            "garbage_collection_threshold" => {
                s.garbage_collection_threshold = v.as_f64().unwrap_or(0.0)
            }
            "expandable_segments" => s.expandable_segments = v.as_bool().unwrap_or(false),
            "roundup_power2_divisions" => {
                for (mb, div) in v.as_object().into_iter().flatten() {
                    if let (Ok(mb), Some(div)) = (mb.parse::<u64>(), div.as_u64()) {
                        s.roundup_power2_divisions.insert(mb, div);
                    }
                }
            }
            _ => {
                s.other.insert(k.clone(), v.to_string());
            }
        }
    }
    s
}

/// Reads a JSON snapshot from `input`.
pub fn read_from<R: Read>(input: R, source: &str) -> anyhow::Result<Snapshot> {
    let mut snap = Snapshot::empty(source, Encoding::Json);
    let mut de = serde_json::Deserializer::from_reader(input);
    Top(&mut snap)
        .deserialize(&mut de)
        .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
    de.end()
        .map_err(|e| anyhow::anyhow!("{source}: after the snapshot: {e}"))?;
    Ok(snap)
}

/// Reads a JSON snapshot file.
pub fn read(path: &Path, source: &str) -> anyhow::Result<Snapshot> {
    let f = File::open(path).with_context(|| format!("cannot open {source}"))?;
    read_from(BufReader::with_capacity(1 << 20, f), source)
}
