//! Fuzz target: script text → parse, check, compile (the `--dump-bpf` path,
//! on the fake machine: no kernel, no files) → listings, or diagnostics
//! rendered as wprof prints them. Any panic, hang or runaway allocation is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wprof::capture::model::RecordOrigin;
use wprof::codegen::listing::render_listing;
use wprof::driver::{self, Source};
use wprof::frontend::fake_machine::FakeMachine;
use wprof::frontend::options::CompileOptions;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let sources = [Source {
        name: "fuzz.bt".into(),
        text: text.into(),
        origin: RecordOrigin::Script,
    }];
    let params = ["42".to_string(), "text".to_string()];
    match driver::compile(&sources, &params, &FakeMachine, &CompileOptions::default()) {
        Ok((_, compiled)) => {
            let map = driver::source_map(&sources);
            for program in &compiled.programs {
                std::hint::black_box(render_listing(program, &map));
            }
        }
        Err(errors) => {
            std::hint::black_box(errors.render());
        }
    }
});
