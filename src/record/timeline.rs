//! Timeline.
