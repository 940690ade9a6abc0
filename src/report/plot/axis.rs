//! Axis ticks people can read: bytes in binary units on powers of two (`512 MiB`, `1.5 GiB`),
//! time in seconds on 1-2-5 steps.

use crate::units::{GIB, KIB, MIB};

const TIB: u64 = 1 << 40;

/// Byte ticks from 0 covering `max_bytes`: (the axis top, tick values).
pub fn byte_ticks(max_bytes: u64) -> (u64, Vec<u64>) {
    let max_bytes = max_bytes.max(1);
    // A power of two giving four to eight intervals.
    let mut step = 1u64;
    while max_bytes.div_ceil(step) > 8 {
        step *= 2;
    }
    let top = max_bytes.div_ceil(step) * step;
    ((top), (0..=top / step).map(|i| i * step).collect())
}

/// The label of a byte tick, in the unit of the axis top, without trailing zeros.
pub fn byte_label(bytes: u64, top: u64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    let (unit, name) = [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")]
        .into_iter()
        .find(|(u, _)| top >= *u)
        .unwrap_or((1, "B"));
    let v = bytes as f64 / unit as f64;
    let mut s = format!("{v:.3}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    format!("{s} {name}")
}

/// Time ticks in seconds from 0 covering `span_s`: (step, tick values).
pub fn time_ticks(span_s: f64) -> (f64, Vec<f64>) {
    let span_s = if span_s > 0.0 { span_s } else { 1e-3 };
    let mut step = 10f64.powf((span_s / 10.0).log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if span_s / (step * m) <= 10.0 {
            step *= m;
            break;
        }
    }
    let n = (span_s / step).floor() as usize;
    (step, (0..=n).map(|i| i as f64 * step).collect())
}

/// The label of a time tick: as many decimals as the step needs, then `s`.
pub fn time_label(t_s: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{t_s:.decimals$} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ticks_are_powers_of_two_in_binary_units() {
        let (top, ticks) = byte_ticks(2952790016); // 2.75 GiB
        assert_eq!(top, 3 * GIB);
        assert_eq!(ticks.len(), 7);
        let labels: Vec<String> = ticks.iter().map(|t| byte_label(*t, top)).collect();
        assert_eq!(
            labels,
            [
                "0", "0.5 GiB", "1 GiB", "1.5 GiB", "2 GiB", "2.5 GiB", "3 GiB"
            ]
        );
        let (top, ticks) = byte_ticks(140 * GIB);
        assert_eq!((top, ticks.len()), (160 * GIB, 6));
        assert_eq!(byte_label(300 * MIB, 512 * MIB), "300 MiB");
    }

    #[test]
    fn time_ticks_step_by_one_two_five() {
        let (step, ticks) = time_ticks(1.711);
        assert_eq!(step, 0.2);
        assert_eq!(ticks.len(), 9);
        assert_eq!(time_label(ticks[3], step), "0.6 s");
        let (step, _) = time_ticks(95.0);
        assert_eq!(step, 10.0);
        assert_eq!(time_label(30.0, 10.0), "30 s");
    }
}
