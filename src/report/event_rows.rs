//! `events.csv` read row by row, field by field: each row borrowed from the reader's buffer,
//! with its columns found by name in the header, and owned (`Event`) only where kept.

use anyhow::Context;

use crate::report::rundata::Event;

/// One row of `events.csv`, borrowed from the reader.
pub(crate) struct EventRef<'a> {
    t_ns: u64,
    text: [&'a str; 7],
    requested_bytes: Option<u64>,
    size_bytes: Option<u64>,
    latency_ns: u64,
    device_free_bytes: Option<u64>,
}

impl EventRef<'_> {
    pub(crate) fn stream(&self) -> &str {
        self.text[4]
    }

    pub(crate) fn result(&self) -> &str {
        self.text[5]
    }

    pub(crate) fn owned(&self) -> Event {
        let [phase, step, op, name, stream, result, detail] = self.text.map(str::to_string);
        Event {
            t_ns: self.t_ns,
            phase,
            step,
            op,
            name,
            stream,
            requested_bytes: self.requested_bytes,
            size_bytes: self.size_bytes,
            latency_ns: self.latency_ns,
            result,
            device_free_bytes: self.device_free_bytes,
            detail,
        }
    }
}

/// Where each of `Event`'s fields sits in `events.csv`'s header (by name, as a reader by
/// header would find them; other columns are skipped).
pub(crate) struct EventColumns([usize; 12]);

/// The header's column names, the writer's own list (`Event` has every column of it).
const EVENT_FIELDS: [&str; 12] = crate::record::timeline::EVENT_HEADER;

impl EventColumns {
    pub(crate) fn of(header: &csv::ByteRecord) -> anyhow::Result<EventColumns> {
        let mut at = [0; 12];
        for (slot, field) in at.iter_mut().zip(EVENT_FIELDS) {
            *slot = header
                .iter()
                .position(|h| h == field.as_bytes())
                .with_context(|| format!("no column {field:?} in the header"))?;
        }
        Ok(EventColumns(at))
    }

    /// One row, read field by field (what `serde` would make of it, at a fraction of the cost).
    pub(crate) fn event<'r>(&self, r: &'r csv::ByteRecord) -> anyhow::Result<EventRef<'r>> {
        let text = |k: usize| -> anyhow::Result<&'r str> {
            let cell = r.get(self.0[k]).unwrap_or_default();
            std::str::from_utf8(cell)
                .with_context(|| format!("field {:?} is not UTF-8", EVENT_FIELDS[k]))
        };
        let number = |k: usize| -> anyhow::Result<u64> {
            let cell = r.get(self.0[k]).unwrap_or_default();
            decimal_u64(cell).with_context(|| {
                format!(
                    "field {:?}: {:?} is not a count",
                    EVENT_FIELDS[k],
                    String::from_utf8_lossy(cell)
                )
            })
        };
        let maybe = |k: usize| -> anyhow::Result<Option<u64>> {
            if text(k)?.is_empty() {
                Ok(None)
            } else {
                number(k).map(Some)
            }
        };
        Ok(EventRef {
            t_ns: number(0)?,
            text: [
                text(1)?,
                text(2)?,
                text(3)?,
                text(4)?,
                text(5)?,
                text(9)?,
                text(11)?,
            ],
            requested_bytes: maybe(6)?,
            size_bytes: maybe(7)?,
            latency_ns: number(8)?,
            device_free_bytes: maybe(10)?,
        })
    }
}

/// The `u64` written in `digits` (as `str::parse` reads it: an optional `+`, then ASCII
/// digits), without the generic parser's per-digit cost in a debug build.
fn decimal_u64(digits: &[u8]) -> Option<u64> {
    let digits = digits.strip_prefix(b"+").unwrap_or(digits);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |v, &b| {
        b.is_ascii_digit()
            .then(|| v.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_read_as_str_parse_reads_them() {
        let cases = [
            "0",
            "+7",
            "18446744073709551615",
            "18446744073709551616",
            "",
            "+",
            "-1",
            "1 ",
            "0x10",
            "٣",
        ];
        for s in cases {
            assert_eq!(
                super::decimal_u64(s.as_bytes()),
                s.parse::<u64>().ok(),
                "{s:?}"
            );
        }
    }
}
