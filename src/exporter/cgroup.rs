//! Which container and Kubernetes pod a process belongs to, read from `/proc/PID/cgroup`: the
//! container runtime's scope or directory (Docker, containerd, CRI-O, Podman) and the kubelet's
//! pod cgroup, in cgroup v1 (`ID:controllers:path`) and v2 (`0::path`) files, with the cgroupfs
//! and the systemd cgroup drivers' names. Paths are matched by component, so a path seen from
//! another cgroup namespace (`/../../kubepods-…`) reads the same.
//!
//! The forms, as the runtimes document them: Docker's run-metrics page
//! (docs.docker.com/engine/containers/runmetrics/: `/docker/<long id>` under cgroupfs,
//! `system.slice/docker-<long id>.scope` under systemd); the kubelet's pod cgroups
//! (kubernetes.io/docs/concepts/architecture/cgroups/ and its cgroup manager's naming:
//! `kubepods/<qos>/pod<uid>` under cgroupfs, `kubepods-<qos>-pod<uid with _ for ->.slice` under
//! systemd, no QoS level for Guaranteed pods); containerd's CRI scopes (`cri-containerd-<id>.scope`)
//! and CRI-O's (`crio-<id>.scope`, its monitor in `crio-conmon-<id>.scope`); Podman's
//! `libpod-<id>.scope`.

/// Where a process lives, as far as its cgroup path says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// `docker`, `containerd`, `cri-o`, `podman`; empty when not in a container.
    pub runtime: &'static str,
    /// The container's full id (64 hex digits); empty when not in a container.
    pub container_id: String,
    /// The Kubernetes pod's UID; empty outside a pod.
    pub pod_uid: String,
    /// `guaranteed`, `burstable`, `besteffort`; empty outside a pod.
    pub qos: &'static str,
}

/// The placement read from a whole `/proc/PID/cgroup` file: the v2 line where there is one,
/// else the v1 line that says the most (memory's, usually).
pub fn placement(cgroup_file: &str) -> Placement {
    let mut best = Placement::default();
    for line in cgroup_file.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(_controllers), Some(path)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let p = from_path(path);
        if score(&p) > score(&best) {
            best = p;
        }
    }
    best
}

fn score(p: &Placement) -> u8 {
    u8::from(!p.container_id.is_empty()) * 2 + u8::from(!p.pod_uid.is_empty())
}

/// The placement one cgroup path says.
pub fn from_path(path: &str) -> Placement {
    let mut p = Placement::default();
    let mut in_kubepods = false;
    let mut parent = "";
    for c in path.split('/') {
        if let Some(inner) = c.strip_prefix("kubepods") {
            in_kubepods = true;
            // systemd: `kubepods[-<qos>]-pod<uid, _ for ->.slice`, or the QoS level's slice.
            let inner = inner.strip_suffix(".slice").unwrap_or(inner);
            match inner.rsplit_once("-pod") {
                Some((qos, uid)) => {
                    if let Some(uid) = pod_uid(&uid.replace('_', "-")) {
                        p.pod_uid = uid;
                        p.qos = qos_named(qos.trim_start_matches('-')).unwrap_or("guaranteed");
                    }
                }
                None => p.qos = qos_named(inner.trim_start_matches('-')).unwrap_or(p.qos),
            }
        } else if in_kubepods && qos_named(c).is_some() {
            p.qos = qos_named(c).unwrap_or(p.qos);
        } else if let Some(uid) = c
            .strip_prefix("pod")
            .filter(|_| in_kubepods)
            .and_then(pod_uid)
        {
            p.pod_uid = uid;
            if p.qos.is_empty() {
                p.qos = "guaranteed";
            }
        } else if let Some((runtime, id)) = container_of(c, parent, !p.pod_uid.is_empty()) {
            p.runtime = runtime;
            p.container_id = id.to_string();
        }
        parent = c;
    }
    p
}

fn qos_named(s: &str) -> Option<&'static str> {
    match s {
        "burstable" => Some("burstable"),
        "besteffort" => Some("besteffort"),
        _ => None,
    }
}

/// A pod UID: 36 characters of hex digits and dashes.
fn pod_uid(uid: &str) -> Option<String> {
    let ok = uid.len() == 36 && uid.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-');
    ok.then(|| uid.to_string())
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container's scope or directory: `<runtime>-<id>.scope`, or a bare id (cgroupfs: Docker's
/// under `/docker/`; containerd's under a pod or a containerd namespace such as `/default/`;
/// a bare id under a pod is also what the kubelet's removed dockershim wrote).
fn container_of<'a>(c: &'a str, parent: &str, in_pod: bool) -> Option<(&'static str, &'a str)> {
    let stem = c.strip_suffix(".scope").unwrap_or(c);
    for (prefix, runtime) in [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
    ] {
        if let Some(id) = stem.strip_prefix(prefix) {
            return is_id(id).then_some((runtime, id));
        }
    }
    let runtime = if parent == "docker" && !in_pod {
        "docker"
    } else {
        "containerd"
    };
    is_id(stem).then_some((runtime, stem))
}

/// `/proc/PID/cgroup` read and placed; `None` when the process is gone or unreadable.
pub fn of_pid(pid: u32) -> Option<Placement> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    Some(placement(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/cgroup/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Every fixture's expected placement is its first line: `# runtime container pod qos`.
    #[test]
    fn every_runtime_and_driver_form_is_placed() {
        let dir = format!("{}/tests/fixtures/cgroup", env!("CARGO_MANIFEST_DIR"));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".txt"))
            .collect();
        names.sort();
        assert!(names.len() >= 10, "{names:?}");
        for name in names {
            let text = fixture(&name);
            let (head, body) = text.split_once('\n').unwrap();
            let want: Vec<&str> = head.trim_start_matches("# ").split(' ').collect();
            let p = placement(body);
            let dash = |s: &str| {
                if s.is_empty() {
                    "-".to_string()
                } else {
                    s.to_string()
                }
            };
            let got = [
                dash(p.runtime),
                dash(&p.container_id),
                dash(&p.pod_uid),
                dash(p.qos),
            ];
            assert_eq!(got.to_vec(), want, "{name}");
        }
    }

    #[test]
    fn near_misses_are_not_containers() {
        assert_eq!(
            from_path("/user.slice/user-1000.slice/session-3.scope"),
            Placement::default()
        );
        // An id one digit short, a pod UID with a bad character.
        let short = format!("/docker/{}", "a".repeat(63));
        assert_eq!(from_path(&short), Placement::default());
        let p = from_path("/kubepods/burstable/podzzzzzzzz-1111-2222-3333-444444444444/");
        assert_eq!(p.pod_uid, "");
    }
}
