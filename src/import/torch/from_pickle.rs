//! A snapshot pickle into a `Snapshot`: trace entries are taken out of their lists as the
//! pickle is read (so the millions of entry dicts never exist at once), and everything else
//! is read from the values once the pickle is complete.

use std::path::Path;
use std::rc::Rc;

use anyhow::{Context, bail};

use crate::import::pickle::{self, Dict, Fast, FastDict, List, Sink, Value};

use super::model::{
    Action, Block, BlockState, DeviceTrace, Encoding, Entries, Entry, Frame, RecordedSettings,
    Segment, Snapshot,
};

/// What the values a snapshot's pickle builds may take (its trace entries, taken as they are
/// read, are not values). The largest thing a snapshot builds is its segment table: counted
/// the same way, a table of 100,000 blocks takes about 9 bytes per byte of pickle when each
/// block has frames, about 17 when each has an empty frames list (each list an object of its
/// own). PyTorch's lists hold only dicts and lists. A pickle past either bound is refused at
/// once, whatever its size (docs/oom.md, "Bounds").
pub const BUDGET: pickle::Budget = pickle::Budget {
    per_file_byte: 32,
    fixed_bytes: 32 << 20,
    scalar_list_items: 1 << 16,
};

/// The most keys of a dict a message names (a hostile dict may hold millions).
const MESSAGE_KEYS: usize = 32;

/// `List::aux` of a frames list whose stack id is known: the id with this bit set.
pub(super) const STACK_TAG: u64 = 1 << 63;

/// Takes trace entries out of the lists they are appended to.
struct Entries2<'a> {
    snap: &'a mut Snapshot,
    stack_buf: Vec<u32>,
    shared: super::fast_entry::Shared,
}

impl Entries2<'_> {
    /// Appends `e` to the store and to `list`'s range; `false` (and nothing done) when the
    /// list's entries would not be contiguous.
    fn take(&mut self, list: &Rc<List>, e: Entry) -> bool {
        let idx = self.snap.entries.len() as u64;
        let aux = list.aux.get();
        let (start, end) = if aux == 0 {
            (idx, idx)
        } else {
            (aux >> 32, aux & 0xffff_ffff)
        };
        if aux & STACK_TAG != 0 || end != idx || idx >= u32::MAX as u64 {
            return false;
        }
        self.snap.entries.push(e);
        list.aux.set((start << 32) | (end + 1));
        true
    }
}

impl Sink for Entries2<'_> {
    fn fast_dict(&mut self, list: &Rc<List>, fast: &Fast<'_>, out: &mut FastDict) -> bool {
        // Only into a list that already holds entries, and only in order.
        let aux = list.aux.get();
        if self.snap.entries.len() >= super::MAX_ENTRIES {
            // `append` refuses it, with the reason.
            return false;
        }
        if aux == 0 || aux & STACK_TAG != 0 || aux & 0xffff_ffff != self.snap.entries.len() as u64 {
            return false;
        }
        match super::fast_entry::decode(self.snap, &mut self.shared, &mut self.stack_buf, fast, out)
        {
            Some(e) => self.take(list, e),
            None => false,
        }
    }

    fn append(&mut self, list: &Rc<List>, item: Value) -> Result<Option<Value>, String> {
        let Value::Dict(d) = &item else {
            return Ok(Some(item));
        };
        // Only dicts that read as trace entries are taken; anything else stays in its list
        // and is reported with its path if it sits in `device_traces`. Frame dicts, the
        // most common by far, have no `action`.
        if d.aux.get() != 0 || !d.has("action") {
            return Ok(Some(item));
        }
        let Ok(e) = convert_entry(self.snap, &mut self.stack_buf, d) else {
            return Ok(Some(item));
        };
        if self.snap.entries.len() >= super::MAX_ENTRIES {
            return Err(format!(
                "more than {} trace entries: headroom reads at most that many",
                super::MAX_ENTRIES
            ));
        }
        if !self.take(list, e) {
            return Ok(Some(item));
        }
        self.snap.slow_entries += 1;
        Ok(None)
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_int().and_then(|i| u64::try_from(i).ok())
}

/// A trace entry dict into an `Entry`, or why not (the message names the key).
fn convert_entry(snap: &mut Snapshot, buf: &mut Vec<u32>, d: &Dict) -> Result<Entry, String> {
    let mut e = Entry {
        action: Action::Other,
        addr: 0,
        size: 0,
        stream: 0,
        pool: 0,
        time_us: None,
        stack: 0,
        meta: 0,
    };
    let (mut action, mut size, mut addr) = (None, None, None);
    let (mut compile, mut user) = (None, None);
    let items = d.items.borrow();
    for (k, v) in items.iter() {
        let Some(k) = k.str_bytes() else { continue };
        match k {
            b"action" => action = Some(v.as_str().ok_or("`action` is not a str")?),
            b"addr" | b"device_free" => {
                addr =
                    Some(as_u64(v).ok_or_else(|| {
                        format!("`{}` is {}", String::from_utf8_lossy(k), v.brief())
                    })?)
            }
            b"size" => size = Some(as_u64(v).ok_or_else(|| format!("`size` is {}", v.brief()))?),
            b"stream" => {
                let s = v.as_int().ok_or("`stream` is not an int")?;
                e.stream = snap.streams.id(s).ok_or("more than 65,536 streams")?;
            }
            b"time_us" => e.time_us = Some(v.as_int().ok_or("`time_us` is not an int")?),
            b"frames" => e.stack = stack_of(snap, buf, v)?,
            b"compile_context" => compile = v.as_str().filter(|c| *c != "N/A"),
            b"user_metadata" => user = v.as_str().filter(|u| !u.is_empty()),
            b"pool_id" => {
                if let Value::Tuple(t, _) = v
                    && let [a, b] = &t[..]
                    && let (Some(a), Some(b)) = (a.as_int(), b.as_int())
                {
                    e.pool = snap.pools.id((a, b)).ok_or("more than 65,536 pools")?;
                }
            }
            _ => {}
        }
    }
    let action = action.ok_or("no `action` key")?;
    e.action = Action::parse(action);
    if e.action == Action::Other {
        *snap.unknown_actions.entry(action.to_string()).or_default() += 1;
    }
    e.size = size.ok_or("no `size` key")?;
    e.addr = addr.ok_or(if e.action == Action::Oom {
        "no `device_free` key"
    } else {
        "no `addr` key"
    })?;
    if compile.is_some() || user.is_some() {
        e.meta = meta_id(snap, compile.map(str::to_string), user.map(str::to_string));
    }
    Ok(e)
}

/// Compile context and user metadata worth keeping (PyTorch writes `"N/A"` and `""` when
/// there is none).
pub(super) fn meta_id(snap: &mut Snapshot, compile: Option<String>, user: Option<String>) -> u32 {
    let compile = compile.filter(|c| !c.is_empty() && c != "N/A");
    let user = user.filter(|u| !u.is_empty());
    if compile.is_none() && user.is_none() {
        return 0;
    }
    snap.metadata
        .id((compile.unwrap_or_default(), user.unwrap_or_default()))
        .map_or(0, u32::from)
}

/// The stack id of a `frames` list; each frame dict and list converted once.
fn stack_of(snap: &mut Snapshot, buf: &mut Vec<u32>, v: &Value) -> Result<u32, String> {
    let Value::List(list) = v else {
        return Err("`frames` is not a list".into());
    };
    let aux = list.aux.get();
    if aux & STACK_TAG != 0 {
        return Ok((aux & !STACK_TAG) as u32);
    }
    buf.clear();
    for f in list.items.borrow().iter() {
        let Value::Dict(fd) = f else {
            return Err(format!("a frame is a {}, not a dict", f.type_name()));
        };
        let cached = fd.aux.get();
        if cached != 0 {
            buf.push((cached - 1) as u32);
            continue;
        }
        let mut frame = Frame {
            filename: String::new(),
            line: 0,
            name: String::new(),
        };
        let wrong = |key: &str, v: &Value, want: &str| {
            format!("a frame's `{key}` is a {}, not {want}", v.type_name())
        };
        for (k, v) in fd.items.borrow().iter() {
            match k.as_str() {
                Some("filename") => {
                    frame.filename = v
                        .as_str()
                        .ok_or_else(|| wrong("filename", v, "a str"))?
                        .into()
                }
                Some("name") => {
                    frame.name = v.as_str().ok_or_else(|| wrong("name", v, "a str"))?.into()
                }
                Some("line") => {
                    frame.line = v.as_int().ok_or_else(|| wrong("line", v, "an int"))?
                }
                _ => {}
            }
        }
        let id = snap.frames.frame_id(frame);
        fd.aux.set(id as u64 + 1);
        buf.push(id);
    }
    let id = snap.frames.stack_id(buf);
    if aux == 0 {
        list.aux.set(STACK_TAG | id as u64);
    }
    Ok(id)
}

/// Reads a snapshot pickle.
pub fn read(path: &Path, source: &str) -> anyhow::Result<Snapshot> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {source}"))?;
    // Columns sized once for the most entries the file could hold (about 64 bytes each at
    // least); pages never written are never resident.
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut snap = Snapshot::empty(source, Encoding::Pickle { protocol: 0 });
    snap.entries = Entries::with_capacity((bytes / 64).min(1 << 31) as usize);
    read_from(file, snap)
}

/// Reads a snapshot pickle held in memory (for tests).
pub fn read_bytes(bytes: &[u8], source: &str) -> anyhow::Result<Snapshot> {
    read_from(
        bytes,
        Snapshot::empty(source, Encoding::Pickle { protocol: 0 }),
    )
}

fn read_from<R: std::io::Read>(input: R, mut snap: Snapshot) -> anyhow::Result<Snapshot> {
    let source = snap.source.clone();
    let (top, protocol) = {
        let mut sink = Entries2 {
            snap: &mut snap,
            stack_buf: Vec::new(),
            shared: Default::default(),
        };
        let mut m = pickle::Machine::new(&mut sink).bounded(BUDGET, true);
        let v = m.run(input).map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        (v, m.protocol)
    };
    snap.encoding = Encoding::Pickle { protocol };
    from_value(&mut snap, &top)?;
    Ok(snap)
}

/// The snapshot dict once the pickle is read: segments, the trace lists, settings.
fn from_value(snap: &mut Snapshot, top: &Value) -> anyhow::Result<()> {
    let src = snap.source.clone();
    let Value::Dict(top) = top else {
        bail!(
            "{src}: the pickle holds a {}, not the dict torch.cuda.memory._snapshot() returns",
            top.type_name()
        );
    };
    let Some(segments) = top.get("segments") else {
        bail!(
            "{src}: no `segments` key (keys: {}): not a PyTorch memory snapshot",
            top.keys_brief(MESSAGE_KEYS)
        );
    };
    let Value::List(segments) = segments else {
        bail!(
            "{src}: `segments` is a {}, not a list",
            segments.type_name()
        );
    };
    for (i, s) in segments.items.borrow().iter().enumerate() {
        let seg = segment(snap, s).with_context(|| format!("{src}: segments[{i}]"))?;
        snap.segments.push(seg);
    }
    match top.get("device_traces") {
        None => {}
        Some(Value::List(devices)) => {
            let n = devices.items.borrow().len();
            if n > super::MAX_DEVICES {
                bail!(
                    "{src}: `device_traces` holds {n} devices; headroom reads at most {}",
                    super::MAX_DEVICES
                );
            }
            for (dev, t) in devices.items.borrow().iter().enumerate() {
                let trace = device_trace(snap, dev, t)
                    .with_context(|| format!("{src}: device_traces[{dev}]"))?;
                snap.traces.push(trace);
            }
        }
        Some(other) => bail!(
            "{src}: `device_traces` is a {}, not a list",
            other.type_name()
        ),
    }
    if let Some(s) = top.get("allocator_settings") {
        snap.settings = Some(settings(&s).with_context(|| format!("{src}: allocator_settings"))?);
    }
    for (k, _) in top.items.borrow().iter() {
        if matches!(
            k.str_bytes(),
            Some(b"segments" | b"device_traces" | b"allocator_settings")
        ) {
            continue;
        }
        if snap.ignored_keys.len() == MESSAGE_KEYS {
            snap.ignored_keys.push("…".into());
            break;
        }
        snap.ignored_keys.push(
            k.as_str()
                .map_or_else(|| format!("<{}>", k.type_name()), str::to_string),
        );
    }
    Ok(())
}

fn device_trace(snap: &mut Snapshot, dev: usize, t: &Value) -> anyhow::Result<DeviceTrace> {
    let Value::List(list) = t else {
        bail!("is a {}, not a list of trace entries", t.type_name());
    };
    // Entries the sink could not take are still in the list: say which and why.
    if let Some(first) = list.items.borrow().first() {
        let why = match first {
            Value::Dict(d) => convert_entry(snap, &mut Vec::new(), d)
                .err()
                .unwrap_or_else(|| "its entries are interleaved with another list's".to_string()),
            other => format!("is a {}, not a dict", other.type_name()),
        };
        let (start, end) = unpack(list.aux.get());
        bail!("[{}]: not a trace entry: {why}", end - start);
    }
    let (start, end) = unpack(list.aux.get());
    Ok(DeviceTrace {
        device: dev as u32,
        start: start as usize,
        end: end as usize,
    })
}

fn unpack(aux: u64) -> (u64, u64) {
    if aux == 0 || aux & STACK_TAG != 0 {
        (0, 0)
    } else {
        (aux >> 32, aux & 0xffff_ffff)
    }
}

fn get_int(d: &Dict, key: &str) -> anyhow::Result<Option<i64>> {
    match d.get(key) {
        None | Some(Value::None) => Ok(None),
        Some(v) => match v.as_int() {
            Some(i) => Ok(Some(i)),
            None => bail!("`{key}` is {}, expected an int", v.brief()),
        },
    }
}

fn get_u64(d: &Dict, key: &str) -> anyhow::Result<u64> {
    let v = get_int(d, key)?.unwrap_or(0);
    u64::try_from(v).map_err(|_| anyhow::anyhow!("`{key}` is {v}, expected a byte count"))
}

fn segment(snap: &mut Snapshot, v: &Value) -> anyhow::Result<Segment> {
    let Value::Dict(d) = v else {
        bail!("is a {}, not a dict", v.type_name());
    };
    let address = match get_int(d, "address")? {
        Some(a) => u64::try_from(a).map_err(|_| anyhow::anyhow!("`address` is {a}"))?,
        None => bail!("no `address` key (keys: {})", d.keys_brief(MESSAGE_KEYS)),
    };
    let total_size = get_u64(d, "total_size")?;
    let pool_id = match d.get("segment_pool_id") {
        Some(Value::Tuple(t, _)) if t.len() == 2 => {
            (t[0].as_int().unwrap_or(0), t[1].as_int().unwrap_or(0))
        }
        _ => (0, 0),
    };
    let mut seg = Segment {
        device: get_int(d, "device")?.unwrap_or(0),
        address,
        total_size,
        allocated_size: get_u64(d, "allocated_size")?,
        active_size: get_u64(d, "active_size")?,
        stream: get_int(d, "stream")?.unwrap_or(0),
        is_large: match d.get("segment_type") {
            Some(v) if v.as_str().is_some() => v.as_str() == Some("large"),
            _ => total_size > 2 << 20,
        },
        is_expandable: match d.get("is_expandable") {
            Some(Value::Bool(b)) => Some(b),
            _ => None,
        },
        pool_id,
        blocks: Vec::new(),
    };
    let mut next = address;
    if let Some(Value::List(blocks)) = d.get("blocks") {
        for (i, b) in blocks.items.borrow().iter().enumerate() {
            let Value::Dict(bd) = b else {
                bail!("blocks[{i}] is a {}, not a dict", b.type_name());
            };
            let size = get_u64(bd, "size").with_context(|| format!("blocks[{i}]"))?;
            // Older snapshots leave `address` out of blocks: blocks follow each other.
            let addr = match get_int(bd, "address")? {
                Some(a) => a as u64,
                None => next,
            };
            next = addr + size;
            let state_value = bd.get("state");
            let state = match state_value.as_ref().and_then(|v| v.as_str()) {
                Some(s) => match s {
                    "active_allocated" => BlockState::ActiveAllocated,
                    "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
                    "inactive" => BlockState::Inactive,
                    other => bail!("blocks[{i}]: unknown state {other:?}"),
                },
                None => bail!(
                    "blocks[{i}]: `state` is {}",
                    state_value.map_or("missing".into(), |v| v.brief())
                ),
            };
            let stack = match bd.get("frames") {
                Some(f) => stack_of(snap, &mut Vec::new(), &f)
                    .map_err(|e| anyhow::anyhow!("blocks[{i}]: {e}"))?,
                None => 0,
            };
            seg.blocks.push(Block {
                address: addr,
                size,
                requested_size: get_u64(bd, "requested_size")?,
                state,
                stack,
            });
        }
    }
    Ok(seg)
}

fn settings(v: &Value) -> anyhow::Result<RecordedSettings> {
    let Value::Dict(d) = v else {
        bail!("is a {}, not a dict", v.type_name());
    };
    let mut s = RecordedSettings::default();
    for (k, v) in d.items.borrow().iter() {
        let Some(k) = k.as_str() else { continue };
        match (k, v) {
            ("PYTORCH_CUDA_ALLOC_CONF", c) if c.as_str().is_some() => {
                s.conf = c.as_str().unwrap_or_default().to_string()
            }
            ("max_split_size", v) => {
                let b = v.as_int().ok_or_else(|| {
                    anyhow::anyhow!("`max_split_size` is {}, expected an int", v.brief())
                })?;
                // SIZE_MAX written as an int64 is -1: unlimited.
                s.max_split_size_bytes = (b > 0 && b < i64::MAX).then_some(b as u64);
            }
            ("garbage_collection_threshold", Value::Float(f)) => {
                s.garbage_collection_threshold = *f
            }
            ("garbage_collection_threshold", v) if v.as_int().is_some() => {
                s.garbage_collection_threshold = v.as_int().unwrap_or(0) as f64
            }
            ("expandable_segments", Value::Bool(b)) => s.expandable_segments = *b,
            ("roundup_power2_divisions", Value::Dict(r)) => {
                for (rk, rv) in r.items.borrow().iter() {
                    if let (Some(mb), Some(div)) =
                        (rk.as_str().and_then(|x| x.parse::<u64>().ok()), rv.as_int())
                    {
                        s.roundup_power2_divisions.insert(mb, div.max(0) as u64);
                    }
                }
            }
            (k, v) => {
                s.other.insert(k.to_string(), v.brief());
            }
        }
    }
    Ok(s)
}
