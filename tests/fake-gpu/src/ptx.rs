//! Reading a PTX module as the JIT would before compiling it: its ISA version and target, and
//! each `.entry` with its parameter types, `.maxntid` launch bound and local (stack) frame.
//!
//! Anything that is not PTX text (a cubin or fatbin, an empty image) is refused: this driver
//! only "JIT-compiles".

use crate::errors::{
    CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX, CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
};

/// The newest PTX ISA the default driver (CUDA 12.4) accepts.
pub const MAX_VERSION: (u32, u32) = (8, 4);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    U32,
    U64,
    F32,
    /// Any other type, by size in bytes.
    Other(usize),
}

impl Param {
    pub fn size(self) -> usize {
        match self {
            Param::U32 | Param::F32 => 4,
            Param::U64 => 8,
            Param::Other(n) => n,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub params: Vec<Param>,
    /// `.maxntid x, y, z` multiplied out (the `__launch_bounds__`).
    pub max_threads: Option<u32>,
    /// Bytes of `.local` frame per thread.
    pub local_bytes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub version: (u32, u32),
    pub target: String,
    pub entries: Vec<Entry>,
}

/// Why a module did not load: the driver's error and the JIT error log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u32,
    pub log: String,
}

fn refuse(code: u32, line: usize, msg: &str) -> Refusal {
    Refusal {
        code,
        log: format!("ptxas application ptx input, line {line}; fatal   : {msg}"),
    }
}

fn param_type(decl: &str) -> Param {
    let t = decl
        .split_whitespace()
        .find(|w| w.starts_with('.') && *w != ".param" && !w.starts_with(".align"))
        .unwrap_or("");
    match t {
        ".u32" | ".s32" | ".b32" => Param::U32,
        ".u64" | ".s64" | ".b64" => Param::U64,
        ".f32" => Param::F32,
        ".u16" | ".s16" | ".b16" | ".f16" => Param::Other(2),
        ".u8" | ".s8" | ".b8" => Param::Other(1),
        ".f64" => Param::Other(8),
        _ => Param::Other(8),
    }
}

/// Parses PTX text (`image` without its NUL) as a JIT that accepts ISA versions up to
/// `max_isa` would.
pub fn parse(image: &[u8], device_sm: u32, max_isa: (u32, u32)) -> Result<Module, Refusal> {
    if image.starts_with(b"\x7fELF") || image.starts_with(&[0x50, 0xed, 0x55, 0xba]) {
        return Err(Refusal {
            code: CUDA_ERROR_INVALID_IMAGE,
            log: "the image is a cubin or fatbin; this driver loads PTX text only".into(),
        });
    }
    let text = std::str::from_utf8(image)
        .map_err(|_| refuse(CUDA_ERROR_INVALID_PTX, 1, "the PTX is not valid text"))?;
    let mut version = None;
    let mut target = None;
    let mut entries: Vec<Entry> = Vec::new();
    let mut in_params = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("").trim();
        let n = i + 1;
        if let Some(v) = line.strip_prefix(".version") {
            let (a, b) = v.trim().split_once('.').unwrap_or((v.trim(), "0"));
            let parsed = a
                .trim()
                .parse::<u32>()
                .ok()
                .zip(b.trim().parse::<u32>().ok());
            let Some(v) = parsed else {
                return Err(refuse(CUDA_ERROR_INVALID_PTX, n, "malformed .version"));
            };
            if v > max_isa {
                return Err(refuse(
                    CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                    n,
                    &format!(
                        "Unsupported .version {}.{}; current version is '{}.{}'",
                        v.0, v.1, max_isa.0, max_isa.1
                    ),
                ));
            }
            version = Some(v);
        } else if let Some(t) = line.strip_prefix(".target") {
            let t = t.split(',').next().unwrap_or("").trim().to_string();
            let sm = t
                .strip_prefix("sm_")
                .and_then(|s| s.trim_end_matches(['a', 'f']).parse::<u32>().ok());
            match sm {
                None => {
                    return Err(refuse(
                        CUDA_ERROR_INVALID_PTX,
                        n,
                        &format!("unknown target {t:?}"),
                    ));
                }
                Some(sm) if sm > device_sm => {
                    return Err(refuse(
                        CUDA_ERROR_INVALID_PTX,
                        n,
                        &format!(
                            "SM version specified by .target is higher than default SM version assumed (sm_{device_sm})"
                        ),
                    ));
                }
                Some(_) => target = Some(t),
            }
        } else if let Some(pos) = line.find(".entry ") {
            if version.is_none() || target.is_none() {
                return Err(refuse(
                    CUDA_ERROR_INVALID_PTX,
                    n,
                    "an .entry before .version and .target",
                ));
            }
            let name = line[pos + 7..]
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()
                .unwrap_or("")
                .to_string();
            if name.is_empty() {
                return Err(refuse(
                    CUDA_ERROR_INVALID_PTX,
                    n,
                    "an .entry without a name",
                ));
            }
            entries.push(Entry {
                name,
                params: Vec::new(),
                max_threads: None,
                local_bytes: 0,
            });
            in_params = line.contains('(') && !line.contains(')');
        } else if in_params {
            if line.starts_with(".param") {
                if let Some(e) = entries.last_mut() {
                    e.params.push(param_type(line));
                }
            }
            if line.contains(')') {
                in_params = false;
            }
        } else if let Some(v) = line.strip_prefix(".maxntid") {
            let product = v
                .split(',')
                .map(|x| x.trim().parse::<u32>().unwrap_or(1))
                .product();
            if let Some(e) = entries.last_mut() {
                e.max_threads = Some(product);
            }
        } else if line.starts_with(".local") && line.contains("__local_depot") {
            let size = line
                .rsplit_once('[')
                .and_then(|(_, r)| r.split(']').next())
                .and_then(|s| s.trim().parse::<u32>().ok())
                .unwrap_or(0);
            if let Some(e) = entries.last_mut() {
                e.local_bytes = e.local_bytes.max(size);
            }
        }
    }
    let (Some(version), Some(target)) = (version, target) else {
        return Err(refuse(
            CUDA_ERROR_INVALID_PTX,
            1,
            "no .version and .target directives: not PTX",
        ));
    };
    Ok(Module {
        version,
        target,
        entries,
    })
}
