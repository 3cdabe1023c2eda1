//! The table manager (user space): builds one table per file (by build id)
//! on a worker thread, shares it between every process mapping the file,
//! places it in the rows map within its bound (a table that does not fit is
//! counted and its mappings fall back to frame pointers; one no process
//! maps any more stays placed until its room is needed), and keeps one
//! mappings entry per process, written when the process is added, written
//! again when a table it waits for is placed, and removed when it exits.
//! Every loaded table is also indexed by the device and inode of its files,
//! for a pc the unwinder finds in no known mapping (`super::vma_bpf`).
//! Once the capture stops, tables are held for walking stack copies only,
//! and the builds left are abandoned.
//! Input: pids. Output: writes through a [`TableStore`] (the BPF maps).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use object::{Object, ObjectSegment};

use super::alloc::RowAllocator;
use super::builder::{Builder, Built, Image};
use super::maps::{
    MAX_MAPPINGS, MAX_TABLE_ROWS, NO_TABLE, TABLE_PENDING, UnwindLimits, process_mappings as pm,
};
use super::proc_maps::{
    AddressSpace, ExecMapping, address_space, file_identity, kernel_device, parse_maps, read_maps,
};
use super::snapshot::{CodeLookup, CodeMap};
use super::table::UnwindTable;
use crate::symbols::vdso;

/// Where the manager writes: the unwinder's maps, or a fake in tests.
pub trait TableStore {
    /// Encoded rows from `first_row` on.
    fn write_rows(&mut self, first_row: u32, encoded: &[u8]) -> Result<(), String>;
    /// Table `id` is `rows` rows from `first_row` (0 rows: no table).
    fn write_table(&mut self, id: u32, first_row: u32, rows: u32) -> Result<(), String>;
    /// The mappings value of process `tgid`.
    fn write_process(&mut self, tgid: u32, value: &[u8]) -> Result<(), String>;
    fn delete_process(&mut self, tgid: u32) -> Result<(), String>;
    /// The file with this `dev_t` and inode has table `table`, its ELF
    /// addresses at file offset + `delta`.
    fn write_file(&mut self, dev: u32, ino: u64, table: u32, delta: u64) -> Result<(), String>;
    fn delete_file(&mut self, dev: u32, ino: u64) -> Result<(), String>;
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("cannot read the mappings of process {pid}: {source}")]
    Mappings { pid: u32, source: std::io::Error },
    #[error("cannot write the unwind maps ({what}): {reason}")]
    Store { what: &'static str, reason: String },
}

fn store_error(what: &'static str) -> impl Fn(String) -> ManagerError {
    move |reason| ManagerError::Store { what, reason }
}

/// What the manager holds and what it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerStats {
    /// Tables loaded now, their rows, and the executable bytes they cover.
    pub tables: usize,
    pub rows: u32,
    pub text_bytes: u64,
    /// Most rows loaded at once, and the executable bytes they covered
    /// (tables of exited processes are freed, so `text_bytes` at the end
    /// may be 0).
    pub peak_rows: u32,
    pub peak_text_bytes: u64,
    /// Table builds started, and tables built (each file once).
    pub started: usize,
    pub built: usize,
    /// Tables that did not fit the rows map or the table limit (their
    /// mappings use frame pointers).
    pub dropped_tables: usize,
    /// Files without usable CFI (not ELF, no `.eh_frame`, unreadable).
    pub failed_files: usize,
    /// Executable mappings beyond `MAX_MAPPINGS` in a process.
    pub dropped_mappings: usize,
    /// Time spent building tables.
    pub build_time: Duration,
    /// Builds given up when the capture ended.
    pub abandoned_builds: usize,
}

/// How a process's mappings were covered when it was added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessReport {
    pub mappings: usize,
    /// Mappings with a table.
    pub with_table: usize,
    /// Mappings without one (yet), with the reason.
    pub without_table: Vec<(String, String)>,
}

/// Identity of a file: a build id, or device and inode without one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum TableKey {
    BuildId(Vec<u8>),
    File(String, u64),
}

/// Where a file's table is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TableState {
    /// Table id, first row, rows, and the rows themselves (stack copies
    /// are walked with them in user space, `unwind::snapshot`).
    Loaded(u32, u32, u32, Arc<UnwindTable>),
    /// Built after the capture stopped: held for walking stack copies, not
    /// written to the maps (no program reads them any more).
    Held(Arc<UnwindTable>),
    Building,
    /// Why the file has none.
    Failed(String),
}

/// A file seen (mapped by a process, or prepared), by device and inode.
#[derive(Clone, Debug)]
struct KnownFile {
    key: TableKey,
    /// Its path, as a process mapping it names it.
    path: String,
    /// Whether its table is in the files map.
    indexed: bool,
}

/// A file's table and how many mappings of live processes use it.
struct FileTable {
    state: TableState,
    /// `(file offset, virtual address, size)` of each executable `PT_LOAD` segment.
    segments: Vec<(u64, u64, u64)>,
    text_bytes: u64,
    users: usize,
}

/// A process as last read: its address space and executable mappings, each
/// with its file's table key (none for anonymous code).
struct Process {
    identity: AddressSpace,
    mappings: Vec<(ExecMapping, Option<TableKey>)>,
}

pub struct TableManager {
    rows: RowAllocator,
    limits: UnwindLimits,
    free_ids: Vec<u32>,
    tables: HashMap<TableKey, FileTable>,
    /// By device (as `/proc/PID/maps` names it) and inode.
    files: HashMap<(String, u64), KnownFile>,
    /// Whether a file may be missing from the files map (a file seen, or
    /// a table placed, since the last indexing).
    index_stale: bool,
    processes: HashMap<u32, Process>,
    builder: Builder<TableKey>,
    /// Placed tables no process maps any more, oldest first: they stay
    /// placed until their rows or ids are needed, so that the next process
    /// of the same file (the next compiler of a build, the next run of a
    /// command) finds its table ready instead of building and writing it
    /// again.
    idle: VecDeque<TableKey>,
    /// Whether the capture stopped (see [`TableManager::stop`]).
    stopped: bool,
    stats: ManagerStats,
    /// The stamp of the last mappings entry written (`process_mappings::STAMP`).
    last_stamp: u32,
}

impl TableManager {
    /// A manager that builds tables on a worker thread: a process's
    /// mappings wait for them (frame pointers meanwhile) until
    /// [`TableManager::place_built`] places them.
    pub fn new(limits: UnwindLimits) -> Self {
        Self::with_builder(limits, Builder::worker())
    }

    /// A manager that builds every table as soon as a process needs it.
    pub fn building_in_place(limits: UnwindLimits) -> Self {
        Self::with_builder(limits, Builder::in_place())
    }

    fn with_builder(limits: UnwindLimits, builder: Builder<TableKey>) -> Self {
        TableManager {
            rows: RowAllocator::new(limits.rows),
            limits,
            free_ids: (0..limits.tables).rev().collect(),
            tables: HashMap::new(),
            files: HashMap::new(),
            index_stale: false,
            processes: HashMap::new(),
            builder,
            idle: VecDeque::new(),
            stopped: false,
            stats: ManagerStats::default(),
            last_stamp: 0,
        }
    }

    pub fn stats(&self) -> &ManagerStats {
        &self.stats
    }

    /// Tables being built.
    pub fn building(&self) -> usize {
        self.builder.pending()
    }

    /// The capture stopped: tables built from now on are only held for
    /// walking stack copies ([`TableManager::process_code`]), not written
    /// to the maps.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Gives up the builds still running or queued (the end of the
    /// capture waits for none): their files have no table.
    pub fn abandon_builds(&mut self) {
        self.stats.abandoned_builds += self.builder.abandon();
        for file in self.tables.values_mut() {
            if file.state == TableState::Building {
                file.state = TableState::Failed("abandoned: the capture ended first".into());
            }
        }
    }

    /// Reads the executable mappings of `pid` (again, after an exec or a
    /// `dlopen`), starts building the tables they need and writes its
    /// mappings entry.
    pub fn add_process(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
    ) -> Result<ProcessReport, ManagerError> {
        let maps = read_maps(pid).map_err(|source| ManagerError::Mappings { pid, source })?;
        self.add_process_read(store, pid, &maps)
    }

    /// [`TableManager::add_process`] with `maps`, the text of its
    /// `/proc/PID/maps` just read.
    pub fn add_process_read(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
        maps: &str,
    ) -> Result<ProcessReport, ManagerError> {
        let mappings = parse_maps(maps);
        let identity =
            address_space(pid).map_err(|source| ManagerError::Mappings { pid, source })?;
        let kept = mappings.len().min(MAX_MAPPINGS as usize);
        self.stats.dropped_mappings += mappings.len() - kept;
        let mut process = Process {
            identity,
            mappings: Vec::with_capacity(kept),
        };
        for mapping in mappings.into_iter().take(kept) {
            let key = self.key_of(pid, &mapping);
            if let Some(key) = &key {
                self.use_table(key);
            }
            process.mappings.push((mapping, key));
        }
        let old = self.processes.insert(pid, process);
        self.place_built(store, Duration::ZERO)?;
        self.write_process(store, pid)?;
        self.index_files(store);
        for key in old
            .into_iter()
            .flat_map(|p| p.mappings)
            .filter_map(|(_, k)| k)
        {
            self.release(store, &key)?;
        }
        Ok(self.report(pid))
    }

    /// Starts building the table of the file at `path` before any process
    /// maps it (a program about to run, and its libraries), so that the
    /// process finds it ready. The table stays loaded for the manager's
    /// life. Only files with a build id (the key a mapping finds it by).
    pub fn prepare_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        let map = map_file(path).map_err(|e| format!("cannot read it: {e}"))?;
        let build_id = (elf_identity(&map))
            .ok_or("not an ELF file")?
            .0
            .ok_or("no build id")?;
        let fallback = TableKey::BuildId(build_id);
        let key = self.key_of_image(Image::Mapped(map), fallback);
        self.use_table(&key);
        // Found by device and inode when a process maps it before its
        // mappings are read with it (the loader maps the libraries after
        // the command's first read).
        if let Ok(file) = file_identity(path) {
            let path = path.to_string_lossy().into_owned();
            self.know_file(file, key, path);
        }
        Ok(())
    }

    /// The path of the file with this device (as `/proc/PID/maps` names
    /// it) and inode, when a process mapped it or it was prepared.
    pub fn file_path(&self, device: &str, inode: u64) -> Option<&str> {
        (self.files.get(&(device.to_string(), inode))).map(|file| file.path.as_str())
    }

    /// Forgets process `pid`: its entry goes, and tables no other process
    /// maps are freed.
    pub fn remove_process(
        &mut self,
        store: &mut impl TableStore,
        pid: u32,
    ) -> Result<(), ManagerError> {
        let Some(process) = self.processes.remove(&pid) else {
            return Ok(());
        };
        store
            .delete_process(pid)
            .map_err(store_error("process mappings"))?;
        for key in process.mappings.into_iter().filter_map(|(_, k)| k) {
            self.release(store, &key)?;
        }
        Ok(())
    }

    /// Places the tables built since the last call (waiting up to `wait`
    /// for those still building; `Duration::MAX`: every table started) and
    /// writes the entries of the processes that map them. Returns how many
    /// were placed.
    pub fn place_built(
        &mut self,
        store: &mut impl TableStore,
        wait: Duration,
    ) -> Result<usize, ManagerError> {
        let built = self.builder.finished(wait);
        let count = built.len();
        for Built { key, table, time } in built {
            self.stats.build_time += time;
            self.stats.built += 1;
            let Some(text_bytes) = self.tables.get(&key).map(|f| f.text_bytes) else {
                continue; // No process maps it any more.
            };
            let state = match table {
                Ok(table) => {
                    self.stats.failed_files += usize::from(table.rows.is_empty());
                    if self.stopped && !table.rows.is_empty() {
                        TableState::Held(Arc::new(table))
                    } else {
                        self.place(store, table)?
                    }
                }
                Err(reason) => {
                    self.stats.failed_files += 1;
                    TableState::Failed(reason)
                }
            };
            if let TableState::Loaded(..) = state {
                self.index_stale = true;
                self.stats.text_bytes += text_bytes;
                if self.stats.rows == self.stats.peak_rows {
                    self.stats.peak_text_bytes = self.stats.text_bytes;
                }
            }
            self.tables.get_mut(&key).expect("present above").state = state;
            if self.stopped {
                continue;
            }
            let users: Vec<u32> = (self.processes.iter())
                .filter(|(_, p)| p.mappings.iter().any(|(_, k)| k.as_ref() == Some(&key)))
                .map(|(&pid, _)| pid)
                .collect();
            for pid in users {
                self.write_process(store, pid)?;
            }
        }
        self.index_files(store);
        Ok(count)
    }

    /// Writes the files map entries of the files seen whose tables are
    /// loaded and not indexed yet. A file whose executable segments do not
    /// share one address-to-offset difference is left out (the unwinder
    /// maps a pc to its ELF address with one), as are writes that fail
    /// (a full map): such a file's code mapped since a read is walked as
    /// before, with frame pointers.
    fn index_files(&mut self, store: &mut impl TableStore) {
        if !std::mem::take(&mut self.index_stale) {
            return;
        }
        for ((device, inode), file) in self.files.iter_mut().filter(|(_, f)| !f.indexed) {
            let Some(table) = self.tables.get(&file.key) else {
                continue;
            };
            let TableState::Loaded(id, ..) = table.state else {
                continue;
            };
            file.indexed = true;
            let (Some(dev), Some(delta)) = (kernel_device(device), segment_delta(&table.segments))
            else {
                continue;
            };
            let _ = store.write_file(dev, *inode, id, delta);
        }
    }

    /// Remembers a file seen by device and inode; the first path seen names it.
    fn know_file(&mut self, file: (String, u64), key: TableKey, path: String) {
        self.files.entry(file).or_insert_with(|| {
            self.index_stale = true;
            KnownFile {
                key,
                path,
                indexed: false,
            }
        });
    }

    /// The code of process `pid` as last read, for walking its stack
    /// copies; `None` when it was not read.
    pub fn process_code(&self, pid: u32) -> Option<ProcessCode<'_>> {
        let process = self.processes.get(&pid)?;
        Some(ProcessCode {
            manager: self,
            process,
        })
    }

    /// How `pid`'s mappings are covered now.
    fn report(&self, pid: u32) -> ProcessReport {
        let mut report = ProcessReport::default();
        for (mapping, key) in self.processes.get(&pid).map_or(&[][..], |p| &p.mappings) {
            report.mappings += 1;
            match self.table_of(mapping, key.as_ref()) {
                Ok(_) => report.with_table += 1,
                Err(why) => report.without_table.push((mapping.path.clone(), why)),
            }
        }
        report
    }

    /// Writes the mappings entry of `pid` as its tables are now, with a
    /// new stamp.
    fn write_process(&mut self, store: &mut impl TableStore, pid: u32) -> Result<(), ManagerError> {
        self.last_stamp = self.last_stamp.checked_add(1).unwrap_or(1);
        let Some(process) = self.processes.get(&pid) else {
            return Ok(());
        };
        let mut value = vec![0u8; pm::BYTES as usize];
        value[pm::STAMP as usize..][..4].copy_from_slice(&self.last_stamp.to_ne_bytes());
        put_u64(&mut value, pm::START_STACK, process.identity.start_stack);
        put_u64(&mut value, pm::END_CODE, process.identity.end_code);
        value[..4].copy_from_slice(&(process.mappings.len() as u32).to_ne_bytes());
        for (index, (mapping, key)) in process.mappings.iter().enumerate() {
            let building = (key.as_ref().and_then(|k| self.tables.get(k)))
                .is_some_and(|file| file.state == TableState::Building);
            let none = if building { TABLE_PENDING } else { NO_TABLE };
            let (bias, table) = self.table_of(mapping, key.as_ref()).unwrap_or((0, none));
            write_entry(&mut value, index, mapping, bias, table);
        }
        store
            .write_process(pid, &value)
            .map_err(store_error("process mappings"))
    }

    /// The load bias and table id of a mapping, or why it has none.
    fn table_of(
        &self,
        mapping: &ExecMapping,
        key: Option<&TableKey>,
    ) -> Result<(u64, u32), String> {
        let key = key.ok_or("anonymous memory (JIT or generated code): no unwind table")?;
        let file = self.tables.get(key).ok_or("its table was freed")?;
        match &file.state {
            TableState::Loaded(id, ..) => load_bias(&file.segments, mapping)
                .map(|bias| (bias, *id))
                .ok_or_else(|| "the mapping's offset is in no PT_LOAD segment".to_string()),
            TableState::Held(_) => Err("its table was built after the capture stopped".into()),
            TableState::Building => Err("its table is being built".into()),
            TableState::Failed(reason) => Err(reason.clone()),
        }
    }

    /// The table key of a mapping's file, starting its build on first
    /// sight; `None` for anonymous code. A file without a usable table is
    /// remembered too, so it is not read again while a process maps it.
    fn key_of(&mut self, pid: u32, mapping: &ExecMapping) -> Option<TableKey> {
        if mapping.path == vdso::MODULE {
            let fallback = TableKey::File(vdso::MODULE.into(), 0);
            return Some(match vdso::image() {
                Some(image) => self.key_of_image(Image::Bytes(image), fallback),
                None => self.failed(fallback, "this process has no vDSO".into()),
            });
        }
        if !mapping.is_file() {
            return None;
        }
        let file = (mapping.device.clone(), mapping.inode);
        if let Some(known) = self.files.get(&file) {
            return Some(known.key.clone());
        }
        let fallback = TableKey::File(mapping.device.clone(), mapping.inode);
        let key = match map_file(&mapping.file_in(pid)) {
            Ok(map) => self.key_of_image(Image::Mapped(map), fallback),
            // Not remembered: the process may have gone between reading its
            // mappings and its file; the next process mapping it tries again.
            Err(e) => return Some(self.failed(fallback, format!("cannot read it: {e}"))),
        };
        self.know_file(file, key.clone(), mapping.path.clone());
        Some(key)
    }

    /// The key of an ELF image (its build id, or `fallback`), starting the
    /// build of its table unless it is known.
    fn key_of_image(&mut self, image: Image, fallback: TableKey) -> TableKey {
        let Some((build_id, segments)) = elf_identity(image.bytes()) else {
            return self.failed(fallback, "not an ELF file".into());
        };
        let key = build_id.map_or(fallback, TableKey::BuildId);
        if self.tables.contains_key(&key) {
            return key;
        }
        let text_bytes = segments.iter().map(|&(_, _, size)| size).sum();
        self.tables.insert(
            key.clone(),
            FileTable {
                state: TableState::Building,
                segments,
                text_bytes,
                users: 0,
            },
        );
        self.builder.start(key.clone(), image);
        self.stats.started += 1;
        key
    }

    fn failed(&mut self, key: TableKey, reason: String) -> TableKey {
        self.stats.failed_files += 1;
        let table = FileTable {
            state: TableState::Failed(reason),
            segments: Vec::new(),
            text_bytes: 0,
            users: 0,
        };
        self.tables.entry(key.clone()).or_insert(table);
        key
    }

    /// Puts a table's rows in the map: loaded, or why not.
    fn place(
        &mut self,
        store: &mut impl TableStore,
        table: UnwindTable,
    ) -> Result<TableState, ManagerError> {
        let rows = u32::try_from(table.rows.len()).unwrap_or(u32::MAX);
        if rows == 0 {
            return Ok(TableState::Failed("its CFI has no rows".into()));
        }
        let no_room = |stats: &mut ManagerStats, reason: String| {
            stats.dropped_tables += 1;
            Ok(TableState::Failed(reason))
        };
        if rows > MAX_TABLE_ROWS {
            let reason = format!("{rows} rows, more than a table may have ({MAX_TABLE_ROWS})");
            return no_room(&mut self.stats, reason);
        }
        while self.free_ids.is_empty() {
            if !self.evict_idle(store)? {
                let reason = format!("{} tables are loaded already", self.limits.tables);
                return no_room(&mut self.stats, reason);
            }
        }
        let first = loop {
            if let Some(first) = self.rows.allocate(rows) {
                break first;
            }
            if !self.evict_idle(store)? {
                let (used, limit) = (self.rows.used(), self.limits.rows);
                let reason = format!("{rows} rows do not fit ({used} of {limit} in use)");
                return no_room(&mut self.stats, reason);
            }
        };
        let id = self.free_ids.pop().expect("an id is free (above)");
        store
            .write_rows(first, &table.encoded())
            .map_err(store_error("table rows"))?;
        store
            .write_table(id, first, rows)
            .map_err(store_error("table rows"))?;
        self.stats.tables += 1;
        self.stats.rows += rows;
        self.stats.peak_rows = self.stats.peak_rows.max(self.stats.rows);
        Ok(TableState::Loaded(id, first, rows, Arc::new(table)))
    }

    fn use_table(&mut self, key: &TableKey) {
        if let Some(table) = self.tables.get_mut(key) {
            if table.users == 0 {
                self.idle.retain(|idle| idle != key);
            }
            table.users += 1;
        }
    }

    /// Drops one user of a table; after the last, a placed table stays
    /// placed, idle (until its room is needed), and any other is freed.
    fn release(&mut self, store: &mut impl TableStore, key: &TableKey) -> Result<(), ManagerError> {
        let Some(table) = self.tables.get_mut(key) else {
            return Ok(());
        };
        table.users = table.users.saturating_sub(1);
        if table.users > 0 {
            return Ok(());
        }
        if matches!(table.state, TableState::Loaded(..)) {
            self.idle.push_back(key.clone());
            return Ok(());
        }
        self.free(store, key)
    }

    /// Frees the oldest idle table; false when none is idle.
    fn evict_idle(&mut self, store: &mut impl TableStore) -> Result<bool, ManagerError> {
        let Some(key) = self.idle.pop_front() else {
            return Ok(false);
        };
        self.free(store, &key)?;
        Ok(true)
    }

    /// Forgets a table no process maps, freeing its rows and id, and its
    /// files' entries in the unwinder's file index.
    fn free(&mut self, store: &mut impl TableStore, key: &TableKey) -> Result<(), ManagerError> {
        let Some(table) = self.tables.remove(key) else {
            return Ok(());
        };
        for ((device, inode), _) in (self.files.iter()).filter(|(_, f)| &f.key == key && f.indexed)
        {
            if let Some(dev) = kernel_device(device) {
                store
                    .delete_file(dev, *inode)
                    .map_err(store_error("file index"))?;
            }
        }
        self.files.retain(|_, f| &f.key != key);
        if let TableState::Loaded(id, first, rows, _) = table.state {
            store
                .write_table(id, 0, 0)
                .map_err(store_error("table slot"))?;
            self.rows.release(first, rows);
            self.free_ids.push(id);
            self.stats.tables -= 1;
            self.stats.rows -= rows;
            self.stats.text_bytes -= table.text_bytes;
        }
        Ok(())
    }
}

/// A process's code as the manager holds it ([`TableManager::process_code`]).
pub struct ProcessCode<'a> {
    manager: &'a TableManager,
    process: &'a Process,
}

impl ProcessCode<'_> {
    /// The address space the mappings were read from.
    pub fn identity(&self) -> AddressSpace {
        self.process.identity
    }
}

impl CodeMap for ProcessCode<'_> {
    fn lookup(&self, pc: u64) -> CodeLookup {
        let mappings = &self.process.mappings;
        let at = mappings.partition_point(|(m, _)| m.start <= pc);
        let Some((mapping, key)) = at.checked_sub(1).map(|i| &mappings[i]) else {
            return CodeLookup::Unmapped;
        };
        if pc >= mapping.end {
            return CodeLookup::Unmapped;
        }
        let Some(file) = key.as_ref().and_then(|k| self.manager.tables.get(k)) else {
            return CodeLookup::NoTable;
        };
        match &file.state {
            TableState::Loaded(.., table) | TableState::Held(table) => {
                match load_bias(&file.segments, mapping) {
                    Some(bias) => CodeLookup::Rule(table.lookup(pc.wrapping_sub(bias))),
                    None => CodeLookup::NoTable,
                }
            }
            TableState::Building => CodeLookup::Building,
            TableState::Failed(_) => CodeLookup::NoTable,
        }
    }
}

/// A file mapped read-only: building its table reads only the pages its
/// headers and CFI are on.
pub(crate) fn map_file(path: &std::path::Path) -> std::io::Result<memmap2::Mmap> {
    // Opened without blocking: a FIFO or device is refused, never waited on.
    let (file, _) = crate::capture::files::open_regular(path)?.map_err(std::io::Error::other)?;
    // SAFETY: the map is only read. A file truncated while mapped makes
    // reads past its end fault (SIGBUS); binaries and libraries in use are
    // replaced by renaming, not rewritten in place, so a mapped executable
    // does not shrink.
    unsafe { memmap2::Mmap::map(&file) }
}

/// An ELF image's build id and its executable `PT_LOAD` segments as
/// `(file offset, virtual address, size)`; `None` when it is not ELF.
#[allow(clippy::type_complexity)]
fn elf_identity(image: &[u8]) -> Option<(Option<Vec<u8>>, Vec<(u64, u64, u64)>)> {
    let file = object::File::parse(image).ok()?;
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    let segments = file
        .segments()
        .filter(|s| is_executable(s.flags()))
        .map(|s| (s.file_range().0, s.address(), s.file_range().1))
        .collect();
    Some((build_id, segments))
}

fn is_executable(flags: object::SegmentFlags) -> bool {
    matches!(flags, object::SegmentFlags::Elf { p_flags, .. } if p_flags.contains(object::elf::PF_X))
}

/// The ELF address minus the file offset of a file's executable segments,
/// when they all share it (nearly every file has one such segment).
fn segment_delta(segments: &[(u64, u64, u64)]) -> Option<u64> {
    let mut deltas = segments
        .iter()
        .map(|&(offset, vaddr, _)| vaddr.wrapping_sub(offset));
    let first = deltas.next()?;
    deltas.all(|d| d == first).then_some(first)
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

fn put_u64(value: &mut [u8], at: i16, v: u64) {
    value[at as usize..at as usize + 8].copy_from_slice(&v.to_ne_bytes());
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
    use crate::unwind::proc_maps::exec_mappings;

    /// Keeps what the manager writes, as the maps would.
    #[derive(Default)]
    struct FakeStore {
        rows: HashMap<u32, [u8; 8]>,
        tables: HashMap<u32, (u32, u32)>,
        processes: HashMap<u32, Vec<u8>>,
        files: HashMap<(u32, u64), (u32, u64)>,
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
        fn write_file(&mut self, dev: u32, ino: u64, table: u32, delta: u64) -> Result<(), String> {
            self.files.insert((dev, ino), (table, delta));
            Ok(())
        }
        fn delete_file(&mut self, dev: u32, ino: u64) -> Result<(), String> {
            self.files.remove(&(dev, ino));
            Ok(())
        }
    }

    /// Adding this process loads a table for its executable and libc and
    /// writes sorted mappings; adding it again shares the tables; removing
    /// it leaves them placed but idle (a later process of the same files
    /// finds them without a build), freed when their room is needed.
    #[test]
    fn adds_shares_and_removes() {
        let pid = std::process::id();
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(UnwindLimits::default());
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
        let (rows, built) = (manager.stats().rows, manager.stats().built);
        manager.remove_process(&mut store, pid).expect("remove");
        assert!(store.processes.is_empty());
        assert_eq!(
            (manager.stats().tables, manager.stats().rows),
            (tables, rows)
        );
        assert_eq!(manager.idle.len(), tables, "every table idle");
        manager
            .add_process(&mut store, pid)
            .expect("add after the remove");
        assert_eq!(
            manager.stats().built,
            built,
            "an idle table was built again"
        );
        assert!(manager.idle.is_empty());
        manager
            .remove_process(&mut store, pid)
            .expect("remove again");
        while manager.evict_idle(&mut store).expect("evict") {}
        let stats = manager.stats();
        assert_eq!((stats.tables, stats.rows, stats.text_bytes), (0, 0, 0));
        assert_eq!(stats.peak_rows, rows);
        assert!(store.tables.values().all(|&(_, rows)| rows == 0));
    }

    /// An idle table gives its room to a table that needs it: with room
    /// for one table, `/bin/sh` is placed after this process's tables went
    /// idle, none dropped.
    #[test]
    fn idle_tables_give_way() {
        let limits = UnwindLimits {
            tables: 1,
            ..UnwindLimits::default()
        };
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(limits);
        let pid = std::process::id();
        manager.add_process(&mut store, pid).expect("add");
        assert_eq!(manager.stats().tables, 1);
        manager.remove_process(&mut store, pid).expect("remove");
        let dropped = manager.stats().dropped_tables;
        manager
            .prepare_file(std::path::Path::new("/bin/sh"))
            .expect("prepare sh");
        manager
            .place_built(&mut store, Duration::ZERO)
            .expect("place");
        assert_eq!(
            manager.stats().dropped_tables,
            dropped,
            "{:?}",
            manager.stats()
        );
        assert_eq!((manager.stats().tables, manager.idle.len()), (1, 0));
    }

    /// A file prepared before any process maps it is placed at once, found
    /// ready by the process that maps it, and stays loaded after that
    /// process goes; a file that is not ELF is refused.
    #[test]
    fn prepared_file_is_ready_for_its_process() {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let libc = (maps.lines())
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.contains("/libc.so"))
            .expect("this test binary maps libc");
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(UnwindLimits::default());
        manager
            .prepare_file(std::path::Path::new(libc))
            .expect("prepare libc");
        let placed = manager.place_built(&mut store, Duration::ZERO);
        assert_eq!(placed.expect("place"), 1);
        assert_eq!(manager.stats().tables, 1);
        let pid = std::process::id();
        let report = manager.add_process(&mut store, pid).expect("add");
        let missing: Vec<_> = (report.without_table.iter())
            .filter(|(path, _)| path == libc)
            .collect();
        assert!(missing.is_empty(), "{missing:?}");
        manager.remove_process(&mut store, pid).expect("remove");
        while manager.evict_idle(&mut store).expect("evict") {}
        assert_eq!(manager.stats().tables, 1, "the prepared table was freed");
        let not_elf = manager.prepare_file(std::path::Path::new("/proc/self/status"));
        assert!(not_elf.is_err());
    }

    /// Every loaded table is indexed by its file's device and inode, with
    /// the offset-to-address difference that gives a pc's ELF address from
    /// a memory area's start and offset as the process entry's bias does;
    /// a prepared file is indexed as its path's file and named by it; the
    /// index goes with the table (idle ones keep it until freed).
    #[test]
    fn indexes_tables_by_file() {
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(UnwindLimits::default());
        let pid = std::process::id();
        manager.add_process(&mut store, pid).expect("add");
        let mappings = exec_mappings(pid).expect("own maps");
        let libc = (mappings.iter())
            .find(|m| m.path.contains("/libc.so"))
            .expect("this test binary maps libc");
        let dev = kernel_device(&libc.device).expect("device");
        let &(table, delta) = store.files.get(&(dev, libc.inode)).expect("libc indexed");
        let key = manager.files[&(libc.device.clone(), libc.inode)]
            .key
            .clone();
        let file = &manager.tables[&key];
        assert!(matches!(file.state, TableState::Loaded(id, ..) if id == table));
        let bias = load_bias(&file.segments, libc).expect("bias");
        assert_eq!(libc.start - libc.offset - delta, bias);
        assert_eq!(
            manager.file_path(&libc.device, libc.inode),
            Some(&*libc.path)
        );
        manager.remove_process(&mut store, pid).expect("remove");
        // An idle table stays placed, and so does its file's entry, until
        // its room is needed.
        assert!(store.files.contains_key(&(dev, libc.inode)));
        while manager.evict_idle(&mut store).expect("evict") {}
        assert!(store.files.is_empty(), "{:?}", store.files);

        let path = std::path::Path::new(&libc.path);
        manager.prepare_file(path).expect("prepare libc");
        manager
            .place_built(&mut store, Duration::ZERO)
            .expect("place");
        let (device, inode) = file_identity(path).expect("stat");
        assert_eq!((&device, inode), (&libc.device, libc.inode));
        assert!(store.files.contains_key(&(dev, inode)));
        assert_eq!(manager.file_path(&device, inode), Some(&*libc.path));
    }

    /// A file's executable segments give one difference, or none to use.
    #[test]
    fn segment_delta_is_shared_or_none() {
        assert_eq!(segment_delta(&[(0x1000, 0x2000, 10)]), Some(0x1000));
        let two = [(0x1000, 0x2000, 10), (0x5000, 0x6000, 10)];
        assert_eq!(segment_delta(&two), Some(0x1000));
        assert_eq!(
            segment_delta(&[(0x1000, 0x2000, 10), (0x5000, 0x5000, 10)]),
            None
        );
        assert_eq!(segment_delta(&[]), None);
    }

    /// After the stop, tables are held for walking copies, not written to
    /// the maps: a pc of this process finds its rule, and no row is written.
    #[test]
    fn holds_tables_built_after_the_stop() {
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(UnwindLimits::default());
        manager.stop();
        let pid = std::process::id();
        manager.add_process(&mut store, pid).expect("add");
        assert!(store.rows.is_empty() && store.tables.is_empty());
        let code = manager.process_code(pid).expect("read");
        let pc = holds_tables_built_after_the_stop as *const () as usize as u64;
        assert!(matches!(code.lookup(pc), CodeLookup::Rule(_)));
    }

    /// Abandoned builds are counted, and their files then have no table
    /// (a copy waiting on one is walked with frame pointers, not held).
    #[test]
    fn abandons_the_builds_left() {
        let mut store = FakeStore::default();
        let mut manager = TableManager::new(UnwindLimits::default());
        let pid = std::process::id();
        manager.add_process(&mut store, pid).expect("add");
        let building = manager.building();
        assert!(building >= 2, "{building}");
        manager.abandon_builds();
        assert_eq!(manager.stats().abandoned_builds, building);
        assert_eq!(manager.building(), 0);
        let code = manager.process_code(pid).expect("read");
        let pc = abandons_the_builds_left as *const () as usize as u64;
        assert!(matches!(code.lookup(pc), CodeLookup::NoTable));
    }

    /// Tables that do not fit the rows map are counted as dropped and their
    /// mappings say why.
    #[test]
    fn counts_tables_that_do_not_fit() {
        let limits = UnwindLimits {
            rows: 64,
            ..UnwindLimits::default()
        };
        let mut manager = TableManager::building_in_place(limits);
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

    /// The vDSO mapping gets a table from this process's copy of the image.
    #[test]
    fn loads_the_vdso_table() {
        let mut store = FakeStore::default();
        let mut manager = TableManager::building_in_place(UnwindLimits::default());
        let report = manager
            .add_process(&mut store, std::process::id())
            .expect("add");
        assert!(
            !report
                .without_table
                .iter()
                .any(|(path, _)| path == vdso::MODULE),
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
