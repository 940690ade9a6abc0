//! Interval peaks.
