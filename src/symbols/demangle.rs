//! Demangling of user function names. Rust (legacy `_ZN…E` and v0 `_R…`)
//! and C++ (Itanium `_Z…`) names are demangled, every other name is kept: a
//! C function called `c`, `b` or `a` is a valid mangled *type* to a C++
//! demangler (`char`, `bool`, `signed char`), which is why blazesym's own
//! demangling (it tries C++ on names of unknown language) is not used.
//!
//! C++ names read as bpftrace 0.17 shows them (`_ZN2ns4funcEi` →
//! `ns::func(int)`), to match uprobe function patterns and to print `func`,
//! `usym` and `ustack`; `BPFTRACE_NO_CPP_DEMANGLE=1` keeps printed names
//! mangled, as in bpftrace, while patterns still match demangled names.

use cpp_demangle::Symbol;

/// The environment variable that turns demangling of printed names off.
pub const NO_CPP_DEMANGLE: &str = "BPFTRACE_NO_CPP_DEMANGLE";

/// Whether printed C++ names are demangled: unless `BPFTRACE_NO_CPP_DEMANGLE`
/// is set to a number other than 0.
pub fn cpp_demangling() -> bool {
    let value = std::env::var(NO_CPP_DEMANGLE).unwrap_or_default();
    value.trim().parse::<u64>().map_or(true, |n| n == 0)
}

/// The demangled form of an Itanium C++ symbol; `None` for other names.
pub fn demangle_cpp(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let symbol = Symbol::new(name).ok()?;
    symbol.demangle().ok()
}

/// `name` demangled when it carries a Rust or C++ mangling prefix.
pub fn demangle(name: &str) -> String {
    if (name.starts_with("_R") || name.starts_with("_ZN"))
        && let Ok(rust) = rustc_demangle::try_demangle(name)
    {
        // `{:#}` leaves out the legacy scheme's hash suffix.
        return format!("{rust:#}");
    }
    demangle_cpp(name).unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functions, overloads, const methods and templates read as c++filt prints them.
    #[test]
    fn demangles_as_cxxfilt() {
        assert_eq!(
            demangle_cpp("_ZN2ns4funcEi").as_deref(),
            Some("ns::func(int)")
        );
        assert_eq!(
            demangle_cpp("_ZN2ns4funcEl").as_deref(),
            Some("ns::func(long)")
        );
        assert_eq!(
            demangle_cpp("_ZNK2ns6Widget4sizeEi").as_deref(),
            Some("ns::Widget::size(int) const")
        );
        assert_eq!(demangle_cpp("_Z4deepi").as_deref(), Some("deep(int)"));
    }

    /// C names and malformed manglings stay as they are, even those a C++
    /// demangler reads as types.
    #[test]
    fn keeps_c_names() {
        assert_eq!(demangle_cpp("malloc"), None);
        assert_eq!(demangle_cpp("_Zjunk"), None);
        for name in [
            "c",
            "b",
            "a",
            "main",
            "spin_here",
            "_start",
            "__libc_start_main",
        ] {
            assert_eq!(demangle(name), name);
        }
    }

    /// Rust (both schemes, hash dropped) and C++ names are demangled.
    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN10spin_sleep4main17h0123456789abcdefE"),
            "spin_sleep::main"
        );
        assert_eq!(demangle("_RNvCs1234_10spin_sleep4main"), "spin_sleep::main");
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(demangle("_Zbad"), "_Zbad");
    }
}
