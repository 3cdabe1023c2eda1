//! Output stage, live text: turns the messages of built-in statements
//! (`printf`, `print`, `time`, `exit`, `clear`, `zero`) into bpftrace's
//! text through each built-in's print hook, and prints the maps at exit. Input: a message's bytes and its layout in `Compiled`,
//! or raw map entries the session read; output: text on a writer. Map
//! operations come back as [`MapOp`]s for the session, which owns the maps.

use std::io::{self, Write};

use crate::builtins;
use crate::codegen::program::Compiled;
use crate::output::agg;
use crate::output::maps::{self, MapDump, PrintOptions};
use crate::output::value::{Resolve, Value, decode};
use crate::vocab::{MapId, Message, ValueType};

/// One raw map entry as the kernel returns it: key, value per CPU.
pub type RawEntry = (Vec<u8>, Vec<Vec<u8>>);

/// Names a kernel address (`ksym()`).
pub type KernelSymbolNamer<'a> = Box<dyn Fn(u64) -> Vec<u8> + 'a>;

/// What a message asks of the session once printed.
#[derive(Clone, Debug, PartialEq)]
pub enum Printed {
    Done,
    /// `exit()`: end the session.
    Exit,
    /// An operation on a map, which only the session can reach.
    Map(MapOp),
    /// `unwatch(addr)`: remove every watchpoint on this address.
    Unwatch(u64),
}

/// A map operation a message asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MapOp {
    /// `print(@m, top, div)`: read the map and print it.
    Print {
        map: MapId,
        options: PrintOptions,
    },
    Clear(MapId),
    Zero(MapId),
}

/// Prints the messages and maps of one compiled program.
pub struct Printer<'a> {
    compiled: &'a Compiled,
    kernel_symbol: KernelSymbolNamer<'a>,
}

impl<'a> Printer<'a> {
    pub fn new(compiled: &'a Compiled, kernel_symbol: KernelSymbolNamer<'a>) -> Self {
        Printer {
            compiled,
            kernel_symbol,
        }
    }

    /// Prints message `index` (not a capture record) from its bytes.
    pub fn print(&self, index: usize, bytes: &[u8], out: &mut dyn Write) -> io::Result<Printed> {
        let Some(message) = self.compiled.messages.get(index) else {
            return Err(io::Error::other(format!("no message #{index}")));
        };
        match message {
            Message::Builtin(message) => {
                builtins::statement_hooks(message.builtin).print(self, message, bytes, out)
            }
            Message::Record { .. } | Message::Watch { .. } => Err(io::Error::other(
                "capture records and watchpoint requests are not printed",
            )),
        }
    }

    /// The values of a message's fields, decoded from its bytes.
    pub fn decode(&self, bytes: &[u8], fields: &[(u32, ValueType)]) -> io::Result<Vec<Value>> {
        fields
            .iter()
            .map(|(at, ty)| {
                let field = bytes.get(*at as usize..).unwrap_or_default();
                decode(field, ty).map_err(io::Error::other)
            })
            .collect()
    }

    /// `print(value)`.
    pub fn print_value(&self, value: &Value, out: &mut dyn Write) -> io::Result<()> {
        maps::print_value(&mut WriteAdapter(out), value, self)
    }

    /// `print(@m, top, div)` of a script map's raw entries.
    pub fn print_map(
        &self,
        map: MapId,
        raw: &[RawEntry],
        options: PrintOptions,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let spec = &self.compiled.maps[map.0 as usize];
        let script = spec
            .script_map
            .as_ref()
            .ok_or_else(|| io::Error::other(format!("{} is not a script map", spec.name)))?;
        let entries = agg::collect_entries(script, raw).map_err(io::Error::other)?;
        let options = PrintOptions {
            div: options.div.max(1),
            ..options
        };
        maps::print_map(
            &mut WriteAdapter(out),
            &spec.name,
            script,
            entries,
            options,
            self,
        )
    }

    /// The maps printed at exit, from the raw entries of each script map;
    /// a map that does not decode is named on stderr and left out.
    pub fn print_exit_maps(
        &self,
        raw: &[(MapId, Vec<RawEntry>)],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let mut dumps = Vec::new();
        for (map, entries) in raw {
            let spec = &self.compiled.maps[map.0 as usize];
            let Some(script) = &spec.script_map else {
                continue;
            };
            match agg::collect_entries(script, entries) {
                // bpftrace prints empty maps too, as a blank line.
                Ok(entries) => dumps.push(MapDump {
                    name: &spec.name,
                    spec: script,
                    entries,
                }),
                Err(error) => eprintln!("wprof: cannot decode {}: {error}", spec.name),
            }
        }
        maps::print_exit_maps(&mut WriteAdapter(out), dumps, self)
    }
}

impl Resolve for Printer<'_> {
    fn symbol(&self, kernel: bool, addr: u64) -> Vec<u8> {
        if kernel {
            (self.kernel_symbol)(addr)
        } else {
            format!("{addr:#x}").into_bytes()
        }
    }
    fn probe(&self, index: u64) -> Vec<u8> {
        self.compiled
            .probe_names
            .get(index as usize)
            .map_or_else(|| format!("probe#{index}"), Clone::clone)
            .into_bytes()
    }
}

/// `&mut dyn Write` as a sized `Write` for functions generic over it.
struct WriteAdapter<'a>(&'a mut dyn Write);

impl Write for WriteAdapter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
