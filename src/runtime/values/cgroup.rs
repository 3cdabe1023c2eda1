//! `cgroup_path(id)`: where cgroup `id` (the inode number of its cgroup v2
//! directory, as `bpf_get_current_cgroup_id` gives) is in each mounted
//! cgroup hierarchy, found as bpftrace finds it: the directory with that
//! inode number under each hierarchy's mount point.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Mounted hierarchies and the paths found so far.
#[derive(Default)]
pub struct CgroupPaths {
    /// `(name, mount point)`: `unified` for cgroup v2, the mount point's
    /// last component for v1 (`cpu`, `memory`, `systemd`...).
    roots: Option<Vec<(String, PathBuf)>>,
    known: HashMap<(u64, PathBuf), String>,
}

impl CgroupPaths {
    /// `(hierarchy, path)` of cgroup `id` in every hierarchy, the path
    /// empty where no directory has that inode number.
    pub fn paths(&mut self, id: u64) -> Vec<(String, String)> {
        let roots = self.roots.get_or_insert_with(mounted_hierarchies).clone();
        roots
            .into_iter()
            .map(|(name, root)| {
                let path = self
                    .known
                    .entry((id, root.clone()))
                    .or_insert_with(|| find(&root, id).unwrap_or_default())
                    .clone();
                (name, path)
            })
            .collect()
    }
}

/// The cgroup hierarchies in `/proc/mounts`.
fn mounted_hierarchies() -> Vec<(String, PathBuf)> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    hierarchies(&mounts)
}

fn hierarchies(mounts: &str) -> Vec<(String, PathBuf)> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let (kind, point) = (fields.next()?, fields.next()?);
            let point = PathBuf::from(point);
            match kind {
                "cgroup2" => Some(("unified".to_string(), point)),
                "cgroup" => {
                    let name = point.file_name()?.to_string_lossy().into_owned();
                    Some((name, point))
                }
                _ => None,
            }
        })
        .collect()
}

/// The path below `root` (`/` for `root` itself) of the directory whose
/// inode number is `id`.
fn find(root: &Path, id: u64) -> Option<String> {
    if std::fs::metadata(root).ok()?.ino() == id {
        return Some("/".into());
    }
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_dir() {
                continue;
            }
            let path = entry.path();
            if meta.ino() == id {
                let below = path.strip_prefix(root).ok()?;
                return Some(format!("/{}", below.display()));
            }
            pending.push(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// v2 is `unified`, v1 hierarchies are named by their mount point.
    #[test]
    fn names_hierarchies() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        let found = hierarchies(mounts);
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["cpu", "unified"]);
    }

    /// A directory is found by its inode number, its root as `/`.
    #[test]
    fn finds_directories_by_inode() {
        let root = tempfile::tempdir().expect("temporary directory");
        let nested = root.path().join("a/b");
        std::fs::create_dir_all(&nested).expect("create directories");
        let ino = |p: &Path| std::fs::metadata(p).expect("metadata").ino();
        assert_eq!(find(root.path(), ino(&nested)).as_deref(), Some("/a/b"));
        assert_eq!(find(root.path(), ino(root.path())).as_deref(), Some("/"));
        assert_eq!(find(root.path(), u64::MAX), None);
    }
}
