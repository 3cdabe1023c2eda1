//! The x86-64 machine as BPF programs see it: the registers in `struct
//! pt_regs` (the context of uprobes and kprobes) by byte offset, which of them
//! carry a function's arguments and its return value, and the names USDT
//! argument specs give them. The one place this ABI is written down: the
//! probe providers, record lowering and the USDT decoder all read it here.

/// Byte offsets of the registers in `struct pt_regs`.
pub const R15: u16 = 0;
pub const R14: u16 = 8;
pub const R13: u16 = 16;
pub const R12: u16 = 24;
pub const RBP: u16 = 32;
pub const RBX: u16 = 40;
pub const R11: u16 = 48;
pub const R10: u16 = 56;
pub const R9: u16 = 64;
pub const R8: u16 = 72;
pub const RAX: u16 = 80;
pub const RCX: u16 = 88;
pub const RDX: u16 = 96;
pub const RSI: u16 = 104;
pub const RDI: u16 = 112;
/// The system call number at a system call's entry; -1 at every other
/// entry into the kernel (interrupts, exceptions).
pub const ORIG_RAX: u16 = 120;
pub const RIP: u16 = 128;
pub const RSP: u16 = 152;

/// The members of `struct pt_regs` by the names `reg()` takes (bpftrace's,
/// the kernel's without the `r`/`e` prefix), each 8 bytes from offset 0.
const PT_REGS_NAMES: [&str; 21] = [
    "r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx", "si", "di",
    "orig_ax", "ip", "cs", "flags", "sp", "ss",
];

/// The `pt_regs` offset of the register `reg(name)` reads.
pub fn pt_regs_offset(name: &str) -> Option<u16> {
    let index = PT_REGS_NAMES.iter().position(|n| *n == name)?;
    Some(index as u16 * 8)
}

/// Every name [`pt_regs_offset`] knows, for error messages.
pub fn pt_regs_names() -> &'static [&'static str] {
    &PT_REGS_NAMES
}

/// The registers holding a function's first six integer arguments (System V).
pub const ARGUMENTS: [u16; 6] = [RDI, RSI, RDX, RCX, R8, R9];
/// The register holding a function's return value.
pub const RETURN_VALUE: u16 = RAX;
/// The stack pointer: at a function's first instruction it points at the
/// return address into the caller.
pub const STACK_POINTER: u16 = RSP;

/// An x86-64 register as a field of `struct pt_regs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    /// The 64-bit register holding the value (`rdi` for `%edi` and `%dil`).
    pub name: &'static str,
    /// Byte offset of the register in `struct pt_regs`.
    pub pt_regs_offset: u16,
    /// `%ah`, `%bh`, `%ch`, `%dh`: the value is bits 8..16.
    pub high_byte: bool,
}

/// 64-bit registers, their `pt_regs` offsets and their narrower names.
const REGISTERS: [(&str, u16, &[&str]); 17] = [
    ("r15", R15, &["r15d", "r15w", "r15b", "r15l"]),
    ("r14", R14, &["r14d", "r14w", "r14b", "r14l"]),
    ("r13", R13, &["r13d", "r13w", "r13b", "r13l"]),
    ("r12", R12, &["r12d", "r12w", "r12b", "r12l"]),
    ("rbp", RBP, &["ebp", "bp", "bpl"]),
    ("rbx", RBX, &["ebx", "bx", "bl"]),
    ("r11", R11, &["r11d", "r11w", "r11b", "r11l"]),
    ("r10", R10, &["r10d", "r10w", "r10b", "r10l"]),
    ("r9", R9, &["r9d", "r9w", "r9b", "r9l"]),
    ("r8", R8, &["r8d", "r8w", "r8b", "r8l"]),
    ("rax", RAX, &["eax", "ax", "al"]),
    ("rcx", RCX, &["ecx", "cx", "cl"]),
    ("rdx", RDX, &["edx", "dx", "dl"]),
    ("rsi", RSI, &["esi", "si", "sil"]),
    ("rdi", RDI, &["edi", "di", "dil"]),
    ("rip", RIP, &["eip"]),
    ("rsp", RSP, &["esp", "sp", "spl"]),
];

impl Register {
    /// Parses a register name without its `%`.
    pub fn parse(name: &str) -> Option<Register> {
        let high = ["ah", "bh", "ch", "dh"].iter().position(|&h| h == name);
        if let Some(i) = high {
            let wide = ["rax", "rbx", "rcx", "rdx"][i];
            return Register::parse(wide).map(|r| Register {
                high_byte: true,
                ..r
            });
        }
        REGISTERS
            .iter()
            .find(|(wide, _, narrow)| *wide == name || narrow.contains(&name))
            .map(|&(wide, offset, _)| Register {
                name: wide,
                pt_regs_offset: offset,
                high_byte: false,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reg()` names agree with the named offsets.
    #[test]
    fn register_names() {
        assert_eq!(pt_regs_offset("ip"), Some(RIP));
        assert_eq!(pt_regs_offset("sp"), Some(RSP));
        assert_eq!(pt_regs_offset("di"), Some(RDI));
        assert_eq!(pt_regs_offset("bp"), Some(RBP));
        assert_eq!(pt_regs_offset("rip"), None);
    }

    /// Narrow and high-byte names map to their 64-bit register; the argument
    /// registers are rdi, rsi, rdx, rcx, r8, r9.
    #[test]
    fn names_and_arguments() {
        assert_eq!(Register::parse("edi").map(|r| r.pt_regs_offset), Some(RDI));
        assert_eq!(Register::parse("r15b").map(|r| r.name), Some("r15"));
        assert!(Register::parse("ah").is_some_and(|r| r.high_byte && r.name == "rax"));
        assert_eq!(Register::parse("xmm0"), None);
        let names: Vec<&str> = ARGUMENTS
            .iter()
            .map(|&at| REGISTERS.iter().find(|r| r.1 == at).expect("a register").0)
            .collect();
        assert_eq!(names, ["rdi", "rsi", "rdx", "rcx", "r8", "r9"]);
    }
}
