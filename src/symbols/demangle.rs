//! C++ names as bpftrace 0.17 shows them: a mangled symbol (`_ZN2ns4funcEi`)
//! → its demangled form (`ns::func(int)`), used to match uprobe function
//! patterns and to print `func`, `usym` and `ustack`. Setting
//! `BPFTRACE_NO_CPP_DEMANGLE=1` keeps printed names mangled, as in bpftrace;
//! patterns still match demangled names.

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

    /// C names and malformed manglings stay as they are.
    #[test]
    fn other_names_are_not_demangled() {
        assert_eq!(demangle_cpp("malloc"), None);
        assert_eq!(demangle_cpp("_Zjunk"), None);
    }
}
