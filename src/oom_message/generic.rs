//! The reader under the specific ones: any out-of-memory wording, in any runtime's vocabulary,
//! yields the size figures of its sentence and the sentences after it that carry sizes, each
//! labelled by the words around it (`figures`), with the memory it is about (device, host RAM,
//! TPU HBM, on-chip shared memory) and the runtime its words name. It claims what no specific
//! reader took; where it finds more figures than the specific reading of the same text (a typo
//! inside a known phrase, a wording a release changed), it is kept instead (`scan::select`).
//!
//! The wordings are the runtimes' own, learnt from their sources and listed in docs/oom.md:
//! "out of memory" and its spellings (`OutOfMemory`, `OUT_OF_MEMORY`, HIP's
//! `hipError_t(1002)`), `RESOURCE_EXHAUSTED`, cuDNN's `CUDNN_STATUS_ALLOC_FAILED`, Triton's
//! "out of resource: shared memory", XLA TPU's "Ran out of memory in memory space hbm",
//! PyTorch's `DefaultCPUAllocator: not enough memory`, TensorRT's "Requested amount of GPU
//! memory (N bytes) could not be allocated", Theano's "Error allocating N bytes of device
//! memory", MIOpen's "Memory not available to allocate buffer", and the plain English ones
//! ("failed to allocate", "unable to allocate", "insufficient memory", …).

use std::cell::RefCell;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder};

use serde::Serialize;

use super::figures::{self, Figure};
use super::scan::{Found, Reader, raised_as};
use super::{Detail, cursor::floor_boundary};

/// Which memory a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySpace {
    /// A GPU's device memory: what headroom's views measure.
    Device,
    /// The host's RAM (a CPU allocator, the kernel's `ENOMEM`).
    HostRam,
    /// Pinned (page-locked) host RAM (`cudaHostAlloc`, `cuMemHostAlloc`, ggml's
    /// `ggml_cuda_host_malloc`): host memory the driver locks for transfers, bounded by the
    /// host's RAM and its lock limit, not by the GPU.
    PinnedHostRam,
    /// A TPU's high-bandwidth memory: not a CUDA device.
    TpuHbm,
    /// A TPU core's on-chip vector memory (XLA's memory space `vmem`, Pallas' `VMEM`): a
    /// compiler's scratch space, not a CUDA device and not HBM.
    TpuVmem,
    /// A TPU core's on-chip scalar memory (XLA's memory space `smem`, Pallas' `SMEM`).
    TpuSmem,
    /// A TPU's on-chip common memory (XLA's memory space `cmem`, Pallas' `CMEM`).
    TpuCmem,
    /// A kernel's on-chip shared memory per block (Triton's `OutOfResources`): a launch
    /// limit, not device memory.
    SharedMemory,
}

impl MemorySpace {
    /// How a person names it.
    pub fn words(self) -> &'static str {
        match self {
            MemorySpace::Device => "GPU device memory",
            MemorySpace::HostRam => "host RAM",
            MemorySpace::PinnedHostRam => "host RAM (pinned)",
            MemorySpace::TpuHbm => "TPU HBM",
            MemorySpace::TpuVmem => "TPU VMEM",
            MemorySpace::TpuSmem => "TPU SMEM",
            MemorySpace::TpuCmem => "TPU CMEM",
            MemorySpace::SharedMemory => "on-chip shared memory",
        }
    }
}

/// Out-of-memory wordings, in lower case; each is also matched capitalized, in title case and
/// upper case.
const PHRASES: &[&str] = &[
    "out of memory",
    "out of gpu memory",
    "out of device memory",
    "out of resource",
    "outofmemory",
    "outofresources",
    "out_of_memory",
    "resource exhausted",
    "resource_exhausted",
    "resourceexhausted",
    "alloc_failed",
    "not enough memory",
    "failed to allocate",
    "failed to alloc ",
    "could not allocate",
    "could not be allocated",
    "cannot allocate",
    "can't allocate",
    "unable to allocate",
    "memory allocation failed",
    "allocation failed",
    "insufficient memory",
    "insufficient gpu memory",
    "memory not available",
    "error allocating",
    "bad_alloc",
    "memory exhausted",
    "allocation error",
    // Vulkan's results (`VK_ERROR_OUT_OF_DEVICE_MEMORY`, `VK_ERROR_OUT_OF_HOST_MEMORY`).
    "out_of_device_memory",
    "out_of_host_memory",
];

/// Written as the runtimes print them, besides the case forms of `PHRASES`.
const EXACT: &[&str] = &[
    "OutOfMemory",
    "ResourceExhausted",
    "OutOfResources",
    "MemoryError",
    "hipError_t(1002)",
    "failed with error 2",
    // Vulkan's results as its bindings name them.
    "OutOfDeviceMemory",
    "OutOfHostMemory",
    // PyTorch's CPU allocator enforces only what the system's allocator returned
    // (`c10/core/CPUAllocator.cpp`: `posix_memalign(…) == 0`, "DefaultCPUAllocator: can't
    // allocate memory"): a failed enforce there is host RAM refused, its message cut or not.
    "enforce fail at CPUAllocator.cpp",
    // A worker killed with SIGKILL (PyTorch's `DataLoader` says "is killed by signal:
    // Killed."): on Linux the sender is almost always the kernel's out-of-memory killer.
    "killed by signal: Killed",
];

/// The same wordings in the languages users paste them in: a runtime's message put through a
/// translator, or a localized tool's own. Chinese (simplified and traditional), Japanese and
/// Korean for "out of memory", "insufficient memory", "memory exhausted", "cannot allocate"
/// and "allocation failed", of memory and of video memory (显存, 視訊記憶體). A machine
/// translation turns "X: out of memory" into "X:没有记忆" ("no memory", as in recollection): in
/// that shape only, after the colon, it is the error's words.
pub(super) const TRANSLATED: &[&str] = &[
    "内存不足",
    "显存不足",
    "記憶體不足",
    "内存溢出",
    "显存溢出",
    "內存不足",
    "顯存不足",
    "内存耗尽",
    "显存耗尽",
    "内存用尽",
    "显存用尽",
    "内存分配失败",
    "显存分配失败",
    "无法分配内存",
    "无法分配显存",
    ":没有记忆",
    ": 没有记忆",
    "メモリ不足",
    "メモリが不足",
    "メモリを確保できません",
    "메모리 부족",
    "메모리가 부족",
    // The same in European languages, as a localized OS or a translator prints them.
    "недостаточно памяти",
    "нехватка памяти",
    "memoria insuficiente",
    "memória insuficiente",
    "memoria insufficiente",
    "memoria esaurita",
    "mémoire insuffisante",
    "nicht genügend Speicher",
    "nicht genügend Arbeitsspeicher",
    "nicht genug Speicher",
    "niewystarczająca ilość pamięci",
    "brak pamięci",
    "yetersiz bellek",
];

/// Words of which every translated wording holds one, whitespace-free (for the prefilter).
pub(super) const TRANSLATED_KEYS: &[&str] = &[
    "内存",
    "显存",
    "記憶體",
    "內存",
    "顯存",
    "没有记忆",
    "メモリ",
    "메모리",
    "памяти",
    "memoria",
    "memória",
    "mémoire",
    "Speicher",
    "speicher",
    "pamięci",
    "bellek",
];

/// `words` as written, capitalized and in capitals (any script's case).
pub(super) fn unicode_forms(words: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for p in words {
        let mut chars = p.chars();
        let cap: String = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default();
        for form in [p.to_string(), cap, p.to_uppercase()] {
            if !out.contains(&form) {
                out.push(form);
            }
        }
    }
    out
}

/// Every translated wording, as written, capitalized and in capitals.
pub(super) fn translated_forms() -> Vec<String> {
    unicode_forms(TRANSLATED)
}

fn case_forms(p: &str) -> Vec<String> {
    let cap = |w: &str| {
        let mut c = w.to_string();
        if let Some(f) = c.get_mut(..1) {
            f.make_ascii_uppercase();
        }
        c
    };
    let title: Vec<String> = p.split(' ').map(cap).collect();
    let mut v = vec![
        p.to_string(),
        cap(p),
        title.join(" "),
        p.to_ascii_uppercase(),
    ];
    v.dedup();
    v
}

/// Every anchor phrase, as the reader that claims only readings with figures (or about memory
/// other than the device) and as the one that claims any.
fn anchors(with_figures: bool) -> &'static [(&'static str, Reader)] {
    static WITH: OnceLock<Vec<(&'static str, Reader)>> = OnceLock::new();
    static ANY: OnceLock<Vec<(&'static str, Reader)>> = OnceLock::new();
    let build = |reader: Reader| {
        let mut out: Vec<(&'static str, Reader)> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for p in PHRASES
            .iter()
            .flat_map(|p| case_forms(p))
            .chain(EXACT.iter().map(|s| s.to_string()))
            .chain(translated_forms())
        {
            if seen.insert(p.clone()) {
                out.push((Box::leak(p.into_boxed_str()), reader));
            }
        }
        out
    };
    if with_figures {
        WITH.get_or_init(|| build(read_with_figures))
    } else {
        ANY.get_or_init(|| build(read_any))
    }
}

/// Ranked before the bare driver errors: a reading with figures.
pub(super) fn with_figures_anchors() -> &'static [(&'static str, Reader)] {
    anchors(true)
}

/// Ranked last: any wording no other reader took.
pub(super) fn any_anchors() -> &'static [(&'static str, Reader)] {
    anchors(false)
}

/// How far before the wording its sentence is looked for, and how far after it the sentences
/// that carry sizes.
const BEFORE_BYTES: usize = 240;
const AFTER_BYTES: usize = 720;
/// Sentences after the wording's own that are read while they carry sizes.
const MORE_SENTENCES: usize = 8;

/// The runtimes by the words their messages carry, most specific first.
const RUNTIMES: &[(&[&str], &str)] = &[
    (&["tensorrt-llm", "tensorrt_llm", "tllm"], "TensorRT-LLM"),
    (
        &[
            "tensorrt",
            "[trt]",
            "rtsafe",
            "nvinfer",
            "defaultallocator.cpp",
            "virtualmemorybuffer",
            "globwriter",
        ],
        "TensorRT",
    ),
    (&["miopen"], "MIOpen (ROCm)"),
    (&["hip ", "hip_", "hiperror", "rocm"], "ROCm/HIP"),
    (&["cudnn"], "cuDNN"),
    (&["cublas"], "cuBLAS"),
    (&["syncedmem", "caffe"], "Caffe"),
    (&["theano", "driver report"], "Theano"),
    (&["outofresources", "out of resource", "triton"], "Triton"),
    (&["memory space hbm", "tpu"], "XLA (TPU)"),
    (
        &["defaultcpuallocator", "alloc_cpu", "cpuallocator.cpp"],
        "PyTorch (CPU allocator)",
    ),
    (&["tensorview", "spconv"], "tensorview"),
    (
        &[
            "vkallocatememory",
            "vk_error",
            "vulkan",
            "outofdevicememory",
        ],
        "Vulkan",
    ),
    (&["deepspeed"], "DeepSpeed"),
    (&["megatron"], "Megatron"),
    (&["bitsandbytes"], "bitsandbytes"),
    (&["xformers"], "xformers"),
    (
        &[
            "flash_attn",
            "flash-attn",
            "flashattention",
            "flash attention",
        ],
        "flash-attention",
    ),
    (&["onnxruntime"], "ONNX Runtime"),
    (&["mxnet", "mshadow"], "MXNet"),
    (&["sglang"], "SGLang"),
    (&["vllm"], "vLLM"),
    (&["ggml", "llama"], "ggml (llama.cpp)"),
    (&["torch"], "PyTorch"),
    (&["tensorflow"], "TensorFlow"),
    (&["jax", "xla"], "XLA"),
];

/// Words naming memory other than the device's, by the space they name; `memoryerror` at the
/// text's start is Python's `MemoryError` too.
const TPU_WORDS: &[&str] = &["memory space hbm", " hbm", "tpu"];
/// The TPU's on-chip memory spaces as XLA names them in "Ran out of memory in memory space …"
/// (the values of Pallas' `TPUMemorySpace`, `jax/_src/pallas/mosaic/core.py`: `vmem`, `smem`,
/// `cmem`, besides HBM).
const TPU_VMEM_WORDS: &[&str] = &["memory space vmem"];
const TPU_SMEM_WORDS: &[&str] = &["memory space smem"];
const TPU_CMEM_WORDS: &[&str] = &["memory space cmem"];
const PINNED_WORDS: &[&str] = &[
    "pinned memory",
    "pinned host",
    "host_malloc",
    "cudahostalloc",
    "cumemhostalloc",
];
const SHARED_WORDS: &[&str] = &["out of resource", "outofresources"];
const HOST_WORDS: &[&str] = &[
    "defaultcpuallocator",
    "alloc_cpu",
    "cpu buffer",
    "cpu allocator",
    "host memory",
    "on host",
    "(cannot allocate memory)",
    "error code 12",
    "for an array with shape",
    // Python's `MemoryError`, not the end of `OutOfMemoryError`.
    " memoryerror",
    "arraymemoryerror",
    "bad_alloc",
    "killed process",
    "oom-kill",
    "killed by signal: killed",
    "cpuallocator.cpp",
    "out_of_host_memory",
    "outofhostmemory",
];

/// The words this reader names runtimes and memory spaces by.
pub(super) fn vocabulary_words() -> impl Iterator<Item = &'static str> {
    RUNTIMES
        .iter()
        .flat_map(|(words, _)| words.iter().copied())
        .chain(
            [
                TPU_WORDS,
                TPU_VMEM_WORDS,
                TPU_SMEM_WORDS,
                TPU_CMEM_WORDS,
                PINNED_WORDS,
                SHARED_WORDS,
                HOST_WORDS,
                &["shared memory"][..],
            ]
            .into_iter()
            .flatten()
            .copied(),
        )
}

/// Which of the words of `RUNTIMES` and of the memory spaces a span holds, found in one pass.
struct Vocabulary {
    search: AhoCorasick,
    /// Per pattern: the index in `RUNTIMES` it names, or a memory-space group (`usize::MAX - g`).
    meaning: Vec<usize>,
}

const TPU: usize = usize::MAX;
const PINNED: usize = usize::MAX - 1;
const SHARED: usize = usize::MAX - 2;
const HOST: usize = usize::MAX - 3;
const SHARED_MEMORY: usize = usize::MAX - 4;
const TPU_VMEM: usize = usize::MAX - 5;
const TPU_SMEM: usize = usize::MAX - 6;
const TPU_CMEM: usize = usize::MAX - 7;

fn vocabulary() -> &'static Vocabulary {
    static V: OnceLock<Vocabulary> = OnceLock::new();
    V.get_or_init(|| {
        let mut patterns: Vec<&str> = Vec::new();
        let mut meaning = Vec::new();
        for (i, (words, _)) in RUNTIMES.iter().enumerate() {
            for w in *words {
                patterns.push(w);
                meaning.push(i);
            }
        }
        for (group, words) in [
            (TPU, TPU_WORDS),
            (PINNED, PINNED_WORDS),
            (SHARED, SHARED_WORDS),
            (HOST, HOST_WORDS),
            (SHARED_MEMORY, &["shared memory"][..]),
            (TPU_VMEM, TPU_VMEM_WORDS),
            (TPU_SMEM, TPU_SMEM_WORDS),
            (TPU_CMEM, TPU_CMEM_WORDS),
        ] {
            for w in words {
                patterns.push(w);
                meaning.push(group);
            }
        }
        let search = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(&patterns)
            .expect("the vocabulary builds an automaton");
        Vocabulary { search, meaning }
    })
}

/// The runtime a span's words name (the first of `RUNTIMES` with a word in it) and the memory
/// it is about, from one search of the span.
fn runtime_and_memory(span: &str) -> (Option<String>, MemorySpace) {
    let v = vocabulary();
    let mut runtimes = vec![false; RUNTIMES.len()];
    let (mut tpu, mut pinned, mut shared, mut host, mut shared_memory) =
        (false, false, false, false, false);
    let (mut vmem, mut smem, mut cmem) = (false, false, false);
    for m in v.search.find_overlapping_iter(span) {
        match v.meaning[m.pattern().as_usize()] {
            TPU => tpu = true,
            PINNED => pinned = true,
            SHARED => shared = true,
            HOST => host = true,
            SHARED_MEMORY => shared_memory = true,
            TPU_VMEM => vmem = true,
            TPU_SMEM => smem = true,
            TPU_CMEM => cmem = true,
            i => runtimes[i] = true,
        }
    }
    let runtime = runtimes
        .iter()
        .position(|&hit| hit)
        .map(|i| RUNTIMES[i].1.to_string());
    let host = host
        || span
            .get(..11)
            .is_some_and(|h| h.eq_ignore_ascii_case("memoryerror"));
    let memory = if vmem {
        MemorySpace::TpuVmem
    } else if smem {
        MemorySpace::TpuSmem
    } else if cmem {
        MemorySpace::TpuCmem
    } else if tpu {
        MemorySpace::TpuHbm
    } else if pinned {
        MemorySpace::PinnedHostRam
    } else if shared && shared_memory {
        MemorySpace::SharedMemory
    } else if host {
        MemorySpace::HostRam
    } else {
        MemorySpace::Device
    };
    (runtime, memory)
}

/// Whether `s` holds an out-of-memory wording (`PHRASES`, any case).
pub(super) fn has_wording(s: &str) -> bool {
    static SEARCH: OnceLock<AhoCorasick> = OnceLock::new();
    SEARCH
        .get_or_init(|| {
            AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .build(
                    PHRASES
                        .iter()
                        .map(|p| p.to_string())
                        .chain(translated_forms()),
                )
                .expect("the phrases build an automaton")
        })
        .is_match(s)
}

thread_local! {
    /// The folded text's line ends while its readers run (`with_line_ends`).
    static LINE_ENDS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (the readers over a folded text) with that text's line ends known: a message read
/// by principle ends with its line unless the next lines carry its figures. The readings
/// remembered per anchor (`read_once`) last as long.
pub(super) fn with_line_ends<T>(line_ends: &[usize], f: impl FnOnce() -> T) -> T {
    LINE_ENDS.with(|l| {
        let mut l = l.borrow_mut();
        l.clear();
        l.extend_from_slice(line_ends);
    });
    // A reading remembered from another text is never reused (its address may be this one's).
    LAST.with(|l| l.borrow_mut().take());
    let out = f();
    LINE_ENDS.with(|l| l.borrow_mut().clear());
    LAST.with(|l| l.borrow_mut().take());
    out
}

/// The line ends (folded offsets) in `from..to`.
fn line_ends_within(from: usize, to: usize) -> Vec<usize> {
    LINE_ENDS.with(|l| {
        let l = l.borrow();
        let first = l.partition_point(|&e| e < from);
        l[first..]
            .iter()
            .take_while(|&&e| e < to)
            .copied()
            .collect()
    })
}

/// How far either side of a line end `wrapped_at` reads: as far as a figure's label is looked
/// for (`figures`), so what the break changes is seen.
const WRAP_WINDOW: usize = 80;

/// Whether the line end at `e` (a space in the folded text) is a word-wrapper's break inside
/// a sentence (a mail client's or an editor's, at a space): the figures read across it differ
/// from those read on either side apart. A line that ends where a figure must follow ("…you
/// tried to allocate" / "3077222400 bytes."), a figure whose unit or label is on the next line
/// ("…of which 36.29 GiB" / "is free"), a table's label and its value, read as one sentence
/// only when joined; so is a parenthesis the line opens and the next line closes, and a
/// sentence begun after another on the line whose figures are all on the next. Lines that each say their own figures read the same either way. Reads at
/// most `WRAP_WINDOW` bytes each side, back to the sentence's start and on to its end.
fn wrapped_at(text: &str, e: usize) -> bool {
    // A line that ends its sentence ends it: no label reads across a full stop.
    if text[..e].trim_end().ends_with('.') {
        return false;
    }
    let from = floor_boundary(text, e.saturating_sub(WRAP_WINDOW));
    let left = &text[from..e];
    // From a word's start, after the last sentence end before the break; whether that was on
    // the break's own line.
    let line_start = line_ends_within(from, e).last().map_or(from, |&l| l + 1);
    let (from, sentence_begun_on_the_line) = match left.rfind(". ") {
        Some(i) => (from + i + 2, from + i >= line_start),
        None => (from + left.find(' ').map_or(left.len(), |i| i + 1), false),
    };
    let to = floor_boundary(text, (e + 1 + WRAP_WINDOW).min(text.len()));
    let right = &text[(e + 1).min(to)..to];
    // To the sentence's end, or to a word's end.
    let to = match right.find(". ") {
        Some(i) => e + 1 + i + 1,
        None if to == text.len() => to,
        None => e + 1 + right.rfind(' ').unwrap_or(0),
    };
    if from >= e || to <= e + 1 {
        return false;
    }
    // A parenthesis the line opened and the next closes: "(out" / "of memory)".
    let open = |s: &str| {
        s.bytes().fold(0i32, |depth, b| match b {
            b'(' => depth + 1,
            b')' if depth > 0 => depth - 1,
            _ => depth,
        })
    };
    if open(&text[from..e]) > 0 && text[e + 1..to].contains(')') {
        return true;
    }
    let key = |fs: Vec<Figure>, shift: usize| -> Vec<(usize, usize, Option<figures::Label>)> {
        fs.into_iter()
            .map(|f| (f.at + shift, f.end + shift, f.label))
            .collect()
    };
    let joined = key(figures::read(&text[from..to]), from);
    if joined.is_empty() {
        return false;
    }
    let mut apart = key(figures::read(&text[from..e]), from);
    // A sentence begun after another on the line, with no figure before the break and its
    // figures after it ("… of 7.48G hbm. Exceeded hbm" / "capacity by 1.60G.").
    if sentence_begun_on_the_line && apart.is_empty() {
        return true;
    }
    apart.extend(key(figures::read(&text[e + 1..to]), e + 1));
    joined != apart
}

/// Where the sentence holding `at` starts, no further back than `from` nor than its line (a
/// wrapper's line end aside).
fn sentence_start(text: &str, from: usize, at: usize) -> usize {
    // A line end a wrapper put inside the sentence is not its start ("Requested amount of GPU
    // memory" / "(13476831488 bytes) could not be allocated").
    let line = line_ends_within(from, at)
        .into_iter()
        .rev()
        .find(|&e| !wrapped_at(text, e))
        .map_or(from, |e| e + 1);
    let from = from.max(line);
    text[from..at].rfind(". ").map_or(from, |i| from + i + 2)
}

/// An anchor as (the text's address and length, the anchor's start and end).
type AnchorKey = (usize, usize, usize, usize);

thread_local! {
    /// The last reading and the anchor it was read at (the text's address and length, the
    /// anchor's offsets): both families of anchors hold every wording, so each is read once.
    static LAST: RefCell<Option<(AnchorKey, Option<Found>)>> =
        const { RefCell::new(None) };
}

/// `read`, once per anchor.
fn read_once(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let key: AnchorKey = (text.as_ptr() as usize, text.len(), at, anchor_end);
    if let Some(found) = LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, f)| f.clone())
    }) {
        return found;
    }
    let found = read(text, at, anchor_end);
    LAST.with(|l| *l.borrow_mut() = Some((key, found.clone())));
    found
}

/// Whether the with-figures family keeps a reading: it has figures, or is about memory other
/// than the device's.
fn has_figures(f: &Found) -> bool {
    matches!(&f.detail, Detail::Generic { figures, memory, .. }
        if !figures.is_empty() || *memory != MemorySpace::Device)
}

fn read_with_figures(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    read_once(text, at, anchor_end).filter(has_figures)
}

/// A reading with figures is the with-figures family's (ranked before this one, over the same
/// span, so a second copy could never be kept).
fn read_any(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    read_once(text, at, anchor_end).filter(|f| !has_figures(f))
}

fn read(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    // A wording inside a name (`torch.OutOfMemoryError`, `ResourceExhaustedError`) reads from
    // the name's start, so the message after it, when a specific reader takes it, wins.
    let name_len = text[..at]
        .bytes()
        .rev()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
        .take(64)
        .count();
    let at = at - name_len;
    let from = floor_boundary(text, at.saturating_sub(BEFORE_BYTES));
    let start = sentence_start(text, from, at);
    let to = floor_boundary(text, (anchor_end + AFTER_BYTES).min(text.len()));
    // The wording's own sentence (to its line's end at most), then each following sentence or
    // line that carries a labelled size. A line end a wrapper put inside a sentence is not
    // an end (`wrapped_at`).
    // Each line end is looked at when the reading reaches it, once: a message that ends with
    // its line costs one look.
    let ends = line_ends_within(anchor_end, to);
    let wrapped: RefCell<Vec<Option<bool>>> = RefCell::new(vec![None; ends.len()]);
    let is_line_end =
        |k: usize| !*wrapped.borrow_mut()[k].get_or_insert_with(|| wrapped_at(text, ends[k]));
    let stop = |from: usize| {
        let sentence = text[from..to].find(". ").map_or(to, |i| from + i + 1);
        let first = ends.partition_point(|&e| e < from);
        let line = (first..ends.len())
            .take_while(|&k| ends[k] < sentence)
            .find(|&k| is_line_end(k))
            .map_or(to, |k| ends[k]);
        sentence.min(line).max(from)
    };
    let mut end = stop(anchor_end);
    // A line ending in a colon introduces the lines after it ("Total hbm usage >= 9.60G:"):
    // each of those that carries a size, labelled or not, belongs to the message.
    let mut block = text[..end].trim_end().ends_with(':');
    // Whether the sentences taken so far carry a size, worked out when first asked: on its
    // line, a sentence with another out-of-memory wording then starts another message (a line
    // of many messages is read one message at a time, not each to the line's end).
    let mut sized_so_far: Option<bool> = None;
    for _ in 0..MORE_SENTENCES {
        let new_line = ends.binary_search(&end).is_ok_and(is_line_end);
        let from_here = if new_line { end + 1 } else { end };
        let next = stop(from_here.min(to));
        let sentence = &text[end..next];
        let wording = has_wording(sentence);
        // A wording in parentheses names the same error ("Error code 12 (Cannot allocate
        // memory)", strerror's words), not another message.
        let head = sentence.split('(').next().unwrap_or("");
        let wording_outside_parentheses = wording && has_wording(head);
        let here = figures::read(sentence);
        let sized = here.iter().any(|f| f.label.is_some());
        // A traceback ends it; on its own line, so does another message's wording or a line
        // without a labelled size; on the same line, a sentence with neither.
        let in_block = block && new_line && !wording && !here.is_empty();
        let ends_here = sentence.contains("Traceback")
            || sentence.contains(" File \"")
            || next == end
            || if new_line {
                (wording || !sized) && !in_block
            } else {
                !(wording || sized)
                    || (wording_outside_parentheses
                        && *sized_so_far.get_or_insert_with(|| {
                            figures::read(&text[anchor_end..end])
                                .iter()
                                .any(|f| f.label.is_some())
                        }))
            };
        if ends_here {
            break;
        }
        if sized {
            sized_so_far = Some(true);
        }
        block = in_block || sentence.trim_end().ends_with(':');
        end = next;
    }
    let end = end.max(anchor_end);
    // An exception's name given as a field ("Exception Type: torch.OutOfMemoryError") names a
    // message printed elsewhere, not one: left to the specific readers (or the unrecognized
    // list).
    let rest = &text[anchor_end..end];
    let name_end = anchor_end + rest.len()
        - rest
            .trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
            .len();
    let name = &text[at..name_end];
    let exception = name.ends_with("Error") || name.ends_with("Exception");
    let labelled_as_type = text[start.min(at)..at]
        .trim_end_matches([' ', '*', '`'])
        .to_ascii_lowercase()
        .ends_with("type:");
    if exception && labelled_as_type && matches!(text[name_end..end].trim(), "" | ":") {
        return None;
    }
    let mut found: Vec<Figure> = figures::read(&text[start..end]);
    for f in &mut found {
        f.at += start;
        f.end += start;
    }
    // The message starts with the wording's sentence (on its line), or at the name holding it.
    let first = found
        .first()
        .map_or(at, |f| f.at.min(at))
        .min(start.max(from));
    let first = first + text[first..].len() - text[first..].trim_start().len();
    // It ends with its sentence (or line), or with its last figure past that.
    let sentence_end = anchor_end + text[anchor_end..end].trim_end().len();
    let span_end = found
        .last()
        .map_or(sentence_end, |f| f.end.max(sentence_end));
    let (runtime, memory) = runtime_and_memory(&text[start.min(first)..end]);
    Some(Found {
        start: first,
        end: span_end,
        raised_as: raised_as(text, first),
        detail: Detail::Generic {
            wording: text[at..anchor_end]
                .trim_start_matches(':')
                .trim()
                .to_string(),
            runtime,
            memory,
            figures: found,
        },
    })
}

/// Words that qualify the memory of "out of … memory" (Blender's "System is out of GPU and
/// shared host memory", "out of dedicated video memory"): a memory's kind, owner or place, and
/// the words that join them. A sentence that runs "out of" into other words ("out of ideas why
/// memory …") is not one.
const MEMORY_QUALIFIERS: &[&str] = &[
    "gpu",
    "gpus",
    "gpu's",
    "device",
    "device's",
    "video",
    "graphics",
    "cuda",
    "hip",
    "rocm",
    "accelerator",
    "npu",
    "host",
    "system",
    "cpu",
    "main",
    "shared",
    "dedicated",
    "global",
    "local",
    "physical",
    "virtual",
    "unified",
    "pinned",
    "page-locked",
    "on-chip",
    "texture",
    "available",
    "free",
    "usable",
    "all",
    "the",
    "its",
    "and",
    "or",
    "/",
];

/// Qualifiers that name the GPU's own memory.
const GPU_QUALIFIERS: &[&str] = &[
    "gpu",
    "gpus",
    "gpu's",
    "device",
    "device's",
    "video",
    "graphics",
    "cuda",
    "hip",
    "rocm",
    "dedicated",
];

/// Qualifiers that name the host's memory.
const HOST_QUALIFIERS: &[&str] = &["host", "system", "cpu", "main"];

/// At most this many qualifiers between "out of" and the memory.
const QUALIFIERS_MAX: usize = 4;

/// Which memory the qualifiers of "out of … memory" name.
#[derive(Clone, Copy, PartialEq)]
enum Named {
    Gpu,
    Host,
    Neither,
}

/// "out of" and one to `QUALIFIERS_MAX` of `MEMORY_QUALIFIERS` just before `at`: where "out of"
/// starts, and which memory the qualifiers name (the GPU's when any names it).
fn qualified_out_of(text: &str, at: usize) -> Option<(usize, Named)> {
    let before = &text[floor_boundary(text, at.saturating_sub(96))..at];
    let trimmed = before.strip_suffix(' ')?;
    let mut end = trimmed.len();
    let mut qualifiers = 0;
    let (mut gpu, mut host) = (false, false);
    loop {
        let word_start = trimmed[..end].rfind(' ').map_or(0, |i| i + 1);
        let word = trimmed[word_start..end].to_ascii_lowercase();
        if word == "of" && qualifiers > 0 {
            let out_end = word_start.checked_sub(1)?;
            let out_start = trimmed[..out_end].rfind(' ').map_or(0, |i| i + 1);
            if !trimmed[out_start..out_end].eq_ignore_ascii_case("out") {
                return None;
            }
            let named = match (gpu, host) {
                (true, _) => Named::Gpu,
                (false, true) => Named::Host,
                _ => Named::Neither,
            };
            return Some((at - before.len() + out_start, named));
        }
        if qualifiers == QUALIFIERS_MAX || !MEMORY_QUALIFIERS.contains(&word.as_str()) {
            return None;
        }
        gpu |= GPU_QUALIFIERS.contains(&word.as_str());
        host |= HOST_QUALIFIERS.contains(&word.as_str());
        qualifiers += 1;
        end = word_start.checked_sub(1)?;
    }
}

/// The memory words "out of …" is read up to; each is also an anchor.
pub(super) const QUALIFIED_ANCHORS: &[(&str, super::scan::Reader)] = &[
    ("memory", read_qualified),
    ("Memory", read_qualified),
    ("MEMORY", read_qualified),
    ("vram", read_qualified),
    ("VRAM", read_qualified),
];

/// "out of" with the memory's qualifiers between it and the memory word at `at`, read as any
/// wording is; the GPU's memory when a qualifier names it, whatever host memory it also names,
/// and the host's when only the host's is named.
fn read_qualified(text: &str, at: usize, anchor_end: usize) -> Option<Found> {
    let (start, named) = qualified_out_of(text, at)?;
    let mut found = read_once(text, start, anchor_end)?;
    if let Detail::Generic { memory, .. } = &mut found.detail {
        match named {
            Named::Gpu if matches!(memory, MemorySpace::HostRam | MemorySpace::PinnedHostRam) => {
                *memory = MemorySpace::Device
            }
            Named::Host if *memory == MemorySpace::Device => *memory = MemorySpace::HostRam,
            _ => {}
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_one(text: &str) -> (MemorySpace, Vec<(Option<&'static str>, String)>) {
        let found = super::super::find_all(text);
        assert_eq!(found.len(), 1, "{found:?}");
        match &found[0].detail {
            Detail::Generic {
                memory, figures, ..
            } => (
                *memory,
                figures
                    .iter()
                    .map(|f| (f.label.map(|l| l.as_str()), f.quantity.printed.clone()))
                    .collect(),
            ),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn an_unknown_runtime_that_says_out_of_memory_gets_its_figures_labelled() {
        let (memory, figures) = read_one(
            "2025-01-02 03:04:05 [fooml] ERROR: Out of memory: requested 1.5 GB, only 200 MB free of 8 GB total; peak 3.2 GB\nnext line 99 GB\n",
        );
        assert_eq!(memory, MemorySpace::Device);
        assert_eq!(
            figures,
            [
                (Some("requested"), "1.5 GB".to_string()),
                (Some("free"), "200 MB".to_string()),
                (Some("total"), "8 GB".to_string()),
                (None, "3.2 GB".to_string()),
            ]
        );
    }

    #[test]
    fn host_ram_tpu_hbm_and_shared_memory_are_named() {
        let (memory, figures) = read_one(
            "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 132426121216 bytes. Error code 12 (Cannot allocate memory)",
        );
        assert_eq!(memory, MemorySpace::HostRam);
        assert_eq!(
            figures[0],
            (Some("requested"), "132426121216 bytes".to_string())
        );
        let (memory, figures) = read_one(
            "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 9.08G of 7.48G hbm. Exceeded hbm capacity by 1.60G.",
        );
        assert_eq!(memory, MemorySpace::TpuHbm);
        assert_eq!(figures[1], (Some("total"), "7.48G".to_string()));
        let (memory, _) = read_one(
            "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.",
        );
        assert_eq!(memory, MemorySpace::TpuVmem);
        assert_eq!(memory.words(), "TPU VMEM");
        let (memory, _) = read_one(
            "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space smem.",
        );
        assert_eq!(memory, MemorySpace::TpuSmem);
        let (memory, _) = read_one(
            "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space cmem.",
        );
        assert_eq!(memory.words(), "TPU CMEM");
        let (memory, figures) = read_one(
            "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 163842, Hardware limitation: 101376.",
        );
        assert_eq!(memory, MemorySpace::SharedMemory);
        assert_eq!(
            figures,
            [
                (Some("requested"), "163842".to_string()),
                (Some("limit"), "101376".to_string())
            ]
        );
    }

    #[test]
    fn a_size_table_after_a_colon_belongs_to_the_message() {
        let (memory, figures) = read_one(
            "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 9.08G of 7.48G hbm. Exceeded hbm capacity by 1.60G.\n\nTotal hbm usage >= 9.60G:\n    reserved        530.00M \n    program           9.08G \n    arguments            0B \n",
        );
        assert_eq!(memory, MemorySpace::TpuHbm);
        let printed: Vec<&str> = figures.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(
            printed,
            ["9.08G", "7.48G", "1.60G", "9.60G", "530.00M", "9.08G", "0B"]
        );
        assert_eq!(figures[3].0, Some("in_use"));
    }

    #[test]
    fn pinned_host_memory_is_host_ram() {
        let (memory, figures) = read_one(
            "ggml_cuda_host_malloc: failed to allocate 1900,00 MiB of pinned memory: invalid argument",
        );
        assert_eq!(memory, MemorySpace::PinnedHostRam);
        assert_eq!(figures, [(Some("requested"), "1900,00 MiB".to_string())]);
    }

    #[test]
    fn paddle_s_failed_enforce_and_xla_s_async_allocator_are_read() {
        let (_, figures) = read_one(
            "paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 10513462067 > 1369702144",
        );
        assert_eq!(
            figures,
            [
                (Some("requested"), "10513462067".to_string()),
                (Some("free"), "1369702144".to_string())
            ]
        );
        let (_, figures) = read_one(
            "E1103 18:23:55.103160 1 gpu_cudamallocasync_allocator.cc:361] gpu_async_1 cuMemAllocAsync failed to allocate 1225195446464 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory\n Reported by CUDA: Free memory/Total memory: 22635544576/85095874560\nE1103 18:23:55.103186 1 gpu_cudamallocasync_allocator.cc:366] Stats: Limit: 0\nInUse: 61982909300\nMaxInUse: 61982909300\nNumAllocs: 21841\nMaxAllocSize: 59743666176\nReserved: 0\nPeakReserved: 0\nLargestFreeBlock: 0\n",
        );
        let got: Vec<(Option<&str>, &str)> =
            figures.iter().map(|(l, p)| (*l, p.as_str())).collect();
        assert_eq!(
            got,
            [
                (Some("requested"), "1225195446464 bytes"),
                (Some("free"), "22635544576"),
                (Some("total"), "85095874560"),
                (Some("limit"), "0"),
                (Some("in_use"), "61982909300"),
                (None, "61982909300"),
                (None, "59743666176"),
                (Some("reserved"), "0"),
                (None, "0"),
                (None, "0"),
            ]
        );
    }

    #[test]
    fn tensorflow_s_tensor_wording_is_read_in_lower_case() {
        let found = super::super::find_all(
            "resource exhausted: oom when allocating tensor with shape[16,112,112,147] and type float on /job:localhost/replica:0/task:0/device:gpu:0 by allocator gpu_0_bfc",
        );
        assert_eq!(found.len(), 1);
        let Detail::TfOomTensor {
            shape,
            tensor_bytes,
            device_index,
            ..
        } = &found[0].detail
        else {
            panic!("{:?}", found[0].detail);
        };
        assert_eq!(shape, "[16,112,112,147]");
        assert_eq!(*tensor_bytes, Some(16 * 112 * 112 * 147 * 4));
        assert_eq!(*device_index, Some(0));
    }

    #[test]
    fn a_message_cut_inside_a_figure_lists_it_as_cut() {
        let found = super::super::find_all(
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 108.00 MiB. GPU 0 has a total capacity of 23.68 GiB of which 34.88 MiB is free. Process 1170126 has 2.25\n",
        );
        assert_eq!(found.len(), 1);
        let cut = found[0].cut_figure.as_ref().expect("a cut figure");
        assert_eq!(cut.quantity.printed, "2.25");
        assert!(found[0].text.ends_with("has 2.25"));
    }

    #[test]
    fn markdown_escapes_are_read_through() {
        let text = "RuntimeError: CUDA\\_ERROR\\_OUT\\_OF\\_MEMORY\n";
        let found = super::super::find_all(text);
        assert_eq!(found.len(), 1, "{found:?}");
        // The message's text is the input's own, escapes and all.
        assert_eq!(found[0].text, "CUDA\\_ERROR\\_OUT\\_OF\\_MEMORY");
        let (_, figures) = read_one("ERROR: failed to allocate 3.5 GiB \\(out of memory\\)");
        assert_eq!(figures, [(Some("requested"), "3.5 GiB".to_string())]);
    }

    #[test]
    fn html_entities_are_read_as_what_they_stand_for() {
        let text = "EnforceNotMet: enforce allocating &lt;= available failed, 10513462067 &gt; 1369702144\n";
        let found = super::super::find_all(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].text.starts_with("enforce allocating &lt;="));
        assert!(found[0].text.ends_with("1369702144"));
        let Detail::Generic { figures, .. } = &found[0].detail else {
            panic!("{:?}", found[0].detail);
        };
        assert_eq!(figures[1].quantity.printed, "1369702144");
    }

    #[test]
    fn full_width_digits_and_letters_are_read_as_ascii() {
        let text = "错误：CUDA out of memory. Tried to allocate ２０．００ ＭｉＢ.\n";
        let found = super::super::find_all(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].text.ends_with("２０．００ ＭｉＢ."),
            "{}",
            found[0].text
        );
        let sizes = serde_json::to_string(&found[0].detail).unwrap();
        assert!(sizes.contains("\"low\":20966278"), "{sizes}");
        // A message that ends on a full-width character, or an entity, ends after all its bytes.
        let found = super::super::find_all("CUDA out of memory. Tried to allocate ２０ ＭｉＢ");
        assert!(found[0].text.ends_with("ＭｉＢ"), "{}", found[0].text);
        let found = super::super::find_all("RuntimeError: CUDA error: out of memory &gt;");
        assert!(!found[0].text.ends_with('&'), "{}", found[0].text);
    }

    #[test]
    fn a_message_translated_into_another_language_is_read_with_its_labels() {
        // A runtime's message put through a translator (simplified Chinese, full-width
        // punctuation), its figures kept as printed.
        let (memory, figures) = read_one(
            "GPU 1上出现内存不足错误。无法在GPU 1上分配2.500000GB内存，已分配7.250000 GB内存，可用内存仅为120.000000MB。",
        );
        assert_eq!(memory, MemorySpace::Device);
        assert_eq!(
            figures,
            [
                (Some("requested"), "2.500000GB".to_string()),
                (Some("allocated"), "7.250000 GB".to_string()),
                (Some("free"), "120.000000MB".to_string()),
            ]
        );
        // Video memory, with the labels before their figures and a total.
        let (_, figures) = read_one("错误：显存不足，需要 3.5 GiB，总共 8 GiB，剩余 512 MiB");
        assert_eq!(
            figures,
            [
                (Some("requested"), "3.5 GiB".to_string()),
                (Some("total"), "8 GiB".to_string()),
                (Some("free"), "512 MiB".to_string()),
            ]
        );
        // Traditional Chinese, Japanese and Korean, with no figures.
        for text in [
            "RuntimeError: CUDA 記憶體不足",
            "エラー: CUDAのメモリ不足です",
            "오류: GPU 메모리 부족",
            // A translator's "CUDA: out of memory" as "no memory" (recollection), after the
            // error's colon.
            "stream_gpu-inl.h:184:检查失败:e == cudaSuccess: CUDA:没有记忆",
        ] {
            let found = super::super::find_all(text);
            assert_eq!(found.len(), 1, "{text}: {found:?}");
        }
        // European languages, in any case.
        for text in [
            "RuntimeError: CUDA: недостаточно памяти",
            "Error: Memoria insuficiente en la GPU",
            "ERREUR : MÉMOIRE INSUFFISANTE",
        ] {
            let found = super::super::find_all(text);
            assert_eq!(found.len(), 1, "{text}: {found:?}");
        }
        // Prose with the same words and no error is nothing: "no memory" in a sentence, memory
        // mentioned.
        for text in [
            "我没有记忆这件事",
            "内存使用情况良好，显存还有 6 GiB 空闲",
            "メモリの使用量は 2 GiB です",
        ] {
            assert!(super::super::find_all(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn a_sentence_a_wrapper_broke_at_a_space_goes_on_to_its_figure() {
        // The figure after the line end the label before it asks for.
        for text in [
            "fooml: out of memory: could not allocate\n1.5 GB for the activations\n",
            "fooml: out of memory: could not allocate\r\n1.5 GB for the activations",
            "> fooml: out of memory: could not\n> allocate 1.5 GB for the activations",
            "fooml: out of memory: could not allocate 1.5\nGB for the activations\n",
        ] {
            let (_, figures) = read_one(text);
            assert_eq!(
                figures,
                [(Some("requested"), "1.5 GB".to_string())],
                "{text:?}"
            );
        }
        // A figure whose label is on the next line.
        let (_, figures) = read_one(
            "fooml: out of memory while loading the weights, only 200 MB\nfree on device 0",
        );
        assert_eq!(figures, [(Some("free"), "200 MB".to_string())]);
        // Lines that each say their own figures, or none, are lines.
        let text =
            "fooml: out of memory: could not allocate 1.5 GB\n2 GB of weights were loaded before\n";
        let (_, figures) = read_one(text);
        assert_eq!(figures, [(Some("requested"), "1.5 GB".to_string())]);
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i).collect();
        let folded = text.replace('\n', " ");
        assert!(!wrapped_at(&folded, ends[0]));
        assert!(wrapped_at(
            "out of memory: could not allocate 1.5 GB",
            "out of memory: could not allocate".len()
        ));
        assert!(wrapped_at(
            "Error allocating 45 bytes of device memory (out of memory). Driver report",
            "Error allocating 45 bytes of device memory (out".len()
        ));
        assert!(!wrapped_at(
            "Error allocating 45 bytes (see below) of device memory",
            "Error allocating 45 bytes (see below)".len()
        ));
        // A sentence that begins on the line before its wording.
        let (_, figures) = read_one(
            "[W] Requested amount of GPU memory\n(13476831488 bytes) could not be allocated.",
        );
        assert_eq!(
            figures,
            [(Some("requested"), "13476831488 bytes".to_string())]
        );
        // A sentence begun on the line, its figure on the next.
        let used = "RESOURCE_EXHAUSTED: Used 9.08G of 7.48G hbm. Exceeded hbm";
        let (_, figures) = read_one(&format!("{used}\ncapacity by 1.60G.\nnext"));
        assert_eq!(figures.len(), 3, "{figures:?}");
        let (_, figures) = read_one(&format!("{used}.\nCapacity by 1.60G.\nnext"));
        assert_eq!(figures.len(), 2, "{figures:?}");
        assert!(!wrapped_at(
            "failed to allocate 2 GiB failed to allocate 3 GiB",
            "failed to allocate 2 GiB".len()
        ));
    }

    #[test]
    fn out_of_memory_with_its_qualifiers_between() {
        for (text, space) in [
            (
                "System is out of GPU and shared host memory",
                MemorySpace::Device,
            ),
            (
                "Renderer: out of dedicated video memory",
                MemorySpace::Device,
            ),
            (
                "error: device is out of available VRAM while loading",
                MemorySpace::Device,
            ),
            (
                "worker ran Out Of System Memory, stopping",
                MemorySpace::HostRam,
            ),
            ("OUT OF HOST MEMORY", MemorySpace::HostRam),
        ] {
            let (memory, figures) = read_one(text);
            assert_eq!(memory, space, "{text}");
            assert!(figures.is_empty());
        }
        // With a figure after it.
        let (_, figures) = read_one("The GPU is out of shared memory: could not allocate 2.5 GiB");
        assert_eq!(figures, [(Some("requested"), "2.5 GiB".to_string())]);
        let found = super::super::find_all("System is out of GPU and shared host memory");
        assert!(matches!(&found[0].detail, Detail::Generic { wording, .. }
            if wording == "out of GPU and shared host memory"));
        // "out of" running into other words, or too many words between, is prose.
        for text in [
            "we ran out of ideas why memory use grows",
            "three out of four GPU memory readings were taken",
            "out of the the the the shared memory",
            "memory is fine, out of curiosity",
        ] {
            assert!(super::super::find_all(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn host_ram_by_its_allocator_or_the_out_of_memory_killer() {
        for text in [
            "\"enforce fail at CPUAllocator.cpp\" error when evaluating",
            "RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0",
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.",
            "ERROR: Unexpected bus error encountered in worker. killed by signal: Killed",
            "vk::Result::ErrorOutOfHostMemory",
        ] {
            let (memory, _) = read_one(text);
            assert_eq!(memory, MemorySpace::HostRam, "{text}");
        }
        // Another signal is not the out-of-memory killer's; the allocator's file named without
        // a failed enforce is not a failure.
        for text in [
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Aborted.",
            "loaded CPUAllocator.cpp symbols",
        ] {
            assert!(super::super::find_all(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn an_allocation_error_on_a_device() {
        let (memory, _) = read_one("ManagedCuda.NPP.NPPException:“Device allocation error”");
        assert_eq!(memory, MemorySpace::Device);
        let (memory, _) = read_one("VK_ERROR_OUT_OF_DEVICE_MEMORY");
        assert_eq!(memory, MemorySpace::Device);
    }

    #[test]
    fn wordings_match_in_every_case_form() {
        assert_eq!(
            case_forms("out of memory"),
            [
                "out of memory",
                "Out of memory",
                "Out Of Memory",
                "OUT OF MEMORY"
            ]
        );
    }
}
