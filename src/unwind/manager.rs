//! The table manager (user space): builds one table per file (by build id),
//! shares it between every process mapping the file, places it in the rows
//! map within its bound (a table that does not fit is counted and its
//! mappings fall back to frame pointers), and keeps one mappings entry per
//! process, written when the process is added and removed when it exits.
//! Input: pids. Output: writes through a [`TableStore`] (the BPF maps).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use object::{Object, ObjectSegment};

use super::alloc::RowAllocator;
use super::maps::{MAX_MAPPINGS, MAX_TABLE_ROWS, NO_TABLE, UnwindLimits, process_mappings as pm};
use super::proc_maps::{ExecMapping, exec_mappings};
use super::table::UnwindTable;

/// Where the manager writes: the unwinder's maps, or a fake in tests.
pub trait TableStore {
    /// Encoded rows from `first_row` on.
    fn write_rows(&mut self, first_row: u32, encoded: &[u8]) -> Result<(), String>;
    /// Table `id` is `rows` rows from `first_row` (0 rows: no table).
    fn write_table(&mut self, id: u32, first_row: u32, rows: u32) -> Result<(), String>;
    /// The mappings value of process `tgid`.
    fn write_process(&mut self, tgid: u32, value: &[u8]) -> Result<(), String>;
    fn delete_process(&mut self, tgid: u32) -> Result<(), String>;
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("cannot read the mappings of process {pid}: {source}")]
    Mappings { pid: u32, source: std::io::Error },
    #[error("cannot write the unwind maps ({what}): {reason}")]
    Store { what: &'static str, reason: String },
}

/// What the manager holds and what it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerStats {
    /// Tables loaded now, and their rows.
    pub tables: usize,
    pub rows: u32,
    /// Tables that did not fit the rows map or the table limit (their
    /// mappings use frame pointers).
    pub dropped_tables: usize,
    /// Files without usable CFI (not ELF, no `.eh_frame`, unreadable).
    pub failed_files: usize,
    /// Executable mappings beyond `MAX_MAPPINGS` in a process.
    pub dropped_mappings: usize,
    /// Time spent building tables.
    pub build_time: Duration,
}

/// How a process's mappings were covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessReport {
    pub mappings: usize,
    /// Mappings with a table.
    pub with_table: usize,
    /// Mappings without one, with the reason.
    pub without_table: Vec<(String, String)>,
}

/// Identity of a file: a build id, or device and inode without one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TableKey {
    BuildId(Vec<u8>),
    File(String, u64),
}

/// A mapping's table key (when it is a file) and its load bias and table
/// id, or why it has none.
struct Coverage {
    key: Option<TableKey>,
    table: Result<(u64, u32), String>,
}

/// A file's table, loaded or not, and how many processes map it.
struct FileTable {
    /// Table id, first row and rows when loaded.
    loaded: Result<(u32, u32, u32), String>,
    /// `(file offset, virtual address, size)` of each executable `PT_LOAD` segment.
    segments: Vec<(u64, u64, u64)>,
    users: usize,
}

pub struct TableManager {
    rows: RowAllocator,
    limits: UnwindLimits,
    free_ids: Vec<u32>,
    tables: HashMap<TableKey, FileTable>,
    files: HashMap<(String, u64), TableKey>,
    processes: HashMap<u32, Vec<TableKey>>,
    stats: ManagerStats,
}

impl TableManager {
    pub fn new(limits: UnwindLimits) -> Self {
        TableManager {
            rows: RowAllocator::new(limits.rows),
            limits,
            free_ids: (0..limits.tables).rev().collect(),
            tables: HashMap::new(),
            files: HashMap::new(),
            processes: HashMap::new(),
            stats: ManagerStats::default(),
        }
    }

    pub fn stats(&self) -> &ManagerStats {
        &self.stats
    }

    /// Reads the executable mappings of `pid` (again, after an exec or a
    /// `dlopen`), loads the tables they need and writes its mappings entry.
    pub fn add_process(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
    ) -> Result<ProcessReport, ManagerError> {
        let mappings =
            exec_mappings(pid).map_err(|source| ManagerError::Mappings { pid, source })?;
        let mut report = ProcessReport::default();
        let mut value = vec![0u8; pm::BYTES as usize];
        let mut users = Vec::new();
        let kept = mappings.len().min(MAX_MAPPINGS as usize);
        self.stats.dropped_mappings += mappings.len() - kept;
        for (index, mapping) in mappings[..kept].iter().enumerate() {
            let coverage = self.table_of(store, pid, mapping)?;
            users.extend(coverage.key);
            let (bias, table) = match coverage.table {
                Ok(found) => {
                    report.with_table += 1;
                    found
                }
                Err(reason) => {
                    report.without_table.push((mapping.path.clone(), reason));
                    (0, NO_TABLE)
                }
            };
            write_entry(&mut value, index, mapping, bias, table);
        }
        report.mappings = kept;
        value[..4].copy_from_slice(&(kept as u32).to_ne_bytes());
        store
            .write_process(pid, &value)
            .map_err(|reason| ManagerError::Store {
                what: "process mappings",
                reason,
            })?;
        for key in &users {
            self.use_table(key, 1);
        }
        for key in self.processes.insert(pid, users).unwrap_or_default() {
            self.release(store, &key)?;
        }
        Ok(report)
    }

    /// Forgets process `pid`: its entry goes, and tables no other process
    /// maps are freed.
    pub fn remove_process(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
    ) -> Result<(), ManagerError> {
        let Some(keys) = self.processes.remove(&pid) else {
            return Ok(());
        };
        store
            .delete_process(pid)
            .map_err(|reason| ManagerError::Store {
                what: "process mappings",
                reason,
            })?;
        for key in keys {
            self.release(store, &key)?;
        }
        Ok(())
    }

    /// The table of a mapping's file, loading it on first sight. A file
    /// without a usable table is remembered too, so it is not read again
    /// while a process maps it.
    fn table_of(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
        mapping: &ExecMapping,
    ) -> Result<Coverage, ManagerError> {
        if !mapping.is_file() {
            let table = Err("not a file (vDSO, JIT or anonymous code)".into());
            return Ok(Coverage { key: None, table });
        }
        let file = (mapping.device.clone(), mapping.inode);
        let key = match self.files.get(&file) {
            Some(key) => key.clone(),
            None => {
                let key = self.load_file(store, pid, mapping)?;
                self.files.insert(file, key.clone());
                key
            }
        };
        let file_table = &self.tables[&key];
        let table = match &file_table.loaded {
            Ok((id, _, _)) => load_bias(&file_table.segments, mapping)
                .map(|bias| (bias, *id))
                .ok_or_else(|| "the mapping's offset is in no PT_LOAD segment".to_string()),
            Err(reason) => Err(reason.clone()),
        };
        Ok(Coverage {
            key: Some(key),
            table,
        })
    }

    /// Reads and builds the table of a mapping's file; returns its key.
    fn load_file(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
        mapping: &ExecMapping,
    ) -> Result<TableKey, ManagerError> {
        let fallback = TableKey::File(mapping.device.clone(), mapping.inode);
        let elf = match crate::runtime::targets::elf::read_file(&mapping.file_in(pid)) {
            Ok(elf) => elf,
            Err(e) => return Ok(self.failed(fallback, e.to_string(), Vec::new())),
        };
        let Ok(file) = object::File::parse(&*elf) else {
            return Ok(self.failed(fallback, "not an ELF file".into(), Vec::new()));
        };
        let key = match file.build_id() {
            Ok(Some(id)) => TableKey::BuildId(id.to_vec()),
            _ => fallback,
        };
        if self.tables.contains_key(&key) {
            return Ok(key);
        }
        let segments = file
            .segments()
            .filter(|s| is_executable(s.flags()))
            .map(|s| (s.file_range().0, s.address(), s.file_range().1))
            .collect();
        let started = Instant::now();
        let table = UnwindTable::build(&elf);
        self.stats.build_time += started.elapsed();
        let table = match table {
            Ok(table) => table,
            Err(e) => return Ok(self.failed(key, format!("no unwind table: {e}"), segments)),
        };
        let loaded = self.place(store, &table)?;
        self.tables.insert(
            key.clone(),
            FileTable {
                loaded,
                segments,
                users: 0,
            },
        );
        Ok(key)
    }

    fn failed(
        &mut self,
        key: TableKey,
        reason: String,
        segments: Vec<(u64, u64, u64)>,
    ) -> TableKey {
        self.stats.failed_files += 1;
        let table = FileTable {
            loaded: Err(reason),
            segments,
            users: 0,
        };
        self.tables.insert(key.clone(), table);
        key
    }

    /// Puts a table's rows in the map: its id, first row and rows, or why not.
    fn place(
        &mut self,
        store: &mut impl TableStore,
        table: &UnwindTable,
    ) -> Result<Result<(u32, u32, u32), String>, ManagerError> {
        let rows = u32::try_from(table.rows.len()).unwrap_or(u32::MAX);
        if rows == 0 {
            return Ok(Err("its CFI has no rows".into()));
        }
        let no_room = |stats: &mut ManagerStats, reason: String| {
            stats.dropped_tables += 1;
            Ok(Err(reason))
        };
        if rows > MAX_TABLE_ROWS {
            let reason = format!("{rows} rows, more than a table may have ({MAX_TABLE_ROWS})");
            return no_room(&mut self.stats, reason);
        }
        let Some(&id) = self.free_ids.last() else {
            let reason = format!("{} tables are loaded already", self.limits.tables);
            return no_room(&mut self.stats, reason);
        };
        let Some(first) = self.rows.allocate(rows) else {
            let (used, limit) = (self.rows.used(), self.limits.rows);
            let reason = format!("{rows} rows do not fit ({used} of {limit} in use)");
            return no_room(&mut self.stats, reason);
        };
        self.free_ids.pop();
        let store_err = |reason| ManagerError::Store {
            what: "table rows",
            reason,
        };
        store
            .write_rows(first, &table.encoded())
            .map_err(store_err)?;
        store.write_table(id, first, rows).map_err(store_err)?;
        self.stats.tables += 1;
        self.stats.rows += rows;
        Ok(Ok((id, first, rows)))
    }

    fn use_table(&mut self, key: &TableKey, users: usize) {
        if let Some(table) = self.tables.get_mut(key) {
            table.users += users;
        }
    }

    /// Drops one user of a table; the last frees its rows and id.
    fn release(&mut self, store: &mut impl TableStore, key: &TableKey) -> Result<(), ManagerError> {
        let Some(table) = self.tables.get_mut(key) else {
            return Ok(());
        };
        table.users = table.users.saturating_sub(1);
        if table.users > 0 {
            return Ok(());
        }
        let table = self.tables.remove(key).expect("present above");
        self.files.retain(|_, k| k != key);
        if let Ok((id, first, rows)) = table.loaded {
            store
                .write_table(id, 0, 0)
                .map_err(|reason| ManagerError::Store {
                    what: "table slot",
                    reason,
                })?;
            self.rows.release(first, rows);
            self.free_ids.push(id);
            self.stats.tables -= 1;
            self.stats.rows -= rows;
        }
        Ok(())
    }
}

fn is_executable(flags: object::SegmentFlags) -> bool {
    matches!(flags, object::SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X))
}

/// What to subtract from a pc to get the ELF address. The kernel maps an
/// executable segment from its offset rounded down to a page, so the mapping
/// may start before the segment.
fn load_bias(segments: &[(u64, u64, u64)], mapping: &ExecMapping) -> Option<u64> {
    const PAGE: u64 = 4096;
    let &(offset, vaddr, _) = segments.iter().find(|&&(offset, _, size)| {
        offset / PAGE * PAGE <= mapping.offset && mapping.offset < offset + size
    })?;
    let start_vaddr = vaddr.wrapping_add(mapping.offset).wrapping_sub(offset);
    Some(mapping.start.wrapping_sub(start_vaddr))
}

fn write_entry(value: &mut [u8], index: usize, mapping: &ExecMapping, bias: u64, table: u32) {
    let at = pm::ENTRIES as usize + index * pm::ENTRY_BYTES as usize;
    let mut put = |field: i16, bytes: &[u8]| {
        let start = at + field as usize;
        value[start..start + bytes.len()].copy_from_slice(bytes);
    };
    put(pm::START, &mapping.start.to_ne_bytes());
    put(pm::END, &mapping.end.to_ne_bytes());
    put(pm::BIAS, &bias.to_ne_bytes());
    put(pm::TABLE, &table.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps what the manager writes, as the maps would.
    #[derive(Default)]
    struct FakeStore {
        rows: HashMap<u32, [u8; 8]>,
        tables: HashMap<u32, (u32, u32)>,
        processes: HashMap<u32, Vec<u8>>,
    }

    impl TableStore for FakeStore {
        fn write_rows(&mut self, first_row: u32, encoded: &[u8]) -> Result<(), String> {
            for (i, row) in encoded.chunks_exact(8).enumerate() {
                self.rows
                    .insert(first_row + i as u32, row.try_into().expect("8 bytes"));
            }
            Ok(())
        }
        fn write_table(&mut self, id: u32, first_row: u32, rows: u32) -> Result<(), String> {
            self.tables.insert(id, (first_row, rows));
            Ok(())
        }
        fn write_process(&mut self, tgid: u32, value: &[u8]) -> Result<(), String> {
            self.processes.insert(tgid, value.to_vec());
            Ok(())
        }
        fn delete_process(&mut self, tgid: u32) -> Result<(), String> {
            self.processes.remove(&tgid);
            Ok(())
        }
    }

    /// Adding this process loads a table for its executable and libc and
    /// writes sorted mappings; adding it again shares the tables; removing
    /// it frees everything.
    #[test]
    fn adds_shares_and_removes() {
        let pid = std::process::id();
        let mut store = FakeStore::default();
        let mut manager = TableManager::new(UnwindLimits::default());
        let report = manager.add_process(&mut store, pid).expect("add");
        assert!(report.with_table >= 2, "{report:?}");
        let tables = manager.stats().tables;
        let value = &store.processes[&pid];
        let count = u32::from_ne_bytes(value[..4].try_into().unwrap()) as usize;
        assert_eq!(count, report.mappings);
        let starts: Vec<u64> = (0..count)
            .map(|i| {
                let at = pm::ENTRIES as usize + i * pm::ENTRY_BYTES as usize;
                u64::from_ne_bytes(value[at..at + 8].try_into().unwrap())
            })
            .collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:x?}");
        manager.add_process(&mut store, pid).expect("add again");
        assert_eq!(
            manager.stats().tables,
            tables,
            "a re-read loaded tables twice"
        );
        manager.remove_process(&mut store, pid).expect("remove");
        assert_eq!((manager.stats().tables, manager.stats().rows), (0, 0));
        assert!(store.processes.is_empty());
        assert!(store.tables.values().all(|&(_, rows)| rows == 0));
    }

    /// Tables that do not fit the rows map are counted as dropped and their
    /// mappings say why.
    #[test]
    fn counts_tables_that_do_not_fit() {
        let limits = UnwindLimits {
            rows: 64,
            ..UnwindLimits::default()
        };
        let mut manager = TableManager::new(limits);
        let report = manager
            .add_process(&mut FakeStore::default(), std::process::id())
            .expect("add");
        assert!(manager.stats().dropped_tables >= 1, "{:?}", manager.stats());
        assert!(
            report
                .without_table
                .iter()
                .any(|(_, why)| why.contains("do not fit")),
            "{report:?}"
        );
    }

    /// The bias maps the mapping's start to its segment's address, also when
    /// the segment does not start on a page.
    #[test]
    fn computes_load_bias() {
        let mapping = ExecMapping {
            start: 0x7f00_0000_1000,
            end: 0x7f00_0000_5000,
            offset: 0x1000,
            device: "08:01".into(),
            inode: 1,
            path: "/lib/x".into(),
        };
        let segments = [(0, 0, 0x800), (0x1000, 0x1000, 0x4000)];
        assert_eq!(load_bias(&segments, &mapping), Some(0x7f00_0000_0000));
        assert_eq!(load_bias(&segments[..1], &mapping), None);
        // A segment at 0x13ad0 (address 0x14ad0) is mapped from offset 0x13000.
        let rust_like = ExecMapping {
            offset: 0x13000,
            ..mapping
        };
        let segments = [(0x13ad0, 0x14ad0, 0x3e5e0)];
        assert_eq!(
            load_bias(&segments, &rust_like),
            Some(0x7f00_0000_1000 - 0x14000)
        );
    }
}
