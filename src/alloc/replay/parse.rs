//! Reading one log line into an event: headroom's format and RMM's. Errors are messages
//! that name the column and quote the value; the caller adds the file and line.

/// A stream as a log names it: its number, and how the log wrote it, so messages can quote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogStream {
    pub id: u64,
    form: StreamForm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamForm {
    Decimal,
    /// Hexadecimal, as RMM writes a `cudaStream_t` (`%llx`, or `0x…` from an `ostream`).
    Hex {
        prefixed: bool,
        upper: bool,
    },
}

/// A stream known only by its number (a snapshot's stream, a lane of the replay's own).
impl From<u64> for LogStream {
    fn from(id: u64) -> Self {
        LogStream {
            id,
            form: StreamForm::Decimal,
        }
    }
}

impl std::fmt::Display for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.form {
            StreamForm::Decimal => write!(f, "{}", self.id),
            StreamForm::Hex { prefixed, upper } => {
                if prefixed {
                    f.write_str("0x")?;
                }
                if upper {
                    write!(f, "{:X}", self.id)
                } else {
                    write!(f, "{:x}", self.id)
                }
            }
        }
    }
}

/// One event of a log, with the log's own names for addresses and streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    Allocate {
        ptr: u64,
        bytes: u64,
        stream: LogStream,
    },
    Free {
        ptr: u64,
        /// The size the log says was freed, where it gives one.
        bytes: Option<u64>,
    },
    RecordStream {
        ptr: u64,
        stream: LogStream,
    },
    EmptyCache,
    /// A failure line for anything but an allocation (skipped).
    LoggedFailure,
    /// An allocation the log says was refused: tried again, and freed at once if it fits.
    FailedAllocate {
        bytes: u64,
        stream: LogStream,
    },
}

fn field<'r>(r: &'r csv::ByteRecord, i: usize, name: &str) -> Result<&'r str, String> {
    let raw = r.get(i).ok_or_else(|| format!("missing column {name}"))?;
    std::str::from_utf8(raw)
        .map(str::trim)
        .map_err(|_| format!("column {name} is not UTF-8 text"))
}

fn check_width(r: &csv::ByteRecord) -> Result<(), String> {
    match r.len() {
        6 => Ok(()),
        n if n < 6 => Err(format!(
            "expected 6 columns, found {n}: the line is cut short, as the last line of a log is when its process died before the log was flushed; --keep-going skips such a line and replays the rest"
        )),
        n => Err(format!("expected 6 columns, found {n}")),
    }
}

fn parse_u64(v: &str, name: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("{name} {v:?} is not a whole number of bytes"))
}

/// An address: hexadecimal, with or without `0x` (RMM parses it base 16).
fn parse_ptr(v: &str, name: &str) -> Result<u64, String> {
    let hex = v
        .strip_prefix("0x")
        .or_else(|| v.strip_prefix("0X"))
        .unwrap_or(v);
    if hex.is_empty() {
        return Err(format!("{name} is empty"));
    }
    u64::from_str_radix(hex, 16).map_err(|_| format!("{name} {v:?} is not a hexadecimal address"))
}

/// A headroom stream number: decimal, or `0x`-prefixed hex.
fn parse_stream(v: &str, name: &str) -> Result<LogStream, String> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(_) => parse_hex_stream(v, name),
        None => v
            .parse()
            .map(|id| LogStream {
                id,
                form: StreamForm::Decimal,
            })
            .map_err(|_| format!("{name} {v:?} is not a stream")),
    }
}

/// An RMM stream: a `cudaStream_t` in hexadecimal, with `0x` or bare (`%llx`), as RMM's
/// `format_stream` and older versions wrote it. `0` is the default stream either way.
fn parse_hex_stream(v: &str, name: &str) -> Result<LogStream, String> {
    let (prefixed, hex) = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => (true, h),
        None => (false, v),
    };
    let id = u64::from_str_radix(hex, 16)
        .ok()
        .filter(|_| !hex.is_empty() && !hex.starts_with('+'))
        .ok_or_else(|| format!("{name} {v:?} is not a stream (hexadecimal, with or without 0x)"))?;
    let upper = hex.chars().any(|c| c.is_ascii_uppercase());
    Ok(LogStream {
        id,
        form: StreamForm::Hex { prefixed, upper },
    })
}

/// A size column a row may leave empty.
fn optional_u64(v: &str, name: &str) -> Result<Option<u64>, String> {
    if v.is_empty() {
        Ok(None)
    } else {
        parse_u64(v, name).map(Some)
    }
}

fn nonzero(bytes: u64) -> Result<u64, String> {
    if bytes == 0 {
        return Err("an allocation of 0 bytes".into());
    }
    Ok(bytes)
}

/// `t_ns,action,ptr,bytes,stream,detail`.
pub(super) fn parse_headroom(
    r: &csv::ByteRecord,
    _pace: bool,
) -> Result<(Option<u64>, Event), String> {
    check_width(r)?;
    let t = field(r, 0, "t_ns")?;
    let t = t
        .parse::<u64>()
        .map_err(|_| format!("t_ns {t:?} is not a whole number of nanoseconds"))?;
    let action = field(r, 1, "action")?;
    let event = match action {
        "allocate" => Event::Allocate {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
            bytes: nonzero(parse_u64(field(r, 3, "bytes")?, "bytes")?)?,
            stream: parse_stream(field(r, 4, "stream")?, "stream")?,
        },
        "free" => Event::Free {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
            bytes: optional_u64(field(r, 3, "bytes")?, "bytes")?,
        },
        "record_stream" => Event::RecordStream {
            ptr: parse_ptr(field(r, 2, "ptr")?, "ptr")?,
            stream: parse_stream(field(r, 4, "stream")?, "stream")?,
        },
        "empty_cache" => Event::EmptyCache,
        "failure" => match (field(r, 2, "ptr")?, field(r, 3, "bytes")?) {
            ("", bytes) if !bytes.is_empty() => Event::FailedAllocate {
                bytes: nonzero(parse_u64(bytes, "bytes")?)?,
                stream: parse_stream(field(r, 4, "stream")?, "stream")?,
            },
            _ => Event::LoggedFailure,
        },
        other => {
            return Err(format!(
                "action {other:?} is not one of allocate, free, record_stream, empty_cache, failure"
            ));
        }
    };
    Ok((Some(t), event))
}

/// `Thread,Time,Action,Pointer,Size,Stream`. The time is read only when pacing.
pub(super) fn parse_rmm(r: &csv::ByteRecord, pace: bool) -> Result<(Option<u64>, Event), String> {
    check_width(r)?;
    let time = if pace {
        Some(parse_rmm_time(field(r, 1, "Time")?)?)
    } else {
        None
    };
    let action = field(r, 2, "Action")?;
    let event = match action {
        "allocate" => Event::Allocate {
            ptr: parse_ptr(field(r, 3, "Pointer")?, "Pointer")?,
            bytes: nonzero(parse_u64(field(r, 4, "Size")?, "Size")?)?,
            stream: parse_hex_stream(field(r, 5, "Stream")?, "Stream")?,
        },
        "free" | "deallocate" => Event::Free {
            ptr: parse_ptr(field(r, 3, "Pointer")?, "Pointer")?,
            bytes: optional_u64(field(r, 4, "Size")?, "Size")?,
        },
        "allocate failure" => Event::FailedAllocate {
            bytes: nonzero(parse_u64(field(r, 4, "Size")?, "Size")?)?,
            stream: parse_hex_stream(field(r, 5, "Stream")?, "Stream")?,
        },
        other => {
            return Err(format!(
                "Action {other:?} is not one of allocate, free, deallocate, allocate failure"
            ));
        }
    };
    Ok((time, event))
}

/// RMM's time: `HH:MM:SS.ffffff` (or `HH:MM:SS:ffffff`, as older versions wrote it), or
/// seconds since the epoch with a fraction. Returns nanoseconds.
fn parse_rmm_time(v: &str) -> Result<u64, String> {
    let bad = || format!("Time {v:?} is neither HH:MM:SS.ffffff nor seconds");
    let parts: Vec<&str> = v.split(':').collect();
    let (whole_s, frac) = match parts.as_slice() {
        [h, m, s] => {
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            let hms = [*h, *m, sec].map(|x| x.parse::<u64>().ok());
            let [Some(h), Some(m), Some(sec)] = hms else {
                return Err(bad());
            };
            (h * 3600 + m * 60 + sec, frac)
        }
        [h, m, s, us] => {
            let hms = [*h, *m, *s].map(|x| x.parse::<u64>().ok());
            let [Some(h), Some(m), Some(sec)] = hms else {
                return Err(bad());
            };
            (h * 3600 + m * 60 + sec, *us)
        }
        [s] => {
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            (sec.parse::<u64>().map_err(|_| bad())?, frac)
        }
        _ => return Err(bad()),
    };
    if frac.len() > 9 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let frac_ns = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(9 - frac.len() as u32)
    };
    whole_s
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(frac_ns))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmm_times() {
        assert_eq!(
            parse_rmm_time("01:02:03.000004").unwrap(),
            3_723_000_004_000
        );
        assert_eq!(
            parse_rmm_time("01:02:03:000004").unwrap(),
            3_723_000_004_000
        );
        assert_eq!(
            parse_rmm_time("1634567890.5").unwrap(),
            1_634_567_890_500_000_000
        );
        assert!(parse_rmm_time("yesterday").is_err());
        assert!(parse_rmm_time("1:2").is_err());
    }

    #[test]
    fn addresses_and_streams() {
        assert_eq!(parse_ptr("0x7f00", "ptr").unwrap(), 0x7f00);
        assert_eq!(parse_ptr("7f00", "ptr").unwrap(), 0x7f00);
        assert!(parse_ptr("0xzz", "ptr").unwrap_err().contains("\"0xzz\""));
        assert_eq!(parse_stream("0x10", "s").unwrap().id, 16);
        assert_eq!(parse_stream("10", "s").unwrap().id, 10);
    }

    #[test]
    fn rmm_streams_are_hex_with_or_without_0x_and_print_as_written() {
        for (written, id) in [
            ("7f3a2c000b40", 0x7f3a_2c00_0b40),
            ("0x7f3a2c000b40", 0x7f3a_2c00_0b40),
            ("10", 16),
            ("0", 0),
            ("7F3A2C000B40", 0x7f3a_2c00_0b40),
        ] {
            let s = parse_hex_stream(written, "Stream").unwrap();
            assert_eq!((s.id, s.to_string()), (id, written.to_string()));
        }
        assert!(parse_hex_stream("", "Stream").is_err());
        assert!(
            parse_hex_stream("0xzz", "Stream")
                .unwrap_err()
                .contains("\"0xzz\"")
        );
    }
}
