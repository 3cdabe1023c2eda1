//! Output stage, live text: turns the messages of built-in statements
//! (`printf`, `print`, `time`, `exit`, `clear`, `zero`, `cat`, `join`...)
//! into bpftrace's text (or `-f json` lines) through each built-in's print
//! hook, and prints the maps at exit. Input: a message's bytes and its
//! layout in `Compiled`, or raw map entries the session read; output: text
//! on a writer. Map operations come back as [`MapOp`]s for the session,
//! which owns the maps; symbols, stacks and names come from a [`System`].

use std::io::{self, Write};

use crate::builtins;
use crate::codegen::program::Compiled;
use crate::frontend::diag::SourceMap;
use crate::output::agg;
use crate::output::helper_error;
use crate::output::json::{self, TextKind};
use crate::output::lookup::System;
use crate::output::maps::{self, MapDump, PrintOptions};
use crate::output::value::{Value, decode};
use crate::vocab::{HelperErrorSite, MapId, Message, ValueType};

/// One raw map entry as the kernel returns it: key, value per CPU.
pub type RawEntry = (Vec<u8>, Vec<Vec<u8>>);

/// How output is written: bpftrace's text, or its JSON lines (`-f json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

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
    pub(super) compiled: &'a Compiled,
    pub(super) system: &'a dyn System,
    format: OutputFormat,
    /// The scripts, which helper error reports point into.
    sources: Option<&'a SourceMap>,
}

impl<'a> Printer<'a> {
    pub fn new(compiled: &'a Compiled, system: &'a dyn System, format: OutputFormat) -> Self {
        Printer {
            compiled,
            system,
            format,
            sources: None,
        }
    }

    /// Helper error reports show where in `sources` the failed call is.
    pub fn with_sources(self, sources: Option<&'a SourceMap>) -> Self {
        Printer { sources, ..self }
    }

    /// A failed helper call (`-k`/`-kk`): bpftrace's warning or JSON line.
    pub fn helper_error(
        &self,
        site: &HelperErrorSite,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let code = bytes
            .get(8..16)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| io::Error::other(format!("helper error of {} bytes", bytes.len())))?;
        let empty = SourceMap::new([]);
        let sources = self.sources.unwrap_or(&empty);
        let line = match self.format {
            OutputFormat::Text => helper_error::text(site, code, sources),
            OutputFormat::Json => helper_error::json(site, code, sources),
        };
        out.write_all(line.as_bytes())
    }

    /// The text of a text action (`printf`, `time`, `cat`...), as is or as
    /// a JSON line of its kind.
    pub fn write_text(&self, kind: TextKind, text: &[u8], out: &mut dyn Write) -> io::Result<()> {
        match self.format {
            OutputFormat::Text if kind.ends_line() => {
                out.write_all(text)?;
                out.write_all(b"\n")
            }
            OutputFormat::Text => out.write_all(text),
            OutputFormat::Json => out.write_all(&json::text_line(kind, text)),
        }
    }

    /// `Attaching N probes...`, or its JSON line.
    pub fn attached_probes(&self, probes: usize, out: &mut dyn Write) -> io::Result<()> {
        match self.format {
            OutputFormat::Text => {
                let plural = if probes == 1 { "" } else { "s" };
                writeln!(out, "Attaching {probes} probe{plural}...")
            }
            OutputFormat::Json => out.write_all(json::attached_probes(probes).as_bytes()),
        }
    }

    /// `Lost N events` when messages could not be sent, or its JSON line.
    pub fn lost_events(&self, events: u64, out: &mut dyn Write) -> io::Result<()> {
        match self.format {
            OutputFormat::Text => writeln!(out, "Lost {events} events"),
            OutputFormat::Json => out.write_all(json::lost_events(events).as_bytes()),
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
            Message::HelperError(site) => {
                self.helper_error(site, bytes, out)?;
                Ok(Printed::Done)
            }
            Message::Record { .. } | Message::Watch { .. } | Message::ThreadSeen => {
                Err(io::Error::other(
                    "capture records, watchpoint requests and thread reports are not printed",
                ))
            }
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
        match self.format {
            OutputFormat::Text => maps::print_value(&mut WriteAdapter(out), value, self),
            OutputFormat::Json => out.write_all(&json::value_line(value, self)),
        }
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
        let text = match self.format {
            OutputFormat::Text => maps::render_map(&spec.name, script, entries, options, self),
            OutputFormat::Json => json::map_line(&spec.name, script, entries, options, self),
        };
        out.write_all(&text)
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
        match self.format {
            OutputFormat::Text => maps::print_exit_maps(&mut WriteAdapter(out), dumps, self),
            OutputFormat::Json => {
                // bpftrace prints the two blank lines in JSON mode too.
                dumps.sort_by(|a, b| a.name.cmp(b.name));
                let mut text = b"\n\n".to_vec();
                for map in dumps {
                    let options = PrintOptions::default();
                    text.extend(json::map_line(
                        map.name,
                        map.spec,
                        map.entries,
                        options,
                        self,
                    ));
                }
                out.write_all(&text)
            }
        }
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
