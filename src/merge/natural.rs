//! Natural order for folder names: runs of digits compare as numbers, so `node-2` comes
//! before `node-10` and `gpu3` before `gpu12`.

use std::cmp::Ordering;

/// `a` against `b`, digits as numbers (leading zeros ignored, then the shorter run first),
/// everything else byte by byte.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (da, ra) = digits(a);
                let (db, rb) = digits(b);
                let (ta, tb) = (trim_zeros(da), trim_zeros(db));
                let by_value = ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb));
                let ord = by_value.then_with(|| da.len().cmp(&db.len()));
                if ord != Ordering::Equal {
                    return ord;
                }
                (a, b) = (ra, rb);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

fn digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    s.split_at(n)
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|c| **c == b'0').count();
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_names_sort_as_numbers() {
        let mut v = vec![
            "node-10", "node-2", "node-1", "node-0", "gpu12", "gpu3", "node-02", "a",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            [
                "a", "gpu3", "gpu12", "node-0", "node-1", "node-2", "node-02", "node-10"
            ]
        );
        assert_eq!(
            natural_cmp(
                "node-99999999999999999999999",
                "node-100000000000000000000000"
            ),
            Ordering::Less
        );
    }
}
