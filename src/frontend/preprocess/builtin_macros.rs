//! Macros wprof defines itself: the compiler's predefined macros (system
//! headers test them) and the task-state macros of the kernel's
//! `<linux/sched.h>`, which no file on a distribution holds (the UAPI
//! `/usr/include/linux/sched.h` lacks them) and BTF does not describe.

/// Defined before any text is read, as gcc 12 on x86-64 Linux defines them
/// (the subset headers test), plus `_LINUX_TYPES_H` as bpftrace does, so
/// kernel headers do not declare types BTF provides.
pub const PREDEFINED: &[(&str, &str)] = &[
    ("__STDC__", "1"),
    ("__STDC_VERSION__", "201710L"),
    ("__STDC_HOSTED__", "1"),
    ("__GNUC__", "12"),
    ("__GNUC_MINOR__", "2"),
    ("__GNUC_PATCHLEVEL__", "0"),
    ("__x86_64__", "1"),
    ("__x86_64", "1"),
    ("__amd64__", "1"),
    ("__amd64", "1"),
    ("__linux__", "1"),
    ("__linux", "1"),
    ("__gnu_linux__", "1"),
    ("__unix__", "1"),
    ("__unix", "1"),
    ("__ELF__", "1"),
    ("__LP64__", "1"),
    ("_LP64", "1"),
    ("__CHAR_BIT__", "8"),
    ("__SIZEOF_SHORT__", "2"),
    ("__SIZEOF_INT__", "4"),
    ("__SIZEOF_LONG__", "8"),
    ("__SIZEOF_LONG_LONG__", "8"),
    ("__SIZEOF_POINTER__", "8"),
    ("__SIZEOF_SIZE_T__", "8"),
    ("__SIZEOF_WCHAR_T__", "4"),
    ("__SIZEOF_INT128__", "16"),
    ("__SCHAR_MAX__", "0x7f"),
    ("__SHRT_MAX__", "0x7fff"),
    ("__INT_MAX__", "0x7fffffff"),
    ("__LONG_MAX__", "0x7fffffffffffffffL"),
    ("__LONG_LONG_MAX__", "0x7fffffffffffffffLL"),
    ("__WCHAR_MAX__", "0x7fffffff"),
    ("__WCHAR_MIN__", "(-__WCHAR_MAX__ - 1)"),
    ("__SIZE_MAX__", "0xffffffffffffffffUL"),
    ("__PTRDIFF_MAX__", "0x7fffffffffffffffL"),
    ("__INTMAX_MAX__", "0x7fffffffffffffffL"),
    ("__UINTMAX_MAX__", "0xffffffffffffffffUL"),
    ("__ORDER_LITTLE_ENDIAN__", "1234"),
    ("__ORDER_BIG_ENDIAN__", "4321"),
    ("__ORDER_PDP_ENDIAN__", "3412"),
    ("__BYTE_ORDER__", "__ORDER_LITTLE_ENDIAN__"),
    ("_LINUX_TYPES_H", "1"),
];

/// Defined when the kernel's BTF is readable, as bpftrace does; scripts
/// test it to choose between BTF types and their own definitions.
pub const HAVE_BTF: &str = "BPFTRACE_HAVE_BTF";

/// The header whose kernel version defines [`TASK_STATES`].
pub const SCHED_HEADER: &str = "linux/sched.h";

/// The header wprof supplies that defines macro `name`, for the help of a
/// script that uses it without including it.
pub fn header_defining(name: &str) -> Option<&'static str> {
    TASK_STATES
        .iter()
        .any(|(state, _)| *state == name)
        .then_some(SCHED_HEADER)
}

/// The kernel's task states (Linux 6.x `include/linux/sched.h`), defined
/// by `#include <linux/sched.h>` unless the header found defines them.
pub const TASK_STATES: &[(&str, &str)] = &[
    ("TASK_RUNNING", "0x00000000"),
    ("TASK_INTERRUPTIBLE", "0x00000001"),
    ("TASK_UNINTERRUPTIBLE", "0x00000002"),
    ("__TASK_STOPPED", "0x00000004"),
    ("__TASK_TRACED", "0x00000008"),
    ("EXIT_DEAD", "0x00000010"),
    ("EXIT_ZOMBIE", "0x00000020"),
    ("EXIT_TRACE", "(EXIT_ZOMBIE | EXIT_DEAD)"),
    ("TASK_PARKED", "0x00000040"),
    ("TASK_DEAD", "0x00000080"),
    ("TASK_WAKEKILL", "0x00000100"),
    ("TASK_WAKING", "0x00000200"),
    ("TASK_NOLOAD", "0x00000400"),
    ("TASK_NEW", "0x00000800"),
    ("TASK_RTLOCK_WAIT", "0x00001000"),
    ("TASK_FREEZABLE", "0x00002000"),
    ("TASK_FROZEN", "0x00008000"),
    ("TASK_STATE_MAX", "0x00010000"),
    ("TASK_ANY", "(TASK_STATE_MAX-1)"),
    ("TASK_KILLABLE", "(TASK_WAKEKILL | TASK_UNINTERRUPTIBLE)"),
    ("TASK_STOPPED", "(TASK_WAKEKILL | __TASK_STOPPED)"),
    ("TASK_TRACED", "__TASK_TRACED"),
    ("TASK_IDLE", "(TASK_UNINTERRUPTIBLE | TASK_NOLOAD)"),
    ("TASK_NORMAL", "(TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE)"),
    (
        "TASK_REPORT",
        "(TASK_RUNNING | TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE | __TASK_STOPPED | \
         __TASK_TRACED | EXIT_DEAD | EXIT_ZOMBIE | TASK_PARKED)",
    ),
    ("TASK_REPORT_IDLE", "(TASK_REPORT + 1)"),
    ("TASK_REPORT_MAX", "(TASK_REPORT_IDLE << 1)"),
];

/// The letter `sched_switch` prints for each reported state (its format's
/// `__print_flags` table, and `R` for 0), by macro name.
pub const REPORTED_STATE_LETTERS: &[(&str, char)] = &[
    ("TASK_RUNNING", 'R'),
    ("TASK_INTERRUPTIBLE", 'S'),
    ("TASK_UNINTERRUPTIBLE", 'D'),
    ("__TASK_STOPPED", 'T'),
    ("__TASK_TRACED", 't'),
    ("EXIT_DEAD", 'X'),
    ("EXIT_ZOMBIE", 'Z'),
    ("TASK_PARKED", 'P'),
    ("TASK_REPORT_IDLE", 'I'),
];
