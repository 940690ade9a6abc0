//! Evidence from other tools, read at the edge: each format is parsed here into headroom's own
//! types (a recorded allocator trace, segments, frames), and nothing past this module knows
//! which file it came from.
//!
//! - `pickle`: a reader for Python pickles that accepts data opcodes only (a pickle is code;
//!   this reader never looks up or calls anything).
//! - `torch`: PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`), as a pickle or
//!   as JSON, and the run folders `headroom import torch` writes from them.

pub mod pickle;
pub mod torch;
