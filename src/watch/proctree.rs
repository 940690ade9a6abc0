//! The watched job's process tree, read from /proc: whether a PID NVML lists descends from the
//! job, and whether the process attached to is still the same one.

/// Parent-chain steps followed before giving up (a loop in /proc cannot happen, but a bound
/// keeps a racing read finite).
const MAX_DEPTH: usize = 4096;

/// The parent PID in the text of `/proc/PID/stat`: the field after the state, which follows
/// the last `)` (the command name in parentheses may itself hold `)` or spaces).
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The start time field of `/proc/PID/stat` (clock ticks since boot): with the PID, it names
/// one process; a reused PID has another.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 (state) on; starttime is field 22.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

fn stat(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The parent of `pid`, or `None` when the process is not visible here.
pub fn parent_of(pid: u32) -> Option<u32> {
    parse_ppid(&stat(pid)?)
}

/// The start time of `pid`, or `None` when the process is not visible here.
pub fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&stat(pid)?)
}

/// Whether `pid` is `root` or one of its descendants: `None` when `pid` is not visible from
/// here (another PID namespace, or it just exited).
pub fn descends_from(pid: u32, root: u32) -> Option<bool> {
    descends_with(pid, root, parent_of)
}

fn descends_with(pid: u32, root: u32, parent: impl Fn(u32) -> Option<u32>) -> Option<bool> {
    let mut p = pid;
    for step in 0..MAX_DEPTH {
        if p == root {
            return Some(true);
        }
        match parent(p) {
            Some(0) => return Some(false),
            Some(next) => p = next,
            None if step == 0 => return None,
            // An ancestor exited while we walked: the chain is broken, not ours.
            None => return Some(false),
        }
    }
    Some(false)
}

/// Whether the process `pid` that started at `start` is still running (not a zombie).
pub fn still_running(pid: u32, start: Option<u64>) -> bool {
    crate::tenant::process_alive(pid) && (start.is_none() || start_time(pid) == start)
}

/// Reaps the children of this process that have exited, except `keep` (the job itself, whose
/// status is read elsewhere): orphans of the job re-parented to headroom would otherwise stay
/// zombies until headroom exits.
pub fn reap_orphans(keep: u32) {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == keep || pid == me {
            continue;
        }
        if let Some(st) = stat(pid)
            && parse_ppid(&st) == Some(me)
            && zombie(&st)
        {
            // SAFETY: waits without blocking for one exited child of this process.
            unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

/// The processes still running (not zombies) that descend from `root`, `root` left out, in
/// PID order: after the job's own process exits, those are its orphans (re-parented to
/// headroom, the job's subreaper) and what they started.
pub fn live_descendants(root: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != root)
        .filter(|&pid| stat(pid).is_some_and(|st| !zombie(&st)))
        .filter(|&pid| descends_from(pid, root) == Some(true))
        .collect();
    out.sort_unstable();
    out
}

fn zombie(stat: &str) -> bool {
    stat.rsplit(')')
        .next()
        .is_some_and(|r| r.trim_start().starts_with('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (python (train) x) S 17 4242 17 34816 4242 4194304 1 0 0 0 \
                        5 2 0 0 20 0 3 0 987654 12345678 1000 18446744073709551615";

    #[test]
    fn fields_after_a_command_with_parentheses_and_spaces() {
        assert_eq!(parse_ppid(STAT), Some(17));
        assert_eq!(parse_start_time(STAT), Some(987654));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn a_chain_reaches_the_root_or_not() {
        // 5 → 4 → 3 (root) → 1 → 0; 9 is not visible.
        let parent = |p: u32| match p {
            5 => Some(4),
            4 => Some(3),
            3 => Some(1),
            1 => Some(0),
            7 => Some(1),
            _ => None,
        };
        assert_eq!(descends_with(5, 3, parent), Some(true));
        assert_eq!(descends_with(3, 3, parent), Some(true));
        assert_eq!(descends_with(7, 3, parent), Some(false));
        assert_eq!(descends_with(9, 3, parent), None);
    }

    #[test]
    fn this_process_descends_from_its_parent() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        assert_eq!(descends_from(me, parent), Some(true));
        assert_eq!(descends_from(parent, me), Some(false));
        assert!(still_running(me, start_time(me)));
        assert!(!still_running(me, start_time(me).map(|t| t + 1)));
    }
}
