//! The allocator settings a snapshot recorded, as headroom's caching-allocator settings, and
//! what could not be carried over (said, not dropped silently).

use crate::alloc::caching::CachingConfig;

use super::model::{RecordedSettings, Snapshot};

const MIB: u64 = 1 << 20;

/// The settings to replay a snapshot with, and notes on what differs from the recording.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: CachingConfig,
    pub notes: Vec<String>,
}

/// The snapshot's own settings (`allocator_settings`, PyTorch 2.5 and later); PyTorch's
/// defaults when the snapshot is older, with expandable segments taken from the segments.
pub fn recorded(snap: &Snapshot) -> Settings {
    let mut cfg = CachingConfig::default();
    let mut notes = Vec::new();
    let Some(s) = &snap.settings else {
        let expandable = snap.segments.iter().any(|s| s.is_expandable == Some(true));
        cfg.expandable_segments = expandable;
        notes.push(format!(
            "the snapshot records no allocator_settings (PyTorch before 2.5): PyTorch's defaults are assumed{}",
            if expandable {
                ", with expandable segments (its segments are expandable)"
            } else {
                ""
            }
        ));
        return Settings { config: cfg, notes };
    };
    apply(s, &mut cfg, &mut notes);
    Settings { config: cfg, notes }
}

fn apply(s: &RecordedSettings, cfg: &mut CachingConfig, notes: &mut Vec<String>) {
    cfg.expandable_segments = s.expandable_segments;
    if let Some(bytes) = s.max_split_size_bytes {
        let mb = bytes / MIB;
        if bytes % MIB != 0 {
            notes.push(format!(
                "max_split_size is {bytes} bytes, not a whole MiB: replayed as {mb} MiB"
            ));
        }
        match cfg
            .clone()
            .set_checked("max_split_size_mb", &mb.to_string())
        {
            Ok(c) => *cfg = c,
            Err(e) => notes.push(format!("{e}: replayed without it")),
        }
    }
    for (mb, div) in &s.roundup_power2_divisions {
        if !mb.is_power_of_two() {
            continue;
        }
        let last = cfg.roundup_power2_divisions.len() - 1;
        let i = (mb.trailing_zeros() as usize).min(last);
        cfg.roundup_power2_divisions[i] = *div as u32;
    }
    // `max_non_split_rounding_mb` is only in the settings string.
    for part in s.conf.split(',') {
        if let Some(("max_non_split_rounding_mb", v)) = part.split_once(':') {
            match cfg
                .clone()
                .set_checked("max_non_split_rounding_mb", v.trim())
            {
                Ok(c) => *cfg = c,
                Err(e) => notes.push(format!("{e}: replayed without it")),
            }
        }
        if let Some(("backend", v)) = part.split_once(':')
            && v.trim() == "cudaMallocAsync"
        {
            notes.push("PYTORCH_CUDA_ALLOC_CONF names backend:cudaMallocAsync, whose decisions the caching model does not reproduce".into());
        }
    }
    if s.garbage_collection_threshold > 0.0 {
        notes.push(format!(
            "garbage_collection_threshold:{} is recorded, but PyTorch collects only with a per-process memory fraction, which a snapshot does not record: replayed without collection (give both with --settings)",
            s.garbage_collection_threshold
        ));
    }
    if s.other
        .get("graph_capture_record_stream_reuse")
        .map(String::as_str)
        == Some("True")
    {
        notes.push(
            "graph_capture_record_stream_reuse is on; CUDA graph capture is not modelled".into(),
        );
    }
}

trait SetChecked: Sized {
    fn set_checked(self, name: &str, value: &str) -> Result<Self, String>;
}

impl SetChecked for CachingConfig {
    fn set_checked(mut self, name: &str, value: &str) -> Result<CachingConfig, String> {
        self.set(name, value).map_err(|e| e.to_string())?;
        self.validate().map_err(|e| e.to_string())?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::torch::model::Encoding;

    #[test]
    fn recorded_settings_become_the_models() {
        let mut snap = Snapshot::empty("s", Encoding::Json);
        snap.settings = Some(RecordedSettings {
            conf: "expandable_segments:True,max_split_size_mb:128,max_non_split_rounding_mb:64"
                .into(),
            max_split_size_bytes: Some(128 * MIB),
            garbage_collection_threshold: 0.0,
            expandable_segments: true,
            roundup_power2_divisions: [(1, 0), (256, 4)].into_iter().collect(),
            other: Default::default(),
        });
        let s = recorded(&snap);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
        assert_eq!(s.config.max_split_size_mb, Some(128));
        assert_eq!(s.config.max_non_split_rounding_mb, 64);
        assert!(s.config.expandable_segments);
        assert_eq!(s.config.roundup_power2_divisions[8], 4);
        assert_eq!(s.config.roundup_power2_divisions[0], 0);
    }

    #[test]
    fn garbage_collection_without_a_fraction_is_said_not_dropped() {
        let mut snap = Snapshot::empty("s", Encoding::Json);
        snap.settings = Some(RecordedSettings {
            garbage_collection_threshold: 0.6,
            ..Default::default()
        });
        let s = recorded(&snap);
        assert_eq!(s.config, CachingConfig::default());
        assert!(
            s.notes[0].contains("garbage_collection_threshold:0.6"),
            "{:?}",
            s.notes
        );
    }
}
