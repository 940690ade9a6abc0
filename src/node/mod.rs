//! A whole node: every GPU (or a list of them) at once, one worker process per GPU, and a node
//! summary of its own next to the workers' result folders.

pub mod inventory;
pub mod selection;
