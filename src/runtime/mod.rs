//! Runtime: find what probes attach to on this machine ([`targets`]), load
//! and attach compiled programs and read their maps ([`bpf`]), run a tracing
//! session that turns their messages into output ([`session`]), and record
//! capture events ([`recording`]); [`values`] names what scripts print.

pub mod bpf;
pub mod privileges;
pub mod recording;
pub mod session;
pub mod targets;
pub mod values;
