//! What a probe's program finds in its context argument: registers, a
//! tracepoint record, u64 argument slots, BTF-typed arguments, USDT argument
//! locations. Providers describe it, the checker types `argN` and
//! `args.FIELD` from it, codegen reads it.

use super::kernel_types::KTypeId;

/// How the probe's context argument is read.
#[derive(Clone, Debug, PartialEq)]
pub enum Context {
    /// BEGIN, END, profile, interval, software: no arguments.
    Plain,
    /// uprobe/kprobe: `struct pt_regs`.
    PtRegs,
    /// USDT: arguments decoded from the note's argument specs.
    Usdt(Vec<UsdtArgSpec>),
    /// Classic tracepoint: fields at fixed offsets in the record.
    Tracepoint(Vec<TracepointField>),
    /// Raw tracepoint and fentry: an array of u64 arguments.
    U64Array,
    /// `tp_btf`: u64 argument slots typed from kernel BTF.
    Btf(Vec<BtfArg>),
    /// fentry/fexit: the function's typed arguments in u64 slots, then (at
    /// fexit) its return value of type `ret` in the next slot.
    Function { args: Vec<BtfArg>, ret: KTypeId },
}

/// How a probe argument (`argN`, `retval`, a `tp_btf` argument) is read
/// from the context; the probe's provider decides.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgRead {
    /// The u64 at this byte offset of the context: a `pt_regs` register or
    /// an argument slot.
    Slot(u16),
    /// A USDT argument, where its note says.
    Usdt(UsdtArgSpec),
    /// A function argument the caller pushed: the u64 this many bytes above
    /// the return address, at the function's first instruction (user memory).
    Stack(u32),
}

/// One argument of a BTF tracepoint; the Nth argument is the Nth u64 of the context.
#[derive(Clone, Debug, PartialEq)]
pub struct BtfArg {
    pub name: String,
    pub ty: KTypeId,
}

/// Where a USDT argument lives when the probe fires.
#[derive(Clone, Debug, PartialEq)]
pub enum UsdtArgSpec {
    Register {
        pt_regs_offset: u16,
        size: u8,
        signed: bool,
    },
    Constant(i64),
    /// In user memory at `base + index * scale + displacement`
    /// (`N@disp(%base)`, `N@disp(%base,%index,scale)`, `N@sym(%rip)`).
    Memory {
        /// The base register's offset in `struct pt_regs`; `None` for `disp(,%index,scale)`.
        base_offset: Option<u16>,
        index: Option<UsdtIndex>,
        displacement: i64,
        size: u8,
        signed: bool,
    },
}

impl UsdtArgSpec {
    /// A constant argument `size@$value`: the assembler writes the value as
    /// the compiler saw it (`4@$-202182160` for `(uint32_t)0xf3f2f1f0`), so
    /// the argument's size and signedness decide what the program sees.
    pub fn constant(value: i64, size: u8, signed: bool) -> UsdtArgSpec {
        let bits = u32::from(size.clamp(1, 8)) * 8;
        let unused = 64 - bits;
        let value = match signed {
            true => (value << unused) >> unused,
            false => ((value as u64) << unused >> unused) as i64,
        };
        UsdtArgSpec::Constant(value)
    }
}

/// The scaled index register of a USDT memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtIndex {
    pub pt_regs_offset: u16,
    /// 1, 2, 4 or 8.
    pub scale: u8,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TracepointField {
    pub name: String,
    pub offset: u32,
    pub kind: FieldKind,
    /// The C type as the format file writes it (`struct __kernel_timespec *`),
    /// which types pointer fields.
    pub c_type: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FieldKind {
    Int {
        size: u8,
        signed: bool,
    },
    /// `char name[N]`
    CharArray(u32),
    /// `__data_loc char[] name`
    DataLocString,
    /// A pointer; `user` when it points into user memory (syscall arguments).
    Pointer {
        user: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Constants keep the value of their C type: unsigned ones zero-extend, signed ones sign-extend.
    #[test]
    fn constants_take_their_size_and_sign() {
        let constant = |value, size, signed| match UsdtArgSpec::constant(value, size, signed) {
            UsdtArgSpec::Constant(value) => value,
            other => panic!("not a constant: {other:?}"),
        };
        assert_eq!(constant(-202182160, 4, false), 4092785136);
        assert_eq!(constant(-202182160, 4, true), -202182160);
        assert_eq!(constant(-3600, 2, false), 61936);
        assert_eq!(constant(-16, 1, false), 240);
        assert_eq!(constant(-16, 1, true), -16);
        assert_eq!(constant(-7, 8, false), -7);
    }
}
