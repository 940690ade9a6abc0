//! The checkpoint's own size: the sum of every tensor's bytes in the safetensors headers (an
//! 8-byte little-endian header length, then a JSON table of `dtype`, `shape`, `data_offsets`),
//! else `metadata.total_size` of `model.safetensors.index.json`. Only headers are read.

use std::io::Read;
use std::path::Path;

use super::ModelError;

/// The largest header headroom reads (the format allows 100 MB).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bytes of tensor data in the folder's checkpoint, or `None` when it has no safetensors files
/// and no index.
pub fn checkpoint_bytes(dir: &Path) -> Result<Option<u64>, ModelError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::Io(format!("{}: cannot list: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if !files.is_empty() {
        let mut total = 0u64;
        for f in &files {
            total += header_tensor_bytes(f)?;
        }
        return Ok(Some(total));
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Ok(None);
    }
    let place = index.display().to_string();
    let text = crate::bounded::read_small_text(&index, super::JSON_MAX_BYTES)
        .map_err(|e| ModelError::Io(format!("{place}: cannot read: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Field {
        place: place.clone(),
        message: format!("not JSON: {e}"),
    })?;
    match v.pointer("/metadata/total_size").and_then(|t| t.as_u64()) {
        Some(n) => Ok(Some(n)),
        None => Err(ModelError::Field {
            place,
            message: "metadata.total_size: missing or not a whole number".to_string(),
        }),
    }
}

/// The tensor bytes one safetensors file's header describes (`data_offsets` end − start).
pub fn header_tensor_bytes(path: &Path) -> Result<u64, ModelError> {
    let place = path.display().to_string();
    let io = |e: std::io::Error| ModelError::Io(format!("{place}: cannot read the header: {e}"));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(io)?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER_BYTES {
        return Err(ModelError::Field {
            place,
            message: format!("header length {n} bytes is over the format's 100 MB"),
        });
    }
    let mut buf = vec![0u8; n as usize];
    file.read_exact(&mut buf).map_err(io)?;
    let v: serde_json::Value = serde_json::from_slice(&buf).map_err(|e| ModelError::Field {
        place: place.clone(),
        message: format!("header is not JSON: {e}"),
    })?;
    let obj = v.as_object().ok_or_else(|| ModelError::Field {
        place: place.clone(),
        message: "header is not a JSON object".to_string(),
    })?;
    let mut total = 0u64;
    for (name, t) in obj {
        if name == "__metadata__" {
            continue;
        }
        let off = t
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .filter(|o| o.len() == 2)
            .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
            .filter(|(a, b)| b >= a)
            .ok_or_else(|| ModelError::Field {
                place: place.clone(),
                message: format!("tensor {name:?}: data_offsets is not [start, end]"),
            })?;
        total += off.1 - off.0;
    }
    Ok(total)
}
