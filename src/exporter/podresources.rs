//! The kubelet's pod-resources API (`/var/lib/kubelet/pod-resources/kubelet.sock`): which pod
//! and container each GPU was allocated to by a device plugin, by name and namespace. One
//! unary gRPC call, `/v1.PodResourcesLister/List` (k8s.io/kubelet `pkg/apis/podresources/v1`),
//! over HTTP/2 with prior knowledge on the Unix socket: the request's headers as HPACK
//! literals, the response's DATA frames collected (its headers are not decoded), and the
//! message read by its field numbers:
//! `ListPodResourcesResponse { repeated PodResources pod_resources = 1 }`,
//! `PodResources { name = 1, namespace = 2, repeated ContainerResources containers = 3 }`,
//! `ContainerResources { name = 1, repeated ContainerDevices devices = 2 }`,
//! `ContainerDevices { resource_name = 1, repeated string device_ids = 2 }`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Where the kubelet serves it.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The largest answer read.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// One device allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, …
    pub resource: String,
    /// The device plugin's id: a GPU's or MIG instance's UUID for NVIDIA's plugin.
    pub device_id: String,
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK string literal, not Huffman-coded (lengths under 127).
fn literal(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// The request: preface, settings, headers, and the empty request message.
fn request() -> Vec<u8> {
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http (static table 3, 6)
    h.push(0x04); // :path, literal without indexing, name from the static table
    literal(&mut h, "/v1.PodResourcesLister/List");
    h.push(0x01); // :authority
    literal(&mut h, "localhost");
    for (name, value) in [("content-type", "application/grpc"), ("te", "trailers")] {
        h.push(0x00);
        literal(&mut h, name);
        literal(&mut h, value);
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS, 1, &h));
    out.extend(frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]));
    out
}

/// Lists the allocations through the socket at `path`.
pub fn list(path: &Path) -> Result<Vec<Allocation>, String> {
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut s = UnixStream::connect(path).map_err(what)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(what)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(what)?;
    s.write_all(&request()).map_err(what)?;
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).map_err(what)?;
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > MAX_RESPONSE_BYTES || message.len() + len > MAX_RESPONSE_BYTES {
            return Err(format!("{}: an answer over 16 MiB", path.display()));
        }
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).map_err(what)?;
        match kind {
            SETTINGS if flags & ACK == 0 => {
                s.write_all(&frame(SETTINGS, ACK, 0, &[])).map_err(what)?
            }
            PING if flags & ACK == 0 => {
                s.write_all(&frame(PING, ACK, 0, &payload)).map_err(what)?
            }
            DATA if stream == 1 => {
                let body = if flags & PADDED != 0 {
                    let pad = usize::from(*payload.first().unwrap_or(&0));
                    payload.get(1..len.saturating_sub(pad)).unwrap_or(&[])
                } else {
                    &payload[..]
                };
                message.extend_from_slice(body);
                if len > 0 {
                    let inc = (len as u32).to_be_bytes();
                    s.write_all(&frame(WINDOW_UPDATE, 0, 0, &inc))
                        .map_err(what)?;
                    s.write_all(&frame(WINDOW_UPDATE, 0, 1, &inc))
                        .map_err(what)?;
                }
                if flags & END_STREAM != 0 {
                    break;
                }
            }
            HEADERS if stream == 1 && flags & END_STREAM != 0 => break,
            RST_STREAM if stream == 1 => {
                return Err(format!("{}: the kubelet reset the call", path.display()));
            }
            GOAWAY => {
                return Err(format!(
                    "{}: the kubelet closed the connection",
                    path.display()
                ));
            }
            _ => {}
        }
    }
    if message.len() < 5 {
        return Err(format!(
            "{}: the kubelet answered without a message (an error status)",
            path.display()
        ));
    }
    if message[0] != 0 {
        return Err(format!("{}: a compressed answer", path.display()));
    }
    let n = u32::from_be_bytes([message[1], message[2], message[3], message[4]]) as usize;
    let body = message
        .get(5..5 + n)
        .ok_or_else(|| format!("{}: a message cut short", path.display()))?;
    decode(body).map_err(|e| format!("{}: {e}", path.display()))
}

/// A protobuf field's value, as far as this reader needs.
enum Value<'a> {
    Varint,
    Bytes(&'a [u8]),
}

/// The fields of one protobuf message, in order.
fn fields(mut b: &[u8]) -> Result<Vec<(u64, Value<'_>)>, String> {
    fn varint(b: &mut &[u8]) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first().ok_or("a varint cut short")?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint over 64 bits".into())
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let value = match key & 7 {
            0 => {
                varint(&mut b)?;
                Value::Varint
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                b = b.get(n..).ok_or("a fixed field cut short")?;
                Value::Varint
            }
            2 => {
                let n = varint(&mut b)? as usize;
                let v = b.get(..n).ok_or("a field cut short")?;
                b = &b[n..];
                Value::Bytes(v)
            }
            w => return Err(format!("wire type {w} is not read")),
        };
        out.push((key >> 3, value));
    }
    Ok(out)
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

/// A `ListPodResourcesResponse`'s allocations.
pub fn decode(b: &[u8]) -> Result<Vec<Allocation>, String> {
    let mut out = Vec::new();
    for (n, pod) in fields(b)? {
        let (1, Value::Bytes(pod)) = (n, pod) else {
            continue;
        };
        let (mut name, mut namespace, mut containers) = (String::new(), String::new(), vec![]);
        for (n, v) in fields(pod)? {
            match (n, v) {
                (1, Value::Bytes(v)) => name = text(v),
                (2, Value::Bytes(v)) => namespace = text(v),
                (3, Value::Bytes(v)) => containers.push(v),
                _ => {}
            }
        }
        for c in containers {
            let (mut container, mut devices) = (String::new(), vec![]);
            for (n, v) in fields(c)? {
                match (n, v) {
                    (1, Value::Bytes(v)) => container = text(v),
                    (2, Value::Bytes(v)) => devices.push(v),
                    _ => {}
                }
            }
            for d in devices {
                let (mut resource, mut ids) = (String::new(), vec![]);
                for (n, v) in fields(d)? {
                    match (n, v) {
                        (1, Value::Bytes(v)) => resource = text(v),
                        (2, Value::Bytes(v)) => ids.push(text(v)),
                        _ => {}
                    }
                }
                for device_id in ids {
                    out.push(Allocation {
                        namespace: namespace.clone(),
                        pod: name.clone(),
                        container: container.clone(),
                        resource: resource.clone(),
                        device_id,
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, v: &[u8]) -> Vec<u8> {
        let mut out = vec![(n << 3 | 2) as u8, v.len() as u8];
        out.extend_from_slice(v);
        out
    }

    #[test]
    fn a_response_is_read_by_its_field_numbers_and_unknown_fields_are_skipped() {
        let device = [
            field(1, b"nvidia.com/gpu"),
            field(2, b"GPU-a"),
            field(2, b"GPU-b"),
            vec![3 << 3, 7], // an unknown varint field (the topology is a message: skipped too)
        ]
        .concat();
        let container = [field(1, b"trainer"), field(2, &device), vec![3 << 3, 4]].concat();
        let pod = [field(1, b"job-0"), field(2, b"ml"), field(3, &container)].concat();
        let got = decode(&field(1, &pod)).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1],
            Allocation {
                namespace: "ml".into(),
                pod: "job-0".into(),
                container: "trainer".into(),
                resource: "nvidia.com/gpu".into(),
                device_id: "GPU-b".into(),
            }
        );
        assert!(decode(&[0x0a, 0x05, 1]).is_err(), "a field cut short");
    }
}
