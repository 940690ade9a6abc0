//! `summary.json`'s `device` with a total that may be unknown: an imported PyTorch snapshot
//! does not record its device's total, so an import without `--device-total` or `--profile`
//! writes `total_bytes: null`. In memory the device keeps `total_bytes: 0` then (no device has
//! none); readers ask `Summary::device_total`.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::device::{BackendKind, Capabilities, DeviceInfo, mig::MigIdentity};

/// `DeviceInfo` as written, field for field, its total optional.
#[derive(Serialize)]
struct Written<'a> {
    backend: &'a BackendKind,
    profile: &'a Option<String>,
    index: u32,
    name: &'a str,
    compute_capability: &'a str,
    total_bytes: Option<u64>,
    driver_version: &'a str,
    multiprocessors: u32,
    uuid: &'a Option<String>,
    capabilities: &'a Capabilities,
    #[serde(skip_serializing_if = "Option::is_none")]
    mig: &'a Option<MigIdentity>,
}

fn written(d: &DeviceInfo, total: Option<u64>) -> Written<'_> {
    Written {
        backend: &d.backend,
        profile: &d.profile,
        index: d.index,
        name: &d.name,
        compute_capability: &d.compute_capability,
        total_bytes: total,
        driver_version: &d.driver_version,
        multiprocessors: d.multiprocessors,
        uuid: &d.uuid,
        capabilities: &d.capabilities,
        mig: &d.mig,
    }
}

pub fn serialize<S: Serializer>(d: &DeviceInfo, s: S) -> Result<S::Ok, S::Error> {
    if d.total_bytes != 0 {
        return d.serialize(s);
    }
    written(d, None).serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DeviceInfo, D::Error> {
    let mut v = serde_json::Value::deserialize(d)?;
    if let Some(t) = v.get_mut("total_bytes")
        && t.is_null()
    {
        *t = serde_json::Value::from(0u64);
    }
    serde_json::from_value(v).map_err(serde::de::Error::custom)
}

/// `DeviceInfo`'s schema, its `total_bytes` nullable.
pub fn schema(g: &mut SchemaGenerator) -> Schema {
    let mut s = DeviceInfo::json_schema(g);
    if let Some(t) = s
        .get_mut("properties")
        .and_then(|p| p.get_mut("total_bytes"))
    {
        *t = serde_json::json!({
            "description": "CUDA-visible total (`cuMemGetInfo`); null for an import whose evidence does not record it (a PyTorch snapshot without --device-total or --profile).",
            "type": ["integer", "null"],
            "format": "uint64",
            "minimum": 0
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::prelude::*;
    use crate::device::profile::SimProfile;
    use crate::device::sim::SimDevice;

    #[test]
    fn written_holds_every_field_of_device_info() {
        let dev = SimDevice::open(SimProfile::resolve("tiny-4g").unwrap(), 0);
        let d = dev.info().clone();
        assert!(d.total_bytes > 0);
        let plain = serde_json::to_string(&d).unwrap();
        let mirror = serde_json::to_string(&written(&d, Some(d.total_bytes))).unwrap();
        assert_eq!(mirror, plain);
        let mut unknown = d.clone();
        unknown.total_bytes = 0;
        let mut ser = serde_json::Serializer::new(Vec::new());
        serialize(&unknown, &mut ser).unwrap();
        let text = String::from_utf8(ser.into_inner()).unwrap();
        assert_eq!(
            text,
            plain.replace(
                &format!("\"total_bytes\":{}", d.total_bytes),
                "\"total_bytes\":null"
            )
        );
        let back = deserialize(&mut serde_json::Deserializer::from_str(&text)).unwrap();
        assert_eq!(back, unknown);
    }
}
