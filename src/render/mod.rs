//! Renderers: a capture → Perfetto trace, NDJSON, summary. Each sees only a
//! `CaptureReader` and the replay options, so live and replay output agree.

pub mod filter;
pub mod ndjson;
pub mod perfetto;
pub mod source;
pub mod summary;
#[cfg(test)]
pub mod system_fixture;
pub mod tracker;
