//! The built-in catalogue (`models/catalogue.toml`, compiled in): the config.json fields of
//! commonly served open models, each with the address it was read from, so `--model ID` needs
//! no network and no download.

use serde::Deserialize;

use super::{ModelError, ModelSource, ModelSpec};

const CATALOGUE: &str = include_str!("../../models/catalogue.toml");

#[derive(Debug, Deserialize)]
pub struct Entry {
    pub id: String,
    pub config_source: String,
    /// A public copy of the config its memory fields were compared with, when one was found.
    #[serde(default)]
    pub checked_against: Option<String>,
    pub config: toml::Table,
}

#[derive(Deserialize)]
struct File {
    model: Vec<Entry>,
}

/// Every entry, in file order.
pub fn entries() -> Vec<Entry> {
    toml::from_str::<File>(CATALOGUE)
        .expect("models/catalogue.toml is checked by its test")
        .model
}

/// The entry whose id matches (case-insensitively, so `qwen/qwen2.5-7b-instruct` works too).
pub fn find(id: &str) -> Option<Entry> {
    entries()
        .into_iter()
        .find(|e| e.id.eq_ignore_ascii_case(id))
}

/// A few ids that share the asked name's last part, for the error message.
pub fn suggestions(id: &str) -> String {
    let tail = id.rsplit('/').next().unwrap_or(id).to_ascii_lowercase();
    let stem: String = tail.chars().take(5).collect();
    let near: Vec<String> = entries()
        .into_iter()
        .filter(|e| e.id.to_ascii_lowercase().contains(&stem))
        .map(|e| e.id)
        .take(5)
        .collect();
    if near.is_empty() {
        "`headroom plan --list-models` lists it".to_string()
    } else {
        format!("near: {}", near.join(", "))
    }
}

/// TOML into JSON, as config.json would hold it.
pub fn to_json(t: &toml::Value) -> serde_json::Value {
    match t {
        toml::Value::String(s) => serde_json::Value::String(s.clone()),
        toml::Value::Integer(i) => serde_json::Value::from(*i),
        toml::Value::Float(f) => serde_json::Value::from(*f),
        toml::Value::Boolean(b) => serde_json::Value::Bool(*b),
        toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
        toml::Value::Array(a) => serde_json::Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(m) => {
            serde_json::Value::Object(m.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

/// The entry's model.
pub fn spec(e: Entry) -> Result<ModelSpec, ModelError> {
    let serde_json::Value::Object(obj) = to_json(&toml::Value::Table(e.config)) else {
        unreachable!("a table converts to an object")
    };
    super::config::from_object(
        &obj,
        &format!("models/catalogue.toml: {}", e.id),
        &e.id,
        ModelSource::Catalogue {
            id: e.id.clone(),
            config_source: e.config_source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_reads() {
        let all = entries();
        assert!(all.len() >= 30, "{}", all.len());
        for e in all {
            let id = e.id.clone();
            let s = spec(e).unwrap_or_else(|err| panic!("{id}: {err}"));
            assert!(s.parameter_count() > 100_000_000, "{id}");
        }
    }

    #[test]
    fn checked_entries_name_an_address() {
        let checked: Vec<Entry> = entries()
            .into_iter()
            .filter(|e| e.checked_against.is_some())
            .collect();
        assert!(checked.len() >= 8, "{}", checked.len());
        for e in checked {
            let at = e.checked_against.unwrap_or_default();
            assert!(at.starts_with("https://"), "{}: {at}", e.id);
        }
    }
}
