//! The names live at a point of the check's walk: members `base[i]` of a group held by their
//! index under the group, every other name by itself, so that a group of a million members is
//! found in index order, and a member looked up, without comparing a million strings.

use std::collections::BTreeMap;

use super::names::LiveName;

/// The live names, as a map from name to what it holds. A name is a *member* when it reads
/// `base[i]` with `i` written as `u64` writes it (no sign, no leading zero); members are held
/// by base and index, the rest (`a`, `a[07]`, `a[x]`) by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LiveSet {
    singles: BTreeMap<String, LiveName>,
    /// Never holds an empty group, so that two sets of the same names compare equal.
    groups: BTreeMap<String, BTreeMap<u64, LiveName>>,
    members: usize,
}

/// `(base, index)` of a member name, written canonically.
fn member(name: &str) -> Option<(&str, u64)> {
    let inner = name.strip_suffix(']')?;
    let open = inner.bytes().rposition(|b| b == b'[')?;
    let digits = &inner[open + 1..];
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    if !canonical {
        return None;
    }
    Some((&inner[..open], digits.parse().ok()?))
}

/// The names in `m` that read `name[i]` with `i` read as a `u64`, with `i`, in `m`'s order.
fn scan_members<V>(m: &BTreeMap<String, V>, name: &str) -> Vec<(u64, String)> {
    let prefix = format!("{name}[");
    m.range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .filter_map(|(k, _)| {
            let idx = k[prefix.len()..].strip_suffix(']')?.parse::<u64>().ok()?;
            Some((idx, k.clone()))
        })
        .collect()
}

impl LiveSet {
    pub(super) fn len(&self) -> usize {
        self.singles.len() + self.members
    }

    pub(super) fn get(&self, name: &str) -> Option<&LiveName> {
        match member(name) {
            Some((base, i)) => self.groups.get(base)?.get(&i),
            None => self.singles.get(name),
        }
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut LiveName> {
        match member(name) {
            Some((base, i)) => self.groups.get_mut(base)?.get_mut(&i),
            None => self.singles.get_mut(name),
        }
    }

    pub(super) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub(super) fn insert(&mut self, name: String, live: LiveName) -> Option<LiveName> {
        let Some((base, i)) = member(&name) else {
            return self.singles.insert(name, live);
        };
        let group = match self.groups.get_mut(base) {
            Some(g) => g,
            None => self.groups.entry(base.to_string()).or_default(),
        };
        let old = group.insert(i, live);
        if old.is_none() {
            self.members += 1;
        }
        old
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<LiveName> {
        let Some((base, i)) = member(name) else {
            return self.singles.remove(name);
        };
        let group = self.groups.get_mut(base)?;
        let old = group.remove(&i)?;
        self.members -= 1;
        if group.is_empty() {
            self.groups.remove(base);
        }
        Some(old)
    }

    /// Every live name `name[i]` with `i` read as a `u64` (a sign or leading zeros allowed),
    /// by index (then by name, where two are written for one index).
    pub(super) fn members_of(&self, name: &str) -> Vec<String> {
        let mut odd = scan_members(&self.singles, name);
        let group = self.groups.get(name);
        if odd.is_empty() {
            return group.map_or_else(Vec::new, |g| {
                g.keys()
                    .map(|i| crate::workload::member_name(name, *i))
                    .collect()
            });
        }
        if let Some(g) = group {
            odd.extend(
                g.keys()
                    .map(|i| (*i, crate::workload::member_name(name, *i))),
            );
        }
        odd.sort();
        odd.into_iter().map(|(_, k)| k).collect()
    }

    /// How many live names begin with `prefix`.
    pub(super) fn count_prefixed(&self, prefix: &str) -> usize {
        let starts = |k: &String| k.starts_with(prefix);
        let singles = self
            .singles
            .range(prefix.to_string()..)
            .take_while(|(k, _)| starts(k))
            .count();
        // Groups whose base begins with `prefix`: every member does.
        let whole: usize = self
            .groups
            .range(prefix.to_string()..)
            .take_while(|(k, _)| starts(k))
            .map(|(_, g)| g.len())
            .sum();
        // Groups whose base is `prefix` cut before one of its '[': the members whose
        // `index]` begins with the rest.
        let cut: usize = prefix
            .match_indices('[')
            .filter_map(|(at, _)| {
                let group = self.groups.get(&prefix[..at])?;
                let rest = &prefix[at + 1..];
                if rest.is_empty() {
                    return Some(group.len());
                }
                Some(
                    group
                        .keys()
                        .filter(|i| format!("{i}]").starts_with(rest))
                        .count(),
                )
            })
            .sum();
        singles + whole + cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn live(bytes: u64) -> LiveName {
        LiveName {
            bytes,
            filled: false,
        }
    }

    /// The plain model: every name by itself.
    fn model_members(m: &BTreeMap<String, LiveName>, name: &str) -> Vec<String> {
        let mut v = scan_members(m, name);
        v.sort();
        v.into_iter().map(|(_, k)| k).collect()
    }

    #[test]
    fn members_are_held_by_index_and_others_by_name() {
        assert_eq!(member("a[12]"), Some(("a", 12)));
        assert_eq!(member("a[1][0]"), Some(("a[1]", 0)));
        assert_eq!(member("a[[3]"), Some(("a[", 3)));
        for odd in [
            "a",
            "a[]",
            "a[01]",
            "a[+1]",
            "a[x]",
            "a[1",
            "a[18446744073709551616]",
        ] {
            assert_eq!(member(odd), None, "{odd}");
        }
        let mut s = LiveSet::default();
        for n in ["a[10]", "a[2]", "a[02]", "a[+3]", "a", "a[x]", "b[0]"] {
            assert_eq!(s.insert(n.to_string(), live(7)), None);
        }
        assert_eq!(s.len(), 7);
        assert_eq!(s.members_of("a"), ["a[02]", "a[2]", "a[+3]", "a[10]"]);
        assert_eq!(s.count_prefixed("a["), 5);
        assert_eq!(s.count_prefixed("a[1"), 1);
        assert_eq!(s.count_prefixed("a[10]"), 1);
        assert_eq!(s.count_prefixed(""), 7);
        assert_eq!(s.remove("b[0]"), Some(live(7)));
        assert_eq!(s.remove("b[0]"), None);
        assert_eq!(s, {
            let mut t = LiveSet::default();
            for n in ["a", "a[x]", "a[+3]", "a[02]", "a[2]", "a[10]"] {
                t.insert(n.to_string(), live(7));
            }
            t
        });
    }

    fn name() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just("0".to_string()),
            Just("1".to_string()),
            Just("12".to_string()),
            Just("+".to_string()),
            Just(".r".to_string()),
        ];
        prop::collection::vec(part, 1..6).prop_map(|p| p.concat())
    }

    proptest! {
        /// Inserts, removes and lookups agree with a map of every name by itself.
        #[test]
        fn agrees_with_a_plain_map(ops in prop::collection::vec((0..3u8, name(), 1..4u64), 1..80), probes in prop::collection::vec(name(), 1..20)) {
            let mut s = LiveSet::default();
            let mut m = BTreeMap::new();
            for (op, n, bytes) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(s.insert(n.clone(), live(bytes)), m.insert(n, live(bytes))),
                    _ => prop_assert_eq!(s.remove(&n), m.remove(&n)),
                }
                prop_assert_eq!(s.len(), m.len());
            }
            for p in probes {
                prop_assert_eq!(s.get(&p), m.get(&p));
                prop_assert_eq!(s.members_of(&p), model_members(&m, &p));
                let n = m.keys().filter(|k| k.starts_with(p.as_str())).count();
                prop_assert_eq!(s.count_prefixed(&p), n, "prefix {:?}", p);
            }
        }
    }
}
