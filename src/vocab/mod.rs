//! The vocabulary every stage shares, owned by none of them: where programs
//! attach and what their context holds, the machine the checker asks about,
//! kernel types, map and value layouts, ring buffer messages, the globals
//! map, `printf` formats and histogram buckets. The front end produces these
//! descriptions, codegen lays them out, the runtime and output read them.

mod attach;
mod context;
mod globals;
pub mod hist;
pub mod kernel_types;
mod layout;
mod machine;
mod maps;
mod messages;
pub mod perf_events;
pub mod printf_format;
pub mod x86_64;

pub use attach::{
    AttachPoint, IterTarget, KernelFeature, PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PerfEvent,
    PerfSample, WatchMode, WatchTarget,
};
pub use context::{ArgRead, BtfArg, Context, FieldKind, TracepointField, UsdtArgSpec, UsdtIndex};
pub use globals::{GLOBAL_SLOTS, GlobalSlot, ProbeState};
pub use layout::{StackMode, StackType, StructField, ValueType};
pub use machine::{
    BtfFunction, Environment, FunctionParam, FunctionTarget, KernelFunction, KernelFunctionMatches,
    MissingFunction, ObjectSymbol, PassedIn, UsdtTarget,
};
pub use maps::{AggFunc, MapId, MapKind, MapSpec, MapValue, ScriptMap, TASK_WORK_BYTES};
pub use messages::{
    BUILD_ID_FRAME_BYTES, BuiltinId, BuiltinMessage, HelperErrorSite, Message, MessageId,
    record_header,
};
